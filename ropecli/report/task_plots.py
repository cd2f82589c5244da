"""RULER's heat map for ropecli's task results: the score against the needle's depth (rows) and the
length (columns), one panel per schedule, one figure per task. The score is the answer's likelihood
gain over the needle-free prompt (nats: what the needle is worth to the model), or, for tasks without
a needle (cwe, fwe), the answer NLL; with --generate, RULER's string-match score instead."""

from __future__ import annotations

import math
from pathlib import Path

from ropecli.evaluation.results import EvalResult
from ropecli.evaluation.task_results import TaskResult
from ropecli.report.plots import plt, save


def tasks_path(path: str, task: str) -> str:
    """Where `compare --plot ppl.png --task vt` draws the task: ppl-vt.png beside it."""
    p = Path(path)
    return str(p.with_name(f"{p.stem}-{task}{p.suffix}"))


def score_of(cell: dict, generated: bool) -> tuple[float, str]:
    """(the value drawn, its name) of a by-depth cell."""
    if generated:
        return (math.nan if cell["match"] is None else 100 * cell["match"]), "RULER score (%)"
    if cell.get("gain") is not None:
        return cell["gain"], "answer log-likelihood gain over the needle-free prompt (nats)"
    return (math.nan if cell["answer_nll"] is None else cell["answer_nll"]), "answer NLL (nats)"


def plot_task_heatmap(results: list[EvalResult], task: str, train_len: int, path: str, title: str) -> Path | None:
    """One panel per schedule of `task`'s results (depth x length); None when there are none."""
    rows = [r for r in results if isinstance(r, TaskResult) and r.task == task]
    if not rows:
        return None
    labels = list(dict.fromkeys(r.label for r in rows))
    lengths = sorted({r.len for r in rows})
    depths = [d["depth"] for d in rows[0].by_depth]
    generated = all(r.match is not None for r in rows)
    by = {(r.label, r.len): {d["depth"]: d for d in r.by_depth} for r in rows}
    name = score_of(rows[0].by_depth[0], generated)[1]
    grids = {lab: [[score_of(by[(lab, n)][d], generated)[0] if (lab, n) in by else math.nan for n in lengths]
                   for d in depths] for lab in labels}
    values = [v for g in grids.values() for row in g for v in row if not math.isnan(v)]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    fig, axes = plt.subplots(1, len(labels) + 1, figsize=(1.6 + 2.2 * len(labels) * max(1, len(lengths) / 3), 3.4),
                             squeeze=False, gridspec_kw={"width_ratios": [1] * len(labels) + [0.06]})
    bar, axes = axes[0, -1], axes[:, :-1]
    cmap = "RdYlGn_r" if "NLL" in name and "gain" not in name else "RdYlGn"  # green is good
    for ax, lab in zip(axes[0], labels):
        im = ax.imshow(grids[lab], cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
        ax.set_xticks(range(len(lengths)), [f"{n}" + ("*" if n > train_len else "") for n in lengths], fontsize=8)
        ax.set_yticks(range(len(depths)), ["—" if d is None else f"{d:g}" for d in depths], fontsize=8)
        ax.set_title(lab if len(lab) < 28 else lab[:26] + "…", fontsize=8)
        for i, row in enumerate(grids[lab]):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}", ha="center", va="center", fontsize=7)
        ax.set_xlabel("length (* past L)", fontsize=8)
    axes[0, 0].set_ylabel("needle depth", fontsize=8)
    for ax in axes[0, 1:]:
        ax.tick_params(labelleft=False)
    fig.colorbar(im, cax=bar).set_label(name if len(name) < 40 else name.replace(" over ", "\nover "), fontsize=7)
    fig.suptitle(title, fontsize=9)
    return save(fig, path)
