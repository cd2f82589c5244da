"""Paired comparisons as the commands print them: the inference (`ropecli.evaluation.inference`)
turned into JSON rows, verdict words and table cells.

Every candidate is scored on the same windows (or the same passkey prompts), so differences are
paired: for candidate x and the best y, d_i = x_i - y_i per window i (per-window mean NLL for PPL,
answer NLL per prompt for passkey, mean KL per window for KL; several lengths are paired length by
length). `paired_difference` gives

    diff, se, df, half_width (95%, two-sided), inference (documents / windows / units),
    generalizes_to, verdict (worse / better / equivalent / undecided), needs (what would decide it)

One notation everywhere: "±" is the 95% half-width (t(0.975, df) * se), labelled once per table.
The verdict words are decided at a one-sided level a: by default 0.025 (so "equivalent" means the
95% interval lies inside ±margin, "worse" that it lies above 0); tables that compare K candidates
with the best use a = 0.025 / (K - 1) (`rank_against_best`), a 95% statement for the whole table,
the rule `ropecli advise` ranks by. "Equivalent" is shown, never assumed: a pair that is neither
shown different nor shown equivalent is *undecided*, with the windows (or documents) that would
decide it under the variance model used.
"""

from __future__ import annotations

import math

import numpy as np

from ropecli.evaluation.inference import CONFIDENCE, MARGIN, Paired, paired, t_quantile
from ropecli.evaluation.sample_size import units_needed
from ropecli.evaluation.estimand import over_lengths

ONE_SIDED = (1 - CONFIDENCE) / 2  # the level of a verdict word read off one 95% interval


def describe(p: Paired, margin: float = MARGIN, level: float = ONE_SIDED, capacity: int | None = None,
             explain: bool = True) -> dict:
    """A Paired as JSON, with its verdict at one-sided `level` and, undecided, what would decide it
    (`capacity`: the windows the text holds, when known; `explain=False`: the verdict only, as a race's
    intermediate looks need)."""
    out = {"diff": p.diff, "se": p.se, "df": p.df, "half_width": p.half_width(), "n": p.n, "inference": p.inference,
           "generalizes_to": p.generalizes_to, "documents": p.documents, "margin": margin, "level": level}
    if p.diff is None:
        out.update(verdict="worse" if p.inference == "diverged" else "undecided", distinguishable=p.inference == "diverged")
        out["answer"] = "diverged" if p.inference == "diverged" else "one unit: nothing to compare with"
        return out
    if p.se is None:
        out.update(verdict="undecided", distinguishable=False, answer=f"undecided after {p.n} unit(s): no spread to judge")
        return out
    verdict = p.verdict(margin, level)
    out.update(verdict=verdict, distinguishable=verdict in ("worse", "better"), lower=p.lower(level), upper=p.upper(level))
    if explain:
        out["answer"] = answer(out, p, margin, level, capacity)
    return out


def answer(rec: dict, p: Paired, margin: float, level: float, capacity: int | None = None) -> str:
    """The verdict in words, and for an undecided pair what would decide it."""
    unit = "prompts" if p.inference == "units" else "windows"
    v = rec["verdict"]
    if v != "undecided":
        return {"worse": "shown worse", "better": "shown better",
                "equivalent": f"shown equivalent within ±{margin:g}"}[v] + f" after {p.n} {unit}"
    need = units_needed(p, level, margin)
    rec["needs"] = need
    if need.get("windows"):
        more = f"about {need['windows']} {unit} would decide it (80% power)"
        if capacity is not None and need["windows"] > capacity:
            more += f", more than the {capacity} this text holds: add text"
    elif need.get("documents"):
        more = (f"not reachable with these {p.documents} documents: about {need['documents']} documents would decide it "
                "(80% power); add text")
    else:
        more = f"not reachable with these documents ({need.get('why')}): add text"
    return f"undecided after {p.n} {unit}: {more}"


def paired_difference(x, y, clusters: list | None = None, margin: float = MARGIN, level: float = ONE_SIDED,
                      capacity: int | None = None, weights: list | None = None) -> dict:
    """x - y over paired units: {diff, se, half_width, verdict, inference, …} (nats when x, y are NLLs);
    `clusters`: the source document of each unit (per length, or one list; None: independent units);
    `weights`: each unit's scored predictions where they differ (key PPL), the estimand's weights."""
    if not len(x) or not len(y):
        raise ValueError("paired values need at least one unit on each side")
    return describe(paired(x, y, clusters, tokens=weights), margin, level, capacity)  # the windows both have: the first ones


def tie_answer(p: dict, unit: str = "windows") -> str:
    """The words of a comparison's verdict (what `describe` wrote), e.g. 'undecided after 4 windows: about
    38 windows would decide it (80% power)'."""
    return p.get("answer") or f"{p.get('verdict', 'undecided')} after {p.get('n')} {unit}"


