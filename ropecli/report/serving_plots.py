"""Loss against request length per candidate, one panel per runtime (`compare --workload --plot`)."""

from __future__ import annotations

from pathlib import Path

from ropecli.report.plots import plt, save


def serving_path(path: str) -> str:
    """Where `compare --workload --plot ppl.png` draws it: ppl-serving.png beside it."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}-serving{p.suffix}"))


def plot_serving(serving: dict, train_len: int, path: str, title: str) -> None:
    """Mean NLL per token at each request length of the workload, a line per candidate and export (dashed:
    --consistent), one colour per candidate, a panel per runtime, L marked."""
    runtimes = list(serving["runtimes"])
    shares = {int(n): w for n, w in serving["workload"]["shares"].items()}
    fig, axes = plt.subplots(1, len(runtimes), figsize=(5.2 * len(runtimes), 4.2), sharey=True, squeeze=False)
    names = list(dict.fromkeys(r["candidate"] for b in serving["runtimes"].values() for r in b["rows"]))
    color = {name: f"C{i % 10}" for i, name in enumerate(names)}  # one colour per candidate in every panel
    for ax, runtime in zip(axes[0], runtimes):
        for r in serving["runtimes"][runtime]["rows"]:
            if "nll" not in r:
                continue
            xs = sorted(int(n) for n in r["nll"])
            label = r["candidate"] + (" (--consistent)" if r["consistent"] else "")
            ax.plot(xs, [r["nll"][str(n)] for n in xs], marker="o", label=label, color=color[r["candidate"]],
                    linestyle="--" if r["consistent"] else "-")
        ax.axvline(train_len, color="k", linestyle=":", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_title(runtime)
        ax.set_xlabel("request length (tokens); shares " + ", ".join(f"{n}: {w:.0%}" for n, w in shares.items()))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("mean NLL per token (nats)")
    axes[0][0].legend(fontsize=7, loc="best")  # the first panel (transformers) draws every candidate and export
    fig.suptitle(title)
    save(fig, path)
