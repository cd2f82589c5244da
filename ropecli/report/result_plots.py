"""Figures of measured results (Agg backend, PNG/SVG/PDF by the file's suffix): PPL vs length, the
b search, passkey heatmaps, KL, a parameter search's map, advise's ranking and short-context cost.
The evaluations' figures take their results (`ropecli.evaluation.results`); the search's and advise's take the rows
their commands print. Figures of schedules alone are in `ropecli.report.plots`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ropecli.evaluation.metrics import PPL, metric_record
from ropecli.evaluation.results import EvalResult, PplResult
from ropecli.evaluation.stats import ppl_half_width
from ropecli.report.plots import check_out, plt, save, ticker


def plot_ppl_vs_length(results: list[PplResult], path: str, title: str) -> Path:
    """PPL vs evaluation length, one curve per method (log-log), error bars from the window spread.
    A method and its log-n variant share a color; the log-n curve is dashed."""
    fig, ax = plt.subplots(figsize=(8, 5))
    by_label: dict[str, list[PplResult]] = {}
    for r in results:
        by_label.setdefault(r.label, []).append(r)
    bases = list(dict.fromkeys(label.removesuffix("+log-n") for label in by_label))
    cmap = plt.get_cmap("tab10" if len(bases) <= 10 else "tab20")
    for label, rows in by_label.items():
        rows = sorted(rows, key=lambda r: r.len)
        base = label.removesuffix("+log-n")
        ax.errorbar([r.len for r in rows], [r.ppl for r in rows], yerr=[ppl_half_width(r.ppl_err, len(r.window_nll or [])) or 0 for r in rows],
                    marker="o", capsize=3, label=label, color=cmap(bases.index(base) % cmap.N),
                    ls="--" if label.endswith("+log-n") else "-")
    lengths = sorted({r.len for r in results})
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(ticker.FormatStrFormatter("%g"))
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, path)


def plot_search(evaluations: list[dict], references: list[dict], best_b: float, path: str, objective: str, title: str) -> Path:
    """Objective vs b with the evaluated points; error bars are each point's paired 95% half-width
    against the best b, the shaded band the b interval shown equivalent to the best; points stopped
    early drawn as lower bounds (a triangle pointing up, no line through them); references as
    horizontal lines."""
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    finite = [e for e in evaluations if np.isfinite(e["objective"])]
    pts = sorted((e for e in finite if "stopped_early" not in e), key=lambda e: e["b"])
    err = [(e.get("vs_best") or {}).get("half_width") or 0.0 for e in pts]
    ax.errorbar([e["b"] for e in pts], [e["objective"] for e in pts], yerr=err, fmt="o-", color="tab:blue", capsize=3,
                label="evaluated b (± paired 95% half-width vs best)")
    bounds = [e for e in finite if "stopped_early" in e]
    if bounds:
        ax.plot([e["b"] for e in bounds], [e["objective"] for e in bounds], "^", color="tab:gray", ls="none",
                label="stopped early: objective at least this")
    tied = [e["b"] for e in pts if (e.get("vs_best") or {}).get("tied")]
    if len(tied) > 1:
        ax.axvspan(min(tied), max(tied), color="tab:green", alpha=0.12, label="b shown equivalent to the best (paired 95%)")
    ax.axvline(best_b, color="tab:green", ls="--", lw=1, label=f"best b = {best_b:.3f}")
    colors = ["tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:gray", "tab:pink", "tab:olive", "tab:cyan"]
    for ref, c in zip(references, colors):
        if np.isfinite(ref["objective"]):
            ax.axhline(ref["objective"], color=c, ls=":", lw=1.2, label=f"{ref['label']}: {ref['objective']:.4f}")
    ax.set_xlabel("mixed exponent b (0 = PI, 1 = NTK-fixed)")
    ax.set_ylabel(f"mean {metric_record(objective).measure} over lengths")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return save(fig, path)


def plot_passkey_heatmaps(results: list[EvalResult], path: str, title: str) -> Path:
    """Passkey accuracy, depth (rows, 0 at the top) x length (columns), one panel per method: the
    picture of the YaRN and LongRoPE papers. Every cell carries its accuracy as a number."""
    labels = list(dict.fromkeys(r.label for r in results))  # a label carries its +log-n
    lengths = sorted({r.len for r in results})
    depths = sorted({d["depth"] for r in results for d in r.by_depth})
    if len(lengths) == 1:  # one length (advise's longest target): one panel, a column per method
        return _passkey_one_length(results, labels, depths, path, title)
    cols = min(3, len(labels))
    rows = -(-len(labels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(0.9 * len(lengths) * cols + 2.5, 0.45 * len(depths) * rows + 1.6),
                             squeeze=False, layout="constrained")  # rows of panels: titles clear the labels above
    image = None
    for panel, (ax, label) in enumerate(zip(axes.flat, labels)):
        grid = np.full((len(depths), len(lengths)), np.nan)
        for r in results:
            if r.label != label:
                continue
            for d in r.by_depth:
                grid[depths.index(d["depth"]), lengths.index(r.len)] = d["accuracy"]
        image = _accuracy_image(ax, grid)
        ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], fontsize=8)
        first_col = panel % cols == 0  # depth ticks and label on the left column only: panels sit close
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths] if first_col else [], fontsize=8)
        ax.set_xlabel("length (tokens)", fontsize=8)
        if first_col:
            ax.set_ylabel("depth of the key (0 = farthest)", fontsize=8)
        ax.set_title(label, fontsize=9)
    for ax in list(axes.flat)[len(labels):]:
        ax.axis("off")
    fig.colorbar(image, ax=axes, shrink=0.8, label="passkey accuracy")
    fig.suptitle(title, fontsize=10)
    p = check_out(path)
    fig.savefig(p, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return p


def _accuracy_image(ax, grid: np.ndarray):
    """Accuracy cells (rows x columns, NaN = not measured) coloured red to green, each with its value."""
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    for (i, j), v in np.ndenumerate(grid):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.0%}" if v not in (0, 1) else f"{int(v * 100)}%", ha="center", va="center", fontsize=8)
    return image


def _passkey_one_length(results: list[EvalResult], labels: list[str], depths: list[float], path: str, title: str) -> Path:
    """Depth (rows) x method (columns) at a single length: narrow per-method panels would crowd their titles."""
    grid = np.full((len(depths), len(labels)), np.nan)  # (depths, methods)
    for r in results:
        j = labels.index(r.label)
        for d in r.by_depth:
            grid[depths.index(d["depth"]), j] = d["accuracy"]
    fig, ax = plt.subplots(figsize=(0.75 * len(labels) + 3.0, 0.45 * len(depths) + 2.8), layout="constrained")
    image = _accuracy_image(ax, grid)
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=8)
    ax.set_ylabel("depth of the key (0 = farthest)", fontsize=8)
    n = results[0].len
    ax.set_title(title if str(n) in title else f"{title} ({n} tokens)", fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8, label="passkey accuracy")
    p = check_out(path)
    fig.savefig(p, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return p


def plot_kl(results: list[EvalResult], path: str, title: str) -> Path:
    """Mean KL (bars, log axis) and top-1 agreement (dots) per method at each length."""
    results = sorted(results, key=lambda r: (r.len, r.kl_mean))
    names = [f"{r.label} @ {r.len}" for r in results]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(results) + 1.8))
    y = np.arange(len(results))
    ax.barh(y, [max(r.kl_mean, 1e-8) for r in results], color="tab:blue", alpha=0.8, label="mean KL (nats/token)")
    ax.set_xscale("log")
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean KL(unscaled || scaled), nats per token (log axis; 1e-8 = identical)")
    twin = ax.twiny()
    twin.plot([r.top1_agreement for r in results], y, "o", color="tab:red", label="top-1 agreement (%)")
    twin.set_xlim(0, 100.5)
    twin.set_xlabel("top-1 agreement with the unscaled model (%)", color="tab:red")
    ax.set_title(title, fontsize=10)
    return save(fig, path)


def plot_param_search(out: dict, path: str, title: str) -> Path:
    """The evaluated points of `ropecli search`: objective vs the parameter (one parameter), or a map
    of the first two parameters coloured by objective, numbered in evaluation order, best starred."""
    evals = [e for e in out["evaluations"] if np.isfinite(e["objective"]) and not e.get("violates_guard")]
    names = [d["name"] for d in out["vary"]]
    best = out["best_params"]
    fig, ax = plt.subplots(figsize=(8, 6) if len(names) > 1 else (8, 5))
    if len(names) == 1:
        pts = sorted((e for e in evals if "stopped_early" not in e), key=lambda e: e["params"][names[0]])
        ax.plot([e["params"][names[0]] for e in pts], [e["objective"] for e in pts], "o-", color="tab:blue")
        bounds = [e for e in evals if "stopped_early" in e]
        if bounds:
            ax.plot([e["params"][names[0]] for e in bounds], [e["objective"] for e in bounds], "^", color="tab:gray",
                    ls="none", label="stopped early: objective at least this")
        ax.axvline(best[names[0]], color="tab:green", ls="--", label=f"best {names[0]} = {best[names[0]]:.4g}")
        ax.set_xlabel(names[0])
        ax.set_ylabel(f"objective ({out['objective_name']})")
        ax.legend(fontsize=8)
    else:
        x = [e["params"][names[0]] for e in evals]
        y = [e["params"][names[1]] for e in evals]
        sc = ax.scatter(x, y, c=[e["objective"] for e in evals], cmap="viridis_r", s=60, edgecolors="black", linewidths=0.5,
                        marker="o")
        early = [e for e in evals if "stopped_early" in e]
        if early:  # their colour is a lower bound of the objective
            ax.scatter([e["params"][names[0]] for e in early], [e["params"][names[1]] for e in early], s=140,
                       facecolors="none", edgecolors="tab:red", linewidths=1.0, label="stopped early (colour: a lower bound)")
        for i, e in enumerate(out["evaluations"]):
            if e in evals:
                ax.annotate(str(i + 1), (e["params"][names[0]], e["params"][names[1]]), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
        ax.plot([best[names[0]]], [best[names[1]]], marker="*", color="red", ms=18, mec="black",
                label=f"best {', '.join(f'{n}={best[n]:.3g}' for n in names)}")
        bad = [e for e in out["evaluations"] if e not in evals]
        if bad:
            ax.scatter([e["params"][names[0]] for e in bad], [e["params"][names[1]] for e in bad], marker="x", color="gray",
                       label="guard broken / diverged")
        for d, setter in zip(out["vary"][:2], (ax.set_xscale, ax.set_yscale)):
            if d["log"]:
                setter("log")
        fig.colorbar(sc, ax=ax, label=f"objective ({out['objective_name']}; lower is better)")
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
        ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    return save(fig, path)


def plot_advice_ppl(rows: list[dict], lengths: list[int], path: str, title: str, winner: str | None = None) -> Path:
    """PPL vs length per candidate with error bars (95% half-width across its windows), log axes. With
    one length, a ranked dot plot instead (a line plot would stack every candidate on one x)."""
    if len(lengths) == 1:
        return _ppl_dots(rows, lengths[0], path, title, winner)
    fig, ax = plt.subplots(figsize=(8, 5.2))
    for r in sorted(rows, key=lambda r: r["objective"]):
        ppl = [r[PPL.field][str(n)] for n in lengths]
        err = [ppl_half_width(r["ppl_err"][str(n)], len(r["windows"])) or 0.0 for n in lengths]
        ax.errorbar(lengths, ppl, yerr=err, marker="o", capsize=3, lw=2.6 if r["candidate"] == winner else 1.2,
                    label=f"{r['candidate']}: {r['label']}"[:60] + (" (winner)" if r["candidate"] == winner else ""))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel("length (tokens)")
    ax.set_ylabel("perplexity (held-out windows)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, path)


def _ppl_dots(rows: list[dict], n: int, path: str, title: str, winner: str | None) -> Path:
    rows = sorted(rows, key=lambda r: r["objective"])
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(rows) + 1.8))
    y = np.arange(len(rows))
    ppl = [r[PPL.field][str(n)] for r in rows]
    err = [ppl_half_width(r["ppl_err"][str(n)], len(r["windows"])) or 0.0 for r in rows]
    colors = ["tab:green" if r["candidate"] == winner else "tab:orange" if r.get("tied") else "tab:blue" for r in rows]
    ax.errorbar(ppl, y, xerr=err, fmt="none", ecolor="gray", capsize=3)
    ax.scatter(ppl, y, c=colors, zorder=3)
    ax.set_yticks(y, [r["candidate"] if r["label"] == r["candidate"] else f"{r['candidate']}: {r['label']}"[:60]
                      for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel(f"perplexity at {n} tokens, held-out windows (± 95% half-width); green: winner, orange: shown "
                  "equivalent to the best")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", axis="x", alpha=0.3)
    return save(fig, path)


def plot_short_cost(rows: list[dict], path: str, title: str) -> Path:
    """Short-context cost per candidate: mean KL at L (bars) and the PPL rise at L (dots)."""
    rows = sorted(rows, key=lambda r: r["short_kl"])
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.8))
    y = np.arange(len(rows))
    ax.barh(y, [max(r["short_kl"], 1e-6) for r in rows], color="tab:blue", alpha=0.8)
    ax.set_xscale("log")
    ax.set_yticks(y, [r["candidate"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("mean KL(unscaled || scaled) at L, nats/token (bars; log axis, 1e-6 = none)")
    twin = ax.twiny()
    twin.plot([r["short_rise_percent"] for r in rows], y, "o", color="tab:red")
    twin.set_xlabel("PPL rise at L, % (dots)", color="tab:red")
    ax.set_title(title, fontsize=10)
    return save(fig, path)
