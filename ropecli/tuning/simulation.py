"""Races on simulated measurements with a known truth: what checks the race's stated guarantee
(benchmarks/bench_verdicts.py prints the table, tests/test_verdicts.py asserts its hardest cells).

One cell: K candidates, G documents, windows cut round-robin from the documents (window i from
document i mod G, the (i div G)-th along it, as `ropecli.evaluation.data.sample_windows` takes them).
Candidate c's value on window t of document g:

    v = difficulty(g, t)            shared by every candidate (what pairing removes)
      + mu_c                        the candidate's true mean: near-ties (see `field_means`)
      + u_{c,g}                     its document effect: none, normal, or skewed (centred exponential)
      + e_{c,g,t}                   its window noise: AR(1) along the document with correlation phi

The truth the race must not drop: with G < MIN_DOCUMENTS the windows inference conditions on the
documents, so the true best is the lowest mu_c + mean_g u_{c,g} (*these* documents); with more, it
generalizes to new documents, so the true best is the lowest mu_c. A race "drops the best" when that
candidate ends dropped as worse.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropecli.evaluation.inference import MIN_DOCUMENTS
from ropecli.tuning.racing import ALPHA, race, race_start


@dataclass(frozen=True)
class Cell:
    K: int  # candidates
    G: int  # documents
    phi: float  # AR(1) correlation of neighbouring windows
    doc_effects: str  # none / normal / skewed
    window_sd: float = 0.02  # per-window sd of a candidate's own noise (nats)
    doc_sd: float = 0.02  # sd of a candidate's document effect
    gap: float = 0.01  # spacing of the near-tied candidates' means (nats)
    field: str = "near"  # near: near-ties (`field_means`); ties: K - 2 exactly tied with the best, 2 worse
    start: int = 4
    max_windows: int = 16


def field_means(K: int, gap: float, field: str = "near") -> np.ndarray:
    """Near-ties: the best at 0, one exactly tied with it, the rest 0.5, 1, 1.5, … gaps behind, the last
    clearly worse (K = 2: the best and one half a gap behind). Ties: K - 2 candidates at 0, then 15 and
    50 gaps behind (the field where uncorrected repeated looks drop a best one most often)."""
    if field == "ties":
        return np.array([0.0, 0.0] if K == 2 else [0.0] * (K - 2) + [15 * gap, 50 * gap])
    if K == 2:
        return np.array([0.0, gap / 2])
    return np.array([0.0, 0.0] + [gap * (i + 1) / 2 for i in range(K - 3)] + [20 * gap])


def simulate_race(cell: Cell, rng: np.random.Generator, alpha: float = ALPHA) -> dict:
    """One race on one draw of the cell; returns {'dropped_best': bool, 'windows': spent, 'decided': bool}."""
    K, G = cell.K, cell.G
    per_doc = -(-cell.max_windows // G)
    mu = field_means(K, cell.gap, cell.field)
    if cell.doc_effects == "normal":
        u = rng.normal(0, cell.doc_sd, (K, G))
    elif cell.doc_effects == "skewed":
        u = (rng.exponential(cell.doc_sd, (K, G)) - cell.doc_sd) * np.where(rng.random((K, 1)) < 0.5, 1, -1)
    else:
        u = np.zeros((K, G))
    e = np.empty((K, G, per_doc))
    scale = cell.window_sd * np.sqrt(1 - cell.phi ** 2)
    e[:, :, 0] = rng.normal(0, cell.window_sd, (K, G))
    for t in range(1, per_doc):
        e[:, :, t] = cell.phi * e[:, :, t - 1] + rng.normal(0, scale, (K, G))
    difficulty = rng.normal(0, 0.3, (G, per_doc))
    doc = np.arange(cell.max_windows) % G
    pos = np.arange(cell.max_windows) // G
    values = difficulty[doc, pos][None, :] + mu[:, None] + u[:, doc] + e[:, doc, pos]  # (K, windows)
    truth = mu + (u.mean(axis=1) if G < MIN_DOCUMENTS else 0.0)
    best = int(np.argmin(truth))
    names = [f"c{i}" for i in range(K)]

    def score(name: str, n: int):
        return [list(values[names.index(name), :n])], [list(doc[:n])]

    out = race(score, names, start=race_start(cell.start, G), max_windows=cell.max_windows, alpha=alpha)
    return {"dropped_best": out["candidates"][names[best]]["dropped_round"] is not None,
            "windows": out["windows_spent"], "decided": out["decided"]}


def drop_rate(cell: Cell, races: int, seed: int = 0, alpha: float = ALPHA) -> tuple[float, float]:
    """(share of races that dropped the true best, mean windows spent per candidate)."""
    rng = np.random.default_rng(seed)
    runs = [simulate_race(cell, rng, alpha) for _ in range(races)]
    return (float(np.mean([r["dropped_best"] for r in runs])),
            float(np.mean([r["windows"] for r in runs])) / cell.K)
