"""Races on simulated measurements with a known truth: what checks the race's stated guarantee
(benchmarks/bench_verdicts.py prints the table, tests/test_verdicts.py asserts its hardest cells).

One cell: K candidates, G documents, each holding `holds` windows; every candidate is scored on the
same windows, sampled as `ropecli.evaluation.data.sample_windows` samples them: round-robin over the
documents, and along each document in its stratified random order (`stratified_order`; `sampling`
"head" takes its first windows instead, as ropecli did before). Candidate c's value on window t of
document g:

    v = difficulty(g, t)            shared by every candidate (what pairing removes)
      + mu_c                        the candidate's true mean: near-ties (see `field_means`)
      + u_{c,g}                     its document effect: none, normal, or skewed (centred exponential)
      + e_{c,g,t}                   its window noise: AR(1) along the document with correlation phi
      + drift_c(t)                  the best candidate's loss drifting along the document, from +drift at
                                    its head to -drift at its end (0 for the others): long-range drift

The truth the race must not drop is the estimand (`ropecli.evaluation.estimand`): with G <
MIN_DOCUMENTS, the mean over these documents of each one's mean over *every* window it holds (the
realized noise and drift included: they are part of the text); with more documents, the mean over
new documents like these, mu_c. A race "drops the best" when that candidate ends dropped as worse; it "selects
correctly" when its leader's truth is within delta of the best's (the indifference zone's guarantee).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropecli.evaluation.data import stratified_order
from ropecli.evaluation.inference import MARGIN, MIN_DOCUMENTS, paired
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
    field: str = "near"  # near: near-ties; ties: K - 2 tied with the best, 2 worse; lfc: one best delta ahead; equal
    start: int = 4
    max_windows: int = 16
    holds: int = 64  # windows each document holds
    drift: float = 0.0  # the best candidate's drift along a document (nats at either end)
    sampling: str = "stratified"  # stratified (ropecli's) or head (each document's first windows)
    delta: float = MARGIN  # the race's indifference zone (0: off)


def field_means(K: int, gap: float, field: str = "near", delta: float = MARGIN) -> np.ndarray:
    """Near-ties: the best at 0, one exactly tied with it, the rest 0.5, 1, 1.5, … gaps behind, the last
    clearly worse (K = 2: the best and one half a gap behind). Ties: K - 2 candidates at 0, then 15 and
    50 gaps behind (the field where uncorrected repeated looks drop a best one most often). The indifference
    zone's least-favourable fields: `lfc`, one best exactly delta ahead of all the others (Bechhofer's slippage
    configuration), and `equal`, every candidate tied."""
    if field == "lfc":
        return np.array([0.0] + [delta] * (K - 1))
    if field == "equal":
        return np.zeros(K)
    if field == "ties":
        return np.array([0.0, 0.0] if K == 2 else [0.0] * (K - 2) + [15 * gap, 50 * gap])
    if K == 2:
        return np.array([0.0, gap / 2])
    return np.array([0.0, 0.0] + [gap * (i + 1) / 2 for i in range(K - 3)] + [20 * gap])


def draw_text(cell: Cell, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(values (K, G, holds) on every window of every document, the true estimand of each candidate)."""
    K, G, m = cell.K, cell.G, cell.holds
    mu = field_means(K, cell.gap, cell.field, cell.delta)
    if cell.doc_effects == "normal":
        u = rng.normal(0, cell.doc_sd, (K, G))
    elif cell.doc_effects == "skewed":
        u = (rng.exponential(cell.doc_sd, (K, G)) - cell.doc_sd) * np.where(rng.random((K, 1)) < 0.5, 1, -1)
    else:
        u = np.zeros((K, G))
    e = np.empty((K, G, m))
    scale = cell.window_sd * np.sqrt(1 - cell.phi ** 2)
    e[:, :, 0] = rng.normal(0, cell.window_sd, (K, G))
    for t in range(1, m):
        e[:, :, t] = cell.phi * e[:, :, t - 1] + rng.normal(0, scale, (K, G))
    drift = np.zeros((K, 1, m))
    drift[0, 0] = cell.drift * np.linspace(1, -1, m)  # candidate 0 is a best one in every field
    values = rng.normal(0, 0.3, (G, m))[None] + mu[:, None, None] + u[:, :, None] + e + drift
    truth = values.mean(axis=2).mean(axis=1) if G < MIN_DOCUMENTS else mu.copy()
    return values, truth


