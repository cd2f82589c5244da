"""Racing: spend forward passes only where they change the verdict (F-Race, Birattari et al. 2002, with the
paired inference of `ropecli.evaluation.inference` in place of Friedman's test, successive halving's rounds).

Every candidate is scored on the same windows in rounds: windows 1…n_1, then 1…n_2, … (`looks`,
doubling from `start` to `max_windows`); a round costs only its new windows (the per-window cache).
After each round the leader is the eligible candidate with the lowest estimate (the estimand of
`ropecli.evaluation.estimand`, the number every verdict's Δ is a difference of; `eligible`, asked
lazily: the constraints of `ropecli advise`), and every other candidate c gets one verdict against it:

    equivalent  (1 - a) bounds of mean(c - leader) inside ±margin    -> stays, may win the tie-break
    worse       lower (1 - a) bound of mean(c - leader) > 0, and not equivalent -> dropped (keeps its windows)
    undecided   neither                                                -> stays, gets the next round's windows
    a_r = alpha * w_r / (K - 1)   (look r of R, K candidates; w_r proportional to 1/r, summing to 1)

The race ends when every candidate left is equivalent to the leader or there is one (*decided*); when
the leader is within delta of every candidate left (*within-delta*, the indifference zone below); when
the windows run out (`max_windows`), or when it is futile: for every undecided candidate, even a true
gap at its upper confidence bound would not be shown worse by `max_windows` windows, and even a gap at
the edge of its interval nearest 0 would not be shown inside ±margin (projected with the variance
model of its inference). The futility stop never drops anyone, so it cannot cost the guarantee.

The guarantee. The true best b is dropped only if at some look r, against some leader l, the test
rejects "b is no worse than l", true for every l; at most K - 1 leaders per look, so by the union
bound P(b is ever dropped) <= sum_r (K - 1) a_r = alpha, whatever the dependence between the looks.
A candidate whose true gap to the leader exceeds the margin is called equivalent with probability at
most a_r per test, so at most alpha over the race. Both rest on the paired inference holding at level a
for the data at hand (documents or windows inference: `ropecli.evaluation.inference`); the
simulation in benchmarks/bench_verdicts.py (and tests/test_verdicts.py) checks the drop rate over
fields of 2-10 candidates, 1-20 documents, serial correlation up to 0.99, drift along the documents
and skewed document effects.

The indifference zone (Bechhofer 1954; a fully sequential procedure whose continuation region closes, as in
Kim & Nelson 2001, "KN", with the paired, document-clustered intervals above in place of KN's known-variance
boundaries). A user does not need the exact best of two schedules 0.008 nats apart, but one that is, with a
stated probability, within delta of the best (delta: `--delta`, by default the equivalence margin). Every test
of a look is the one-sided lower (1 - a_r) bound L_c of mean(c - leader); c is dropped when L_c > 0, and the
race stops when L_c >= -delta for every c left: no candidate is shown more than delta ahead of the leader.
Guarantee: P(the winner, the leader at the stop, is within delta of the true best) >= 1 - alpha, on the
estimand, for the data's documents (their population with >= MIN_DOCUMENTS documents, these documents below),
for a race that stops in the zone; one that runs out of windows first says undecided, as before.
Proof: let E be the event that every bound L_c of the race lies below its true difference; the union bound
over looks and leaders gives P(E) >= 1 - sum_r (K - 1) a_r = 1 - alpha, the same budget as the drop rule,
since both read the same bound. On E the best b is never dropped (L_b > 0 would put it above a leader), and at
a within-delta stop, true mean(b - leader) >= L_b >= -delta. The region closes: the leader has the lowest
mean, so L_c >= -t se_c: it stops by the look where t se_c <= delta for every pair, a bound set by delta and
the noise, not the gaps. benchmarks/bench_verdicts.py simulates the correct-selection rate beside the drop
rate, least-favourable fields included (one best exactly delta ahead; all equal).

With fewer than MIN_DOCUMENTS documents the first look covers every document (`race_start`), so the
estimand, the mean over *these* documents, is the same at every look.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ropecli.evaluation.estimand import over_lengths
from ropecli.evaluation.inference import CONFIDENCE, MARGIN, MIN_DOCUMENTS, Paired, paired, t_upper
from ropecli.evaluation.sample_size import projected_se
from ropecli.evaluation.stats import describe

ALPHA = 1 - CONFIDENCE  # the chance that the true best is ever dropped


def looks(start: int, max_windows: int, grow: float = 2.0) -> list[int]:
    """Window counts of the rounds: start, start*grow, …, max_windows (the last look is max_windows)."""
    start = max(2, min(start, max_windows))
    out = [start]
    while out[-1] < max_windows:
        out.append(min(max_windows, max(out[-1] + 1, int(math.ceil(out[-1] * grow)))))
    return out


def spending(R: int) -> list[float]:
    """The share of alpha each look spends, proportional to 1/r (sums to 1): front-loaded, since a
    candidate dropped at the first look saves every later window, and the early looks, with the
    fewest windows, need the most room. Any shares summing to 1 keep the union bound."""
    w = [1.0 / r for r in range(1, R + 1)]
    return [x / sum(w) for x in w]


def race_start(start: int, documents: int) -> int:
    """The first look: at least every document when there are fewer than MIN_DOCUMENTS (the estimand
    is then the mean over these documents, the same at every look), at least MIN_DOCUMENTS of them
    otherwise (the documents inference from the first look on)."""
    return max(start, min(documents, MIN_DOCUMENTS))


@dataclass
class Entrant:
    name: str
    values: list = field(default_factory=list)  # per-window objective (or per length: [length][window])
    clusters: list | None = None  # source document of each window (None: independent units)
    tokens: list | None = None  # scored predictions of each window (None: equal; key PPL: key predictions)
    dropped_round: int | None = None  # 1-based round in which it was dropped
    excluded: bool = False  # not eligible (a constraint), whatever its score
    vs_leader: dict | None = None  # its last comparison with the leader
    verdict: str | None = None  # worse / equivalent / undecided against the last leader
    look: int = 0  # the count it was last scored on (windows, or prompts per depth)

    @property
    def alive(self) -> bool:
        return self.dropped_round is None and not self.excluded

    @property
    def mean(self) -> float:
        """The estimand on its windows (`ropecli.evaluation.estimand.over_lengths`): what verdicts difference."""
        return over_lengths(self.values, self.clusters, self.tokens) if len(self.values) else math.inf


def diverged_worse(x, y) -> bool:
    """A diverged candidate (inf somewhere) against a finite leader, on the windows both have, is out."""
    xs = [x] if len(x) and np.ndim(x[0]) == 0 else x
    ys = [y] if len(y) and np.ndim(y[0]) == 0 else y
    pairs = [(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)) for a, b in zip(xs, ys)]
    pairs = [(a[:min(a.size, b.size)], b[:min(a.size, b.size)]) for a, b in pairs]
    return all(np.isfinite(b).all() for _, b in pairs) and not all(np.isfinite(a).all() for a, _ in pairs)


def worse_test(x, y, clusters: list | None, alpha: float, tokens=None) -> dict:
    """Is x significantly worse (higher) than y, paired, one-sided at `alpha`? {diff, se, lower, worse}."""
    p = paired(x, y, clusters, tokens=tokens)
    if p.diff is None:
        return {"diff": None, "se": None, "lower": None, "n": p.n, "worse": diverged_worse(x, y)}
    return {"diff": p.diff, "se": p.se, "lower": p.lower(alpha), "n": p.n, "worse": p.worse(alpha) if p.se is not None
            else False, "inference": p.inference}


def judge(x, y, clusters, margin: float, level: float, capacity: int | None = None,
          explain: bool = False, tokens=None) -> tuple[str, dict]:
    """x against the leader y at one-sided `level`: (verdict, its record; `explain`: with what would decide it)."""
    p = paired(x, y, clusters, tokens=tokens)
    rec = describe(p, margin, level, capacity, explain)
    if p.diff is None:
        return ("worse" if diverged_worse(x, y) else "undecided"), rec
    return rec["verdict"], rec


def futile(p: Paired, level: float, last_level: float, margin: float, max_windows: int) -> bool:
    """Could `max_windows` units (windows, or prompts over every depth) decide this pair? No when even a gap
    at its upper (1 - level) bound would not be shown worse, and even a gap at the edge of its interval nearest
    0 would not be shown inside ±margin, by the last look's test (level `last_level`) with the projected se
    (the variance model of its inference)."""
    se = projected_se(p, windows=max_windows)
    if se is None or p.se is None or p.df is None:
        return False
    t = t_upper(max(p.df * max_windows / max(p.n, 1), p.df), last_level)  # df grow with the windows, at most
    hi, lo = p.upper(level), p.lower(level)
    nearest0 = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
    return max(abs(hi), abs(lo)) <= t * se and nearest0 + t * se >= margin


def futile_at_most(e: Entrant, leader: Entrant, n: int, max_windows: int, level: float, last_level: float,
                   margin: float) -> bool:
    """`futile` for e against the leader at the look of `n` (windows, or prompts per depth), projected to
    `max_windows` of the same count: in units, a prompt race's look holds n x its depths prompts."""
    p = paired(e.values, leader.values, e.clusters or leader.clusters, tokens=e.tokens or leader.tokens)
    return futile(p, level, last_level, margin, max(1, round(max_windows * max(p.n, 1) / n)))


