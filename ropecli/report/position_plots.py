"""Loss by position: the mean NLL of the predictions in each of the window's position bins, one line per
schedule, the training length L marked. Where a schedule breaks (just past L, or everywhere) shows here
and not in the average. Drawn from the results' `position_nll` (`ropecli.evaluation.results`)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ropecli.evaluation.compared import PositionDiff
from ropecli.models.token_losses import position_edges
from ropecli.report.plots import plt, save


def position_path(path: str) -> str:
    """Where `compare --plot ppl.png` draws the loss by position: ppl-position.png beside it."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}-position{p.suffix}"))


class PositionCurve(NamedTuple):
    """One line of the loss-by-position figure: its name, the mean NLL per position bin (None where a bin is empty),
    and its paired difference to the best row bin by bin (`ropecli.evaluation.compared.PositionDiff`; None: not
    paired, or the best itself)."""
    name: str
    nll: list | None
    vs_best: PositionDiff | None = None


def plot_loss_by_position(curves: list[PositionCurve], length: int, train_len: int, path: str, title: str,
                          winner: str | None = None) -> Path | None:
    """Mean NLL per position bin at `length`, one line per curve; with paired curves, a lower panel of their
    differences to the best; None when no curve has bins (every window from a cache entry without them)."""
    drawn = [c for c in curves if c.nll]
    if not drawn:
        return None
    edges = position_edges(length - 1)
    centers = [(a + b) / 2 + 1 for a, b in zip(edges[:-1], edges[1:])]  # prediction t is of token t + 1
    paired = [c for c in drawn if c.vs_best is not None]
    fig, axes = plt.subplots(2 if paired else 1, 1, figsize=(8, 7.5 if paired else 5), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]} if paired else None)
    ax = axes[0, 0]
    cmap = plt.get_cmap("tab10" if len(drawn) <= 10 else "tab20")
    color = {c.name: cmap(i % cmap.N) for i, c in enumerate(drawn)}
    for c in drawn:
        ax.plot(centers, [float("nan") if v is None else v for v in c.nll], marker=".", color=color[c.name],
                lw=2.5 if c.name == winner else 1.3, label=c.name + (" (winner)" if c.name == winner else ""))
    ax.set_ylabel("mean NLL per token (nats)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    if paired:  # the same bins paired window by window against the best of the table: the text's own ups and downs cancel
        best = next((c.name for c in drawn if c.vs_best is None), "the best")
        low = axes[1, 0]
        for c in paired:
            y = [float("nan") if v is None else v for v in c.vs_best.diff]
            hw = [0.0 if h is None else h for h in c.vs_best.half_width]
            low.plot(centers, y, marker=".", lw=1.3, color=color[c.name])
            low.fill_between(centers, [a - h for a, h in zip(y, hw)], [a + h for a, h in zip(y, hw)], color=color[c.name],
                             alpha=0.12)
        low.axhline(0, color="black", lw=0.8)
        low.set_ylabel(f"Δ NLL vs {best}\n(paired, ± 95% per bin)", fontsize=9)
    for a in axes[:, 0]:
        a.grid(True, alpha=0.3)
        if train_len < length:
            a.axvline(train_len, color="black", ls=":", lw=1)
    if train_len < length:
        ax.text(train_len, ax.get_ylim()[1], f" L = {train_len}", va="top", fontsize=8)
    axes[-1, 0].set_xlabel(f"position in the window (tokens; {len(centers)} bins of {length // len(centers)})")
    return save(fig, path)