def rank_against_best(values: dict, clusters: list | None = None, margin: float = MARGIN,
                      level: float | None = None, weights: list | None = None) -> dict:
    """label -> paired difference to the best label (the lowest estimand, `ropecli.evaluation.estimand`:
    the number every Δ is a difference of), with `best`, its verdict and `tied` (shown equivalent; the
    best is tied with itself). Verdicts at one-sided `level`, by default 0.025 / (K - 1): 95% for the
    table as a whole. Labels scored on fewer windows (dropped by a race) pair on the windows they
    share, the first ones; the best is chosen among those scored on the most."""
    finite = {k: v for k, v in values.items() if np.all(np.isfinite(_flat(v)))}
    if not finite:
        return {k: {"best": False, "tied": False, "diff": None, "se": None, "half_width": None, "n": len(v),
                    "verdict": "worse", "distinguishable": True} for k, v in values.items()}
    size = lambda v: _flat(v).size  # noqa: E731
    most = max(size(v) for v in finite.values())
    best = min((k for k, v in finite.items() if size(v) == most), key=lambda k: over_lengths(finite[k], clusters, weights))
    level = level if level is not None else ONE_SIDED / max(len(values) - 1, 1)
    out = {}
    for k, v in values.items():
        out[k] = {**paired_difference(v, values[best], clusters, margin, level, weights=weights), "best": k == best}
        out[k]["tied"] = k == best or out[k]["verdict"] == "equivalent"
        if k == best:
            out[k].update(verdict="best", answer="best")
            out[k].pop("needs", None)
    return out


def _flat(v) -> np.ndarray:
    """Per-unit values, one vector or per length (ragged allowed), as one float vector."""
    if len(v) and np.ndim(v[0]) == 1:
        return np.concatenate([np.asarray(r, dtype=np.float64) for r in v]) if len(v) else np.zeros(0)
    return np.asarray(v, dtype=np.float64)


def mean_over_lengths(per_length: list[list[float]]) -> list[float]:
    """Per-window values at several lengths -> one value per window index (the mean over lengths)."""
    arr = np.asarray([[math.inf if v is None else v for v in row] for row in per_length], dtype=np.float64)
    return [float(v) for v in arr.mean(axis=0)]


def key_ranking(results: list, margin: float = MARGIN) -> list[dict] | None:
    """The key-token NLL of ppl results of one length, ranked as `rank_against_best` ranks PPL (its own
    best; the windows with key predictions); None unless every result has it."""
    values = [r.key_values() for r in results]
    if any(not v for v in values):
        return None
    widest = max(range(len(results)), key=lambda i: len(values[i]))
    ranked = rank_against_best(dict(enumerate(values)), results[widest].key_clusters(), margin,
                               weights=results[widest].key_weights())
    return [ranked[i] for i in range(len(results))]


def position_differences(x: list[list], y: list[list], clusters: list | None = None) -> dict:
    """Loss by position, paired: x - y in each position bin over the windows both have ([window][bin] mean
    NLLs), with the 95% half-width of each bin under the same inference as the whole (pointwise: each bin's
    interval holds at 95% by itself, not all 32 at once)."""
    n = min(len(x), len(y))
    a = np.array([[math.inf if v is None else v for v in w] for w in x[:n]], dtype=np.float64)
    b = np.array([[math.inf if v is None else v for v in w] for w in y[:n]], dtype=np.float64)
    per_bin = [paired(list(a[:, j]), list(b[:, j]), clusters) for j in range(a.shape[1])]
    return {"diff": [p.diff for p in per_bin], "half_width": [p.half_width() for p in per_bin], "windows": n,
            "inference": per_bin[0].inference, "pointwise": True}


def fmt_diff(p: dict) -> str:
    """'+0.0214 ± 0.0061' (nats, ± the 95% half-width); 'best' for the best; '—' without a number."""
    if p.get("best"):
        return "best"
    if p.get("diff") is None:
        return "—"
    half = f" ± {p['half_width']:.2g}" if p.get("half_width") is not None else ""
    return f"{p['diff']:+.4f}{half}"


def ppl_half_width(ppl_err: float | None, windows: int) -> float | None:
    """The 95% half-width of a PPL from its standard error across `windows` windows (t with n - 1 df)."""
    if not ppl_err or windows < 2:
        return None
    return t_quantile(windows - 1) * ppl_err


def separation(values: dict, clusters: list | None = None) -> dict:
    """How well a metric tells the schedules apart: for every pair (a, b) of `values` (label -> per-unit
    values on the same units), |paired difference| / its standard error under the comparison's inference
    (`inference.paired`), and the median over the pairs. A larger ratio: a metric that separates the
    schedules more on the same windows. Pairs with a non-finite value are left out."""
    labels = [k for k, v in values.items() if np.all(np.isfinite(_flat(v)))]
    pairs = []
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            p = paired(values[a], values[b], clusters)
            if p.diff is not None and p.se:
                pairs.append({"a": a, "b": b, "diff": p.diff, "se": p.se, "ratio": abs(p.diff) / p.se})
    ratios = [q["ratio"] for q in pairs]
    return {"pairs": pairs, "median_ratio": float(np.median(ratios)) if ratios else None,
            "inference": paired(values[labels[0]], values[labels[1]], clusters).inference if len(labels) > 1 else None}
