"""advise's task guard (`--task-guard TASK`): retrieval at the target must not be shown worse than the model
as shipped retrieves within its shipped length.

For a candidate, the RULER task's per-prompt answer NLL at the longest target (its prompts) against the
reference's (the model as shipped: native, or unscaled RoPE) at Ls (its prompts, of another length, so the
two samples are independent): Welch's unpaired difference, candidate minus reference. The candidate is out
when the one-sided (1 - LEVEL) lower bound of the difference exceeds the margin: shown worse by more than
the margin. Not shown worse (too few prompts to tell included) keeps it in: a guard excludes on evidence,
like the other constraints. Each test spends LEVEL; the error budget counts one test per candidate guarded.
"""

from __future__ import annotations

import math

import numpy as np

from ropecli.deferred import deferred
from ropecli.evaluation.inference import CONFIDENCE

stats = deferred("scipy.stats")

LEVEL = (1 - CONFIDENCE) / 2  # one-sided 0.025 per candidate tested


def welch(x: list[float], y: list[float], level: float = LEVEL) -> dict:
    """mean(x) - mean(y) for independent samples: {diff, se, df, lower} (lower: one-sided (1 - level) bound)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    diff = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return {"diff": diff, "se": None, "df": None, "lower": None}
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    if se == 0:
        return {"diff": diff, "se": 0.0, "df": None, "lower": diff}
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))  # Welch–Satterthwaite
    return {"diff": diff, "se": se, "df": df, "lower": diff - float(stats.t.ppf(1 - level, df)) * se}


def guard_row(task: str, candidate, reference, margin: float) -> dict:
    """The guard's record for one candidate (TaskResults at the target and the reference's at Ls)."""
    w = welch(candidate.values, reference.values)
    worse = w["lower"] is not None and w["lower"] > margin
    return {"task": task, "len": candidate.len, "reference_len": reference.len, "answer_nll": candidate.answer_nll,
            "reference_answer_nll": reference.answer_nll, "gain": candidate.gain, "reference_gain": reference.gain,
            **w, "margin": margin, "level": LEVEL, "worse": worse}


def guard_why(g: dict) -> str:
    return (f"{g['task']} at {g['len']} shown worse than the model as shipped at {g['reference_len']} by "
            f"{g['diff']:+.2f} nats of answer NLL (one-sided {1 - g['level']:.3g} lower bound {g['lower']:+.2f} > "
            f"the ±{g['margin']:g} margin)")


def guard_line(name: str, g: dict) -> str:
    """The winner's guard in words, for the verdict."""
    bound = f", lower bound {g['lower']:+.2f}" if g.get("lower") is not None else ""
    return (f"{g['task']} guard: {name} at {g['len']} against the model as shipped at {g['reference_len']}, "
            f"{g['diff']:+.2f} nats of answer NLL{bound} (not shown worse by more than ±{g['margin']:g}; "
            f"gain {_g(g['gain'])} against {_g(g['reference_gain'])} nats)")


def _g(x) -> str:
    return "—" if x is None else f"{x:+.2f}"