def race(score: Callable[[str, int], tuple[list, list | None]], names: list[str], *, start: int, max_windows: int,
         alpha: float = ALPHA, margin: float = MARGIN, eligible: Callable[[str], bool] = lambda name: True,
         grow: float = 2.0, on_round: Callable[[int, int, list[str]], None] = lambda r, n, alive: None,
         capacity: int | None = None, unit: str = "windows", delta: float | None = None) -> dict:
    """Race `names`: `score(name, n)` gives a candidate's per-window objective on windows 1…n (lower is
    better; per length [length][window], or one vector), their documents and optionally each window's
    scored predictions (the estimand's weights: key PPL's key predictions); `capacity`: the windows the
    text holds (what an undecided candidate's answer compares its need with); `unit`: what a look counts, in
    the outcome's words (windows; a task's prompts per depth); `delta`: the indifference zone (default the margin;
    0: off). Returns the race's record."""
    delta = margin if delta is None else delta
    plan = looks(start, max_windows, grow)
    K = len(names)
    levels = [alpha * w / max(K - 1, 1) for w in spending(len(plan))]  # per test: the union bound over looks and leaders
    field_ = {n: Entrant(n) for n in names}
    rounds, leader, stop = [], None, "max-windows"
    level = levels[0]
    for r, n in enumerate(plan, 1):
        level = levels[r - 1]
        alive = [e for e in field_.values() if e.alive]
        on_round(r, n, [e.name for e in alive])
        for e in alive:
            scored = score(e.name, n)
            e.values, e.clusters, e.look = scored[0], scored[1], n
            e.tokens = scored[2] if len(scored) > 2 else None
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
        leader.verdict, leader.vs_leader = None, None
        for e in alive:
            if e is leader or e.excluded:
                continue
            e.verdict, e.vs_leader = judge(e.values, leader.values, e.clusters or leader.clusters, margin, level,
                                           capacity, tokens=e.tokens or leader.tokens)
            if e.verdict == "worse":
                e.dropped_round = r
                dropped.append(e.name)
        left = [e for e in field_.values() if e.alive and e is not leader]
        rounds.append({"round": r, "windows": n, "leader": leader.name, "dropped": dropped,
                       "alive": [leader.name] + [e.name for e in left],
                       "equivalent": [e.name for e in left if e.verdict == "equivalent"]})
        undecided = [e for e in left if e.verdict != "equivalent"]
        if not undecided:
            stop = "decided"
            break
        if delta > 0 and all(within(e, delta) for e in left):  # the indifference zone: no one shown delta ahead
            stop = "within-delta"
            break
        if r < len(plan) and all(futile_at_most(e, leader, n, max_windows, level, levels[-1], margin) for e in undecided):
            stop = "futile"
            break
    for e in field_.values():  # the last look's verdicts, with what would decide the undecided ones
        if e.alive and e is not leader and leader is not None:
            e.verdict, e.vs_leader = judge(e.values, leader.values, e.clusters or leader.clusters, margin, level,
                                           capacity, explain=True, tokens=e.tokens or leader.tokens)
    out = summarize(field_, leader, rounds, stop, plan, level, alpha, margin, unit, delta)
    out.update(test_levels=levels, capacity=capacity)
    return out


