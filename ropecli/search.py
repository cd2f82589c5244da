"""Bracketing search of the mixed exponent b ("binary search" in seed 003), numpy only.

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
