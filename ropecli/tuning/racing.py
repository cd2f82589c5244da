"""Racing: spend forward passes only where they change the verdict (F-Race, Birattari et al. 2002, with
a paired t-test in place of Friedman's, and successive halving's doubling rounds).

Every candidate is scored on the same windows in rounds: windows 1…n_1, then 1…n_2, … (`looks`,
doubling from `start` to `max_windows`); a round costs only its new windows (the per-window cache,
`ropecli.evaluation.cache`). After each round the leader is the candidate with the lowest mean that is
eligible (`eligible`, asked lazily: the constraints of `ropecli advise`); a candidate whose paired
difference to the leader is significantly positive is dropped, and keeps the windows it was scored on.
The race ends when one candidate is left (*decided*), when the windows run out (`max_windows`), or
when no remaining gap could be resolved within `max_windows` (futility: the windows-needed estimate of
`ropecli.evaluation.stats` at the race's level exceeds them); the candidates left are *tied after N
windows*, each with the windows a fixed 95% test would need.

The test, and why it stays valid under repeated looks. At look r, candidate c is dropped when

    mean(d) - t(1 - a, df) * se > 0,   d_i = c_i - leader_i,   a = alpha / (R * (K - 1))

(one-sided paired t-test; se and df clustered by document as in `ropecli.evaluation.stats`). The true
best b is dropped only if at some look, against some leader l, the test rejects "b is no worse than l",
which is true for every l; there are at most R looks and K - 1 possible leaders, so by the union bound
P(b is ever dropped) <= R * (K - 1) * a = alpha, whatever the dependence between the looks (they
share windows, so they are strongly dependent: alpha-spending by Bonferroni needs no independence).
It is conservative; a gap of several standard errors is still dropped at the first look, which is
where the savings are. The paired t-test is the test `ropecli compare` reports, so a race's "dropped"
and a table's "distinguishably worse" mean the same thing; `tests/test_racing.py` checks the error rate
in 1,000+ simulated races.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ropecli.evaluation.stats import (CONFIDENCE, clustered_se, paired_difference, t_quantile, tie_answer,
                                      windows_needed)
from ropecli.tuning.objective import window_clusters, window_vector

ALPHA = 1 - CONFIDENCE  # the chance that the true best is ever dropped


def looks(start: int, max_windows: int, grow: float = 2.0) -> list[int]:
    """Window counts of the rounds: start, start*grow, …, max_windows (the last look is max_windows)."""
    start = max(2, min(start, max_windows))
    out = [start]
    while out[-1] < max_windows:
        out.append(min(max_windows, max(out[-1] + 1, int(math.ceil(out[-1] * grow)))))
    return out


@dataclass
class Entrant:
    name: str
    values: list[float] = field(default_factory=list)  # per-window objective on the windows it was scored on
    clusters: list | None = None  # source document of each window (None: independent units)
    dropped_round: int | None = None  # 1-based round in which it was dropped
    excluded: bool = False  # not eligible (a constraint), whatever its score
    vs_leader: dict | None = None  # its last comparison with the leader

    @property
    def alive(self) -> bool:
        return self.dropped_round is None and not self.excluded

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values and np.all(np.isfinite(self.values)) else math.inf


def worse_test(x: list[float], y: list[float], clusters: list | None, alpha: float) -> dict:
    """Is x significantly worse (higher) than y, paired, one-sided at `alpha`? {diff, se, lower, worse}."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = min(a.size, b.size)
    d = a[:n] - b[:n]
    if not np.all(np.isfinite(d)):  # a diverged candidate against a finite leader is out
        worse = bool(np.isfinite(b[:n]).all() and not np.isfinite(a[:n]).all())
        return {"diff": None, "se": None, "lower": None, "n": n, "worse": worse}
    diff = float(d.mean())
    if n < 2:
        return {"diff": diff, "se": None, "lower": None, "n": n, "worse": False}
    se, df, _ = clustered_se(d, clusters[:n] if clusters else None)
    lower = diff - t_quantile(df, 1 - 2 * alpha) * se  # t(1 - alpha): two-sided confidence 1 - 2 alpha
    return {"diff": diff, "se": se, "lower": lower, "n": n, "worse": bool(lower > 0 if se > 0 else diff > 0)}