def within(e: Entrant, delta: float) -> bool:
    """Is e shown at most `delta` ahead of the leader: the lower bound of mean(e - leader) at the look's level >= -delta?"""
    lower = (e.vs_leader or {}).get("lower")
    return lower is not None and lower >= -delta


def summarize(field_: dict, leader: Entrant | None, rounds: list, stop: str, plan: list[int], level: float,
              alpha: float, margin: float, unit: str = "windows", delta: float = 0.0) -> dict:
    """The race's record: per candidate its windows, status and comparison; the plain-words outcome."""
    rows = {}
    for e in field_.values():
        status = ("leader" if e is leader else "excluded" if e.excluded else
                  f"dropped in round {e.dropped_round}" if e.dropped_round else e.verdict or "undecided")
        rows[e.name] = {"windows": e.look or (max(map(len, e.values)) if e.values and np.ndim(e.values[0]) == 1 else len(e.values)),
                        "mean": e.mean, "status": status, "dropped_round": e.dropped_round, "vs_leader": e.vs_leader}
    equivalent = [n for n, r in rows.items() if r["status"] == "equivalent"]
    undecided = [n for n, r in rows.items() if r["status"] == "undecided"]
    n_last = rounds[-1]["windows"] if rounds else 0
    why_stop = {"decided": "decided", "max-windows": f"the {unit} ran out (--max-windows {plan[-1]})",
                "futile": (f"stopped as futile: for each undecided candidate even a gap at its {1 - level:.4g} bound "
                           f"could not be decided within {plan[-1]} {unit}"),
                "none eligible": "no candidate is eligible",
                "within-delta": (f"stopped in the indifference zone: no candidate left is shown more than {delta:g} "
                                 "nats ahead of the leader")}[stop]
    if leader is None:
        outcome = "no candidate is eligible"
    else:
        outcome = f"{leader.name} leads after {n_last} {unit}"
        if equivalent:
            outcome += f"; equivalent to it within ±{margin:g} nats: {', '.join(equivalent)}"
        if undecided:
            outcome += "; undecided: " + "; ".join(f"{n} ({rows[n]['vs_leader']['answer']})" for n in undecided)
        outcome += f" ({why_stop})"
        if stop == "within-delta":
            outcome += f"; {leader.name} is within {delta:g} nats of the best at {1 - alpha:.0%}"
    dropped = [f"{n} (round {r['dropped_round']}, {r['windows']} {unit})" for n, r in rows.items() if r["dropped_round"]]
    if dropped and leader is not None:
        outcome += "; dropped as worse: " + ", ".join(dropped)
    inference = next((r["vs_leader"] for r in rows.values() if r["vs_leader"]), None)
    return {"leader": leader.name if leader else None, "decided": leader is not None and not undecided,
            "equivalent": equivalent, "undecided": undecided, "tied": equivalent + undecided,
            "stopped": stop, "looks": plan, "alpha": alpha, "test_level": level, "margin": margin, "rounds": rounds,
            "delta": delta, "within_delta": stop == "within-delta",
            "inference": inference and {k: inference.get(k) for k in ("inference", "generalizes_to", "documents")},
            "candidates": rows, "outcome": outcome, "windows_spent": sum(r["windows"] for r in rows.values())}
