"""Paired comparisons: is a difference between two schedules above the noise of the windows?

Every candidate is scored on the same windows (or the same passkey prompts), so differences are
paired: for candidate x and the best y, d_i = x_i - y_i per window i (per-window mean NLL for PPL,
answer NLL per prompt for passkey, mean KL per window for KL; with several lengths, x_i is the mean
over lengths of window i's values, window i being the i-th window at each length). Then

    diff = mean(d),   se = std(d, ddof=1) / sqrt(n),   half = t(0.975, n-1) * se

and x is *distinguishable* from y at 95% when |diff| > half (a two-sided paired t-test). With one
window there is no spread: se is None and nothing is called distinguishable. With identical values
on every window (se = 0) a non-zero diff is distinguishable. Pairing removes what every schedule
shares (how hard a window's text is), which is most of the across-window spread: a 0.003-nat gap can
be real with 4 windows when the paired spread is small, and noise when it is not.
"""

from __future__ import annotations

import math

import numpy as np

CONFIDENCE = 0.95


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t critical value, e.g. 2.776 for df = 4 at 95%."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


def paired_difference(x, y) -> dict:
    """x - y over paired units: {diff, se, half_width, n, distinguishable} (nats when x, y are NLLs)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired values need the same non-empty 1-D shape, got {x.shape} and {y.shape}")
    d = x - y
    n = d.size
    diff = float(d.mean())
    if not np.all(np.isfinite(d)):
        return {"diff": diff if math.isfinite(diff) else None, "se": None, "half_width": None, "n": n,
                "distinguishable": bool(np.isfinite(x).sum() != np.isfinite(y).sum())}
    if n < 2:
        return {"diff": diff, "se": None, "half_width": None, "n": n, "distinguishable": False}
    se = float(d.std(ddof=1) / math.sqrt(n))
    half = t_quantile(n - 1) * se
    return {"diff": diff, "se": se, "half_width": half, "n": n,
            "distinguishable": bool(abs(diff) > half) if se > 0 else diff != 0.0}


def rank_against_best(values: dict) -> dict:
    """label -> paired difference to the best label (the lowest mean), with `best` and `tied` (not
    distinguishable from the best at 95%; the best is tied with itself)."""
    finite = {k: v for k, v in values.items() if np.all(np.isfinite(v))}
    if not finite:
        return {k: {"best": False, "tied": False, "diff": None, "se": None, "half_width": None, "n": len(v),
                    "distinguishable": True} for k, v in values.items()}
    best = min(finite, key=lambda k: float(np.mean(finite[k])))
    out = {}
    for k, v in values.items():
        p = paired_difference(v, values[best])
        out[k] = {**p, "best": k == best, "tied": k == best or not p["distinguishable"]}
    return out


def mean_over_lengths(per_length: list[list[float]]) -> list[float]:
    """Per-window values at several lengths -> one value per window index (the mean over lengths)."""
    arr = np.asarray([[math.inf if v is None else v for v in row] for row in per_length], dtype=np.float64)
    return [float(v) for v in arr.mean(axis=0)]


def attach_paired(results: list) -> list[dict]:
    """The results (EvalResults) as JSON rows, each with `vs_best`: its paired difference to the best
    result of the same metric and length (the best by mean of `values`: lowest NLL, answer NLL or KL),
    and whether it is tied with it."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(results):
        groups.setdefault((r.metric, r.len), []).append(i)
    out = [r.to_json() for r in results]
    for idx in groups.values():
        ranked = rank_against_best({i: results[i].values for i in idx})
        for i in idx:
            out[i]["vs_best"] = ranked[i]
    return out


def fmt_diff(p: dict) -> str:
    """'+0.0214 ± 0.0031' (nats, ± one standard error); 'best' for the best; '—' without a number."""
    if p.get("best"):
        return "best"
    if p.get("diff") is None:
        return "—"
    se = f" ± {p['se']:.2g}" if p.get("se") is not None else ""
    return f"{p['diff']:+.4f}{se}"