def sample_order(cell: Cell, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The (document, position) of sampled windows 1…max_windows: round-robin over the documents, along
    each in its stratified order (or its head)."""
    along = [stratified_order(cell.holds, rng) if cell.sampling == "stratified" else list(range(cell.holds))
             for _ in range(cell.G)]
    i = np.arange(cell.max_windows)
    doc = i % cell.G
    return doc, np.array([along[g][w] for g, w in zip(doc, i // cell.G)])


def simulate_race(cell: Cell, rng: np.random.Generator, alpha: float = ALPHA) -> dict:
    """One race on one draw of the cell; returns {'dropped_best', 'correct' (its leader within delta of the best),
    'windows': spent, 'decided', 'stopped'}."""
    values, truth = draw_text(cell, rng)
    doc, pos = sample_order(cell, rng)
    sampled = values[:, doc, pos]  # (K, windows)
    best = int(np.argmin(truth))
    names = [f"c{i}" for i in range(cell.K)]

    def score(name: str, n: int):
        return [list(sampled[names.index(name), :n])], [list(doc[:n])]

    out = race(score, names, start=race_start(cell.start, cell.G), max_windows=cell.max_windows, alpha=alpha,
               delta=cell.delta)
    leader = names.index(out["leader"])
    return {"dropped_best": out["candidates"][names[best]]["dropped_round"] is not None,
            "correct": bool(truth[leader] - truth[best] <= cell.delta), "windows": out["windows_spent"],
            "decided": out["decided"], "stopped": out["stopped"]}


def race_rates(cell: Cell, races: int, seed: int = 0, alpha: float = ALPHA) -> dict:
    """Over `races` draws: {'dropped': share that dropped the true best, 'correct': share whose leader is within
    delta of it, 'windows': mean windows per candidate, 'within_delta': share stopped in the indifference zone}."""
    rng = np.random.default_rng(seed)
    runs = [simulate_race(cell, rng, alpha) for _ in range(races)]
    return {"dropped": float(np.mean([r["dropped_best"] for r in runs])),
            "correct": float(np.mean([r["correct"] for r in runs])),
            "windows": float(np.mean([r["windows"] for r in runs])) / cell.K,
            "within_delta": float(np.mean([r["stopped"] == "within-delta" for r in runs]))}


def drop_rate(cell: Cell, races: int, seed: int = 0, alpha: float = ALPHA) -> tuple[float, float]:
    """(share of races that dropped the true best, mean windows spent per candidate)."""
    r = race_rates(cell, races, seed, alpha)
    return r["dropped"], r["windows"]


def se_calibration(cell: Cell, draws: int, seed: int = 0) -> dict:
    """The reported se of candidate 1 - candidate 0 on all `max_windows` windows against the true sd of
    its error (estimate - true difference) over draws: {'ratio': rms se / sd, 'coverage': of the 95% interval}."""
    rng = np.random.default_rng(seed)
    err, se2, cover = [], [], 0
    for _ in range(draws):
        values, truth = draw_text(cell, rng)
        doc, pos = sample_order(cell, rng)
        p = paired(values[1, doc, pos], values[0, doc, pos], list(doc))
        err.append(p.diff - (truth[1] - truth[0]))
        se2.append(p.se ** 2)
        cover += abs(err[-1]) <= p.half_width()
    return {"ratio": float(np.sqrt(np.mean(se2)) / np.std(err)), "coverage": cover / draws,
            "inference": p.inference}
