"""The search of the mixed exponent b ("binary search" in Su's "Transformer Upgrade Road 11"):
the golden-section search itself and its orchestration (objective, short-length guard, references),
both free of torch and of the CLI. `search_b` takes an evaluator function, so the same code runs
under the CLI's progress bar, in tests on injected objectives, or anywhere else.

Objective: mean log-PPL over the target lengths, every b scored on the same windows.
Guard (`max_short_regression`): a b whose PPL at the training length L, run with the target's k,
rises more than that many percent over the unscaled model scores +inf (rejected).
References: none, PI, NTK-fixed and the article's b = 0.625 on the same windows; PI and NTK-fixed
are the b = 0 and b = 1 evaluations, reused when the range includes them.

Search:

Golden-section search on [lo, hi] for a unimodal objective f(b): both ends are evaluated first
(b = 0 is PI, b = 1 is NTK-fixed, so the ends are meaningful references and expose boundary minima),
then n interior points, each shrinking the bracket by 0.618. The answer is the best evaluated b;
with the bracket [a, c] around it, |b_best - b*| <= 0.618 (c - a) = (hi - lo) * 0.618^n, so
n = ceil(log(tol / (hi - lo)) / log(0.618)) interior evaluations reach `tol`: 10 for tol 0.01 on
[0, 1], 12 evaluations in all. A uniform grid with the same guarantee needs (hi - lo) / (2 tol) + 1
points (51 on [0, 1] at tol 0.01).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.geometry import default_factor
from ropecli.specs import Spec, make_spec

# run(specs, lengths, description) -> one result dict per (spec, length), spec-major (Session.run)
Evaluate = Callable[[list[Spec], list[int], str], list[dict]]

REFERENCES = (("none", {}), ("pi", {}), ("ntk-fixed", {}), ("mixed", {"b": 0.625}))
# b at which mixed *is* the reference (b = 0: Lambda_m = k; b = 1: Lambda_m = k^(2m/d); both identities
# are tested in test_schedule_identities): an evaluated end of the range is reused instead of run again
SAME_AS_MIXED = {"pi": 0.0, "ntk-fixed": 1.0}

INV_PHI = (math.sqrt(5) - 1) / 2  # 0.618…


@dataclass
class SearchResult:
    best_b: float
    best_objective: float
    points: list[tuple[float, float]] = field(default_factory=list)  # (b, objective) in evaluation order
    bracket: tuple[float, float] = (0.0, 1.0)
    at_boundary: str | None = None  # "lo" / "hi" when the minimum sits at an end of the range
    non_unimodal_at: list[float] = field(default_factory=list)  # interior local maxima among the points


def interior_evaluations(lo: float, hi: float, tol: float) -> int:
    return max(1, math.ceil(math.log(tol / (hi - lo)) / math.log(INV_PHI)))


def grid_evaluations(lo: float, hi: float, tol: float) -> int:
    """Points of a uniform grid whose spacing 2*tol puts every b within tol of a grid point."""
    return math.ceil((hi - lo) / (2 * tol)) + 1


def check_range(lo: float, hi: float, tol: float) -> None:
    if not (0.0 <= lo <= 1.0 and 0.0 <= hi <= 1.0):
        raise RopeCliError(f"--lo {lo} / --hi {hi}: b must lie in [0, 1] (0 is PI, 1 is NTK-fixed)")
    if lo >= hi:
        raise RopeCliError(f"--lo {lo} must be below --hi {hi}")
    if not tol > 0:
        raise RopeCliError(f"--tol {tol} must be positive; e.g. --tol 0.01")


def golden_section(f: Callable[[float], float], lo: float = 0.0, hi: float = 1.0, tol: float = 0.01) -> SearchResult:
    check_range(lo, hi, tol)
    seen: dict[float, float] = {}
    order: list[tuple[float, float]] = []

    def F(b: float) -> float:
        b = round(b, 12)
        if b not in seen:
            v = f(b)
            seen[b] = v if v == v else math.inf  # NaN counts as worst
            order.append((b, seen[b]))
        return seen[b]

    F(lo)
    F(hi)
    a, c = lo, hi
    x1, x2 = c - INV_PHI * (c - a), a + INV_PHI * (c - a)
    f1, f2 = F(x1), F(x2)
    for _ in range(interior_evaluations(lo, hi, tol) - 2):
        if f1 <= f2:  # minimum in [a, x2]
            c, x2, f2 = x2, x1, f1
            x1 = c - INV_PHI * (c - a)
            f1 = F(x1)
        else:  # minimum in [x1, c]
            a, x1, f1 = x1, x2, f2
            x2 = a + INV_PHI * (c - a)
            f2 = F(x2)
    best_b, best_f = min(order, key=lambda p: (p[1], p[0]))
    result = SearchResult(best_b, best_f, order, (a, c))
    if best_b == lo:
        result.at_boundary = "lo"
    elif best_b == hi:
        result.at_boundary = "hi"
    result.non_unimodal_at = local_maxima(order)
    return result


def local_maxima(points: list[tuple[float, float]]) -> list[float]:
    """b values where the objective, sorted by b, goes down then up again (a second valley)."""
    pts = sorted(points)
    out = []
    for (_, fa), (b, fb), (_, fc) in zip(pts, pts[1:], pts[2:]):
        if fb > fa and fb > fc:
            out.append(b)
    return out


def search_b(run: Evaluate, train_len: int, lengths: list[int], *, lo: float = 0.0, hi: float = 1.0, tol: float = 0.01,
             log_n: bool = False, factor: float | None = None, max_short_regression: float | None = None) -> dict:
    """Golden-section search of b for the lowest mean log-PPL over `lengths`, with the guard and the
    references. Returns every number the CLI prints: best_b, evaluations, references, guard, counts."""
    check_range(lo, hi, tol)
    guard_k = factor if factor is not None else default_factor(max(lengths), train_len)
    guard = None
    if max_short_regression is not None:
        none_at_L = run([make_spec("none")], [train_len], "guard: none @ L")[0]
        guard = {"len": train_len, "factor": guard_k, "max_percent": max_short_regression, "none_ppl": none_at_L["ppl"]}

    evaluations: list[dict] = []

    def objective(b: float) -> float:
        rows = run([make_spec("mixed", {"b": b}, factor=factor, log_n=log_n)], lengths, f"b={b:.4f}")
        obj = mean_nll(rows)
        entry = {"b": b, "objective": obj, "ppl": {str(r["len"]): r["ppl"] for r in rows},
                 "ppl_err": {str(r["len"]): r["ppl_err"] for r in rows}, "cached": all(r["cached"] for r in rows)}
        if guard:
            short = run([make_spec("mixed", {"b": b}, factor=guard_k, log_n=log_n)], [train_len], f"guard b={b:.4f}")[0]
            rise = 100.0 * (short["ppl"] / guard["none_ppl"] - 1.0)
            entry["short_ppl"], entry["short_rise_percent"] = short["ppl"], rise
            if rise > max_short_regression:
                entry["violates_guard"] = True
                obj = math.inf
        evaluations.append(entry)
        return obj

    result = golden_section(objective, lo, hi, tol)
    by_b = {e["b"]: e for e in evaluations}
    return {
        "lengths": lengths, "log_n": log_n, "factor": factor, "lo": lo, "hi": hi, "tol": tol,
        "best_b": result.best_b, "best_objective": result.best_objective, "best_ppl": by_b[result.best_b]["ppl"],
        "at_boundary": result.at_boundary, "non_unimodal_at": result.non_unimodal_at, "bracket": list(result.bracket),
        "evaluations": evaluations, "references": reference_rows(run, lengths, log_n, factor, by_b), "guard": guard,
        "search_evaluations": len(evaluations), "grid_evaluations_same_accuracy": grid_evaluations(lo, hi, tol),
    }


def mean_nll(rows: list[dict]) -> float:
    """The objective: mean over lengths of log-PPL (= NLL per token)."""
    return float(sum(r["nll"] for r in rows) / len(rows))


def reference_rows(run: Evaluate, lengths: list[int], log_n: bool, factor: float | None, by_b: dict[float, dict]) -> list[dict]:
    """none, PI, NTK-fixed and b = 0.625 on the same windows; PI and NTK-fixed come from the
    search's b = 0 / b = 1 evaluations when the range includes them."""
    rows = []
    for name, params in REFERENCES:
        spec = make_spec(name, params, factor=factor, log_n=log_n)
        same_b = SAME_AS_MIXED.get(name, params.get("b") if name == "mixed" else None)
        if same_b in by_b:
            e = by_b[same_b]
            rows.append({"label": spec.label, "method": spec.method, "objective": e["objective"], "ppl": e["ppl"],
                         "same_as": f"mixed(b={same_b:g})"})
            continue
        res = run([spec], lengths, f"reference {spec.label}")
        rows.append({"label": spec.label, "method": spec.method, "objective": mean_nll(res),
                     "ppl": {str(r["len"]): r["ppl"] for r in res}})
    return rows
