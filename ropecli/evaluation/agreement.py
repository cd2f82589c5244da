"""Do two metrics rank the schedules alike? Spearman's rank correlation between two metrics' means over the
same schedules (e.g. a RULER task's answer NLL and PPL at one length), with a bootstrap interval that
resamples what each metric's mean is uncertain over: prompts (independent units) for a task, documents
(then windows inside each) for PPL, each metric on its own, the schedules' values paired within a metric
(every schedule is scored on the same units, so a resample keeps the pairing). Numpy only.

The interval is a percentile interval over `reps` resamples (95 %); it generalizes to new prompts drawn the
same way and to new windows of these documents (new documents with 10 or more), and says nothing about
other schedules than the ones ranked. With few schedules rho takes few values (6 schedules: steps of
1/35); ties in a resample are ranked by their average rank.
"""

from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), 0-based, of each row of a 2-D array."""
    out = np.empty(x.shape, dtype=np.float64)
    for i, row in enumerate(x):
        r = np.empty(len(row))
        r[np.argsort(row, kind="stable")] = np.arange(len(row))
        vals, inv = np.unique(row, return_inverse=True)
        out[i] = (np.bincount(inv, weights=r) / np.bincount(inv))[inv] if len(vals) < len(row) else r
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho between a and b along the last axis (rows: resamples)."""
    ra, rb = _ranks(np.atleast_2d(a)), _ranks(np.atleast_2d(b))
    ra = ra - ra.mean(-1, keepdims=True)
    rb = rb - rb.mean(-1, keepdims=True)
    den = np.sqrt((ra ** 2).sum(-1) * (rb ** 2).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ra * rb).sum(-1) / den, np.nan)


def _means(values: np.ndarray, clusters: list | None, weights: np.ndarray | None, rows: list | None = None) -> np.ndarray:
    """(schedules,) estimand of `values` (schedules, units) over the units `rows` (default all): the plain mean of
    independent units, or the mean over documents of each one's mean (weighted by `weights` inside it: key PPL's
    key predictions), as `ropecli.evaluation.estimand` weighs them."""
    rows = list(range(values.shape[1])) if rows is None else rows
    if clusters is None:
        return values[:, rows].mean(-1)
    w = np.ones(values.shape[1]) if weights is None else weights
    docs: dict = {}
    for i in rows:
        docs.setdefault(clusters[i], []).append(i)
    per_doc = [(values[:, g] * w[g]).sum(-1) / w[g].sum() for g in docs.values()]
    return np.mean(per_doc, axis=0)


def _resampled_means(values: np.ndarray, clusters: list | None, weights: np.ndarray | None, reps: int,
                     rng: np.random.Generator) -> np.ndarray:
    """(reps, schedules) estimands over resampled units: units i.i.d., or documents first and then the windows
    inside each resampled document (a two-stage cluster bootstrap); a document drawn twice counts twice."""
    S, n = values.shape
    if clusters is None:
        idx = rng.integers(0, n, size=(reps, n))
        return values[:, idx].mean(-1).T
    groups = [np.flatnonzero(np.asarray(clusters) == c) for c in dict.fromkeys(clusters)]
    w = np.ones(n) if weights is None else weights
    out = np.empty((reps, S))
    for r in range(reps):
        doc_means = []
        for g in (groups[k] for k in rng.integers(0, len(groups), size=len(groups))):
            pick = g[rng.integers(0, len(g), size=len(g))]
            doc_means.append((values[:, pick] * w[pick]).sum(-1) / max(w[pick].sum(), 1e-300))
        out[r] = np.mean(doc_means, axis=0)
    return out


def rank_agreement(a: dict, b: dict, clusters_a: list | None = None, clusters_b: list | None = None,
                   reps: int = 2000, seed: int = 0, weights_b: list | None = None) -> dict:
    """Spearman's rho between the schedules' means of metric a and of metric b ({label: per-unit values},
    the same labels and, within a metric, the same units), its bootstrap 95 % interval, and the labels'
    order by each. Needs at least 3 schedules with finite values."""
    labels = [k for k in a if k in b and np.all(np.isfinite(a[k])) and np.all(np.isfinite(b[k]))]
    if len(labels) < 3:
        return {"rho": None, "low": None, "high": None, "schedules": len(labels),
                "why": "fewer than 3 schedules with finite values on both metrics"}
    va = np.array([np.asarray(a[k], dtype=np.float64) for k in labels])
    vb = np.array([np.asarray(b[k], dtype=np.float64) for k in labels])
    wb = None if weights_b is None else np.asarray(weights_b, dtype=np.float64)
    ma, mb = _means(va, clusters_a, None), _means(vb, clusters_b, wb)
    point = float(spearman(ma, mb)[0])
    rng = np.random.default_rng(seed)
    boot = spearman(_resampled_means(va, clusters_a, None, reps, rng), _resampled_means(vb, clusters_b, wb, reps, rng))
    boot = boot[np.isfinite(boot)]
    tail = (1 - CONFIDENCE) / 2
    lo, hi = (float(np.quantile(boot, tail)), float(np.quantile(boot, 1 - tail))) if boot.size else (None, None)
    return {"rho": point, "low": lo, "high": hi, "schedules": len(labels), "reps": reps,
            "order_a": [labels[i] for i in np.argsort(ma, kind="stable")],
            "order_b": [labels[i] for i in np.argsort(mb, kind="stable")]}