def race(score: Callable[[str, int], tuple[list[float], list | None]], names: list[str], *, start: int, max_windows: int,
         alpha: float = ALPHA, eligible: Callable[[str], bool] = lambda name: True, grow: float = 2.0,
         on_round: Callable[[int, int, list[str]], None] = lambda r, n, alive: None) -> dict:
    """Race `names`: `score(name, n)` gives a candidate's per-window objective on windows 1…n (lower is
    better) and their document clusters. Returns the race's record (see the module docstring)."""
    plan = looks(start, max_windows, grow)
    K = len(names)
    level = alpha / (len(plan) * max(K - 1, 1))  # per test: Bonferroni over the looks and the possible leaders
    field_ = {n: Entrant(n) for n in names}
    rounds, leader, stop = [], None, "max-windows"
    for r, n in enumerate(plan, 1):
        alive = [e for e in field_.values() if e.alive]
        on_round(r, n, [e.name for e in alive])
        for e in alive:
            e.values, e.clusters = score(e.name, n)
        leader = None
        for e in sorted(alive, key=lambda e: e.mean):  # the best eligible candidate leads
            if eligible(e.name):
                leader = e
                break
            e.excluded = True
        if leader is None:
            stop = "none eligible"
            break
        dropped = []
        for e in alive:
            if e is leader or e.excluded:
                continue
            e.vs_leader = worse_test(e.values, leader.values, e.clusters or leader.clusters, level)
            if e.vs_leader["worse"]:
                e.dropped_round = r
                dropped.append(e.name)
        left = [e for e in field_.values() if e.alive]
        rounds.append({"round": r, "windows": n, "leader": leader.name, "dropped": dropped, "alive": [e.name for e in left]})
        if len(left) == 1:
            stop = "decided"
            break
        needs = [windows_needed(e.vs_leader["diff"], e.vs_leader["se"], n, 2 * level) for e in left if e is not leader]
        if r < len(plan) and all(m is None or m > max_windows for m in needs):
            stop = "futile"  # no gap left could be resolved within max_windows: more windows would not decide
            break
    return summarize(field_, leader, rounds, stop, plan, level, alpha)


def summarize(field_: dict, leader: Entrant | None, rounds: list, stop: str, plan: list[int], level: float,
              alpha: float) -> dict:
    """The race's record: per candidate its windows, status and comparison; the plain-words outcome."""
    rows = {}
    for e in field_.values():
        row = {"windows": len(e.values), "mean": e.mean, "status": "leader" if e is leader else
               "excluded" if e.excluded else f"dropped in round {e.dropped_round}" if e.dropped_round else "tied",
               "dropped_round": e.dropped_round, "vs_leader": e.vs_leader}
        if e.alive and e is not leader and leader is not None:  # the answer for a tie, at the fixed 95% level
            p = paired_difference(e.values, leader.values, e.clusters or leader.clusters)
            answer = tie_answer(p)
            if p["distinguishable"]:  # separated by one 95% test, not at the race's level corrected for its looks
                need = windows_needed(p["diff"], p["se"], p["n"], 2 * level)
                answer = (f"tied after {p['n']} windows at the race's level (corrected for {len(plan)} looks); a single "
                          f"95% test separates them ({p['diff']:+.3g} ± {p['se']:.2g})" +
                          (f"; the race would need about {need} windows" if need else ""))
            row["tie"] = {**p, "answer": answer}
        rows[e.name] = row
    tied = [n for n, r in rows.items() if r["status"] == "tied"]
    n_last = rounds[-1]["windows"] if rounds else 0
    if leader is None:
        outcome = "no candidate is eligible"
    elif not tied:
        outcome = f"decided after {n_last} windows: {leader.name} leads"
    else:
        outcome = f"{leader.name} leads, tied after {n_last} windows with " + "; ".join(
            f"{n} ({rows[n]['tie']['answer'].split('; ', 1)[-1]})" for n in tied)
    dropped = [f"{n} (round {r['dropped_round']}, {r['windows']} windows)" for n, r in rows.items() if r["dropped_round"]]
    if dropped and leader is not None:
        outcome += "; dropped: " + ", ".join(dropped)
    return {"leader": leader.name if leader else None, "decided": leader is not None and not tied, "tied": tied,
            "stopped": stop, "looks": plan, "alpha": alpha, "test_level": level, "rounds": rounds,
            "candidates": rows, "outcome": outcome, "windows_spent": sum(r["windows"] for r in rows.values())}


def race_specs(run, specs: list, lengths: list[int], metric: str, *, start: int, max_windows: int,
               on_round: Callable[[int, int, list[str]], None] = lambda r, n, alive: None) -> tuple[list, dict]:
    """`ropecli compare --race`: race schedules on one metric (ppl, passkey answer NLL or KL), the
    objective of window i being its mean over `lengths`. `run` is an `ropecli.tuning.objective.Evaluate`.
    Returns every schedule's EvalResults on the windows it got (spec-major, as `run` gives them) and the
    race's record."""
    by_label = {s.label: s for s in specs}
    latest: dict[str, list] = {}

    def score(label: str, n: int):
        latest[label] = run([by_label[label]], lengths, metric, n)
        rows = latest[label]
        return window_vector(rows), window_clusters(rows)  # what a Scorer pairs candidates on

    record = race(score, list(by_label), start=start, max_windows=max_windows, on_round=on_round)
    return [r for s in specs for r in latest[s.label]], record
