"""Minimizers of an expensive objective over [0, 1]^n within a budget of distinct evaluations.

Golden-section (one parameter): on [lo, hi] for a unimodal f, both ends are evaluated first (for the
mixed b, b = 0 is PI and b = 1 is NTK-fixed: meaningful references, and boundary minima show), then
n interior points, each shrinking the bracket by 0.618. The answer is the best evaluated point; with
the bracket [a, c] around it, |x_best - x*| <= 0.618 (c - a) = (hi - lo) * 0.618^n, so
n = ceil(log(tol / (hi - lo)) / log(0.618)) interior evaluations reach `tol`: 10 for tol 0.01 on
[0, 1], 12 evaluations in all. A uniform grid with the same guarantee needs (hi - lo) / (2 tol) + 1
points (51 on [0, 1] at tol 0.01).

Several parameters (measured in benchmarks/bench_optimizers.py): scipy's bounded Nelder–Mead (the
default: fewest evaluations to the optimum in the benchmark's worst case), bounded Powell, or a
uniform grid of the budget; scipy's runs restart from the best point while they improve and budget
is left. Every point counts once (repeats are served from memory); the budget is a hard cap.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError

scipy_optimize = deferred("scipy.optimize")

INV_PHI = (math.sqrt(5) - 1) / 2  # 0.618…


class Optimizer(str, Enum):
    auto = "auto"  # golden-section for one parameter, Nelder-Mead for more
    powell = "powell"
    nelder_mead = "nelder-mead"
    grid = "grid"
    golden = "golden"
    one_at_a_time = "one-at-a-time"  # DPE's detection: each parameter alone from the start, then the bests together


OPTIMIZERS = tuple(o.value for o in Optimizer)


@dataclass
class SearchResult:
    best_b: float
    best_objective: float
    points: list[tuple[float, float]] = field(default_factory=list)  # (x, objective) in evaluation order
    bracket: tuple[float, float] = (0.0, 1.0)
    at_boundary: str | None = None  # "lo" / "hi" when the minimum sits at an end of the range
    non_unimodal_at: list[float] = field(default_factory=list)  # interior local maxima among the points


@dataclass
class Trace:
    """What an optimizer evaluated: (point in [0, 1]^n, value) in order; golden-section's final bracket."""
    points: list[tuple[list[float], float]]
    bracket: tuple[float, float] | None = None


def interior_evaluations(lo: float, hi: float, tol: float) -> int:
    return max(1, math.ceil(math.log(tol / (hi - lo)) / math.log(INV_PHI)))


def grid_evaluations(lo: float, hi: float, tol: float) -> int:
    """Points of a uniform grid whose spacing 2*tol puts every value within tol of a grid point."""
    return math.ceil((hi - lo) / (2 * tol)) + 1


def golden_evaluations(lo: float, hi: float, tol: float) -> int:
    """Evaluations `golden_section` makes: the two ends and its interior points."""
    return 2 + interior_evaluations(lo, hi, tol)


def check_range(lo: float, hi: float, tol: float) -> None:
    if not (0.0 <= lo <= 1.0 and 0.0 <= hi <= 1.0):
        raise RopeCliError(f"--lo {lo} / --hi {hi}: b must lie in [0, 1] (0 is PI, 1 is NTK-fixed)")
    if lo >= hi:
        raise RopeCliError(f"--lo {lo} must be below --hi {hi}")
    if not tol > 0:
        raise RopeCliError(f"--tol {tol} must be positive; e.g. --tol 0.01")


def golden_section(f: Callable[..., float], lo: float = 0.0, hi: float = 1.0, tol: float = 0.01,
                   bounded: bool = False) -> SearchResult:
    """Golden-section search of f on [lo, hi]. An interior point is only ever compared with the other
    interior point, so (`bounded`) f is told that value: f(b, above) may answer with a lower bound of f(b) when the
    bound exceeds `above` (a screened point: the comparison goes as with its full value); `above` = inf:
    the point is compared before its rival exists, so it needs its full value."""
    check_range(lo, hi, tol)
    seen: dict[float, float] = {}
    order: list[tuple[float, float]] = []

    def F(b: float, above: float | None = None) -> float:
        b = round(b, 12)
        if b not in seen:
            v = f(b, above) if bounded else f(b)
            seen[b] = v if v == v else math.inf  # NaN counts as worst
            order.append((b, seen[b]))
        return seen[b]

    F(lo)
    F(hi)
    a, c = lo, hi
    x1, x2 = c - INV_PHI * (c - a), a + INV_PHI * (c - a)
    f1 = F(x1, math.inf)
    f2 = F(x2, f1)
    for _ in range(interior_evaluations(lo, hi, tol) - 2):
        if f1 <= f2:  # minimum in [a, x2]
            c, x2, f2 = x2, x1, f1
            x1 = c - INV_PHI * (c - a)
            f1 = F(x1, f2)
        else:  # minimum in [x1, c]
            a, x1, f1 = x1, x2, f2
            x2 = a + INV_PHI * (c - a)
            f2 = F(x2, f1)
    best_b, best_f = min(order, key=lambda p: (p[1], p[0]))
    return SearchResult(best_b, best_f, order, (a, c), boundary(best_b, lo, hi), local_maxima(order))


def boundary(best: float, lo: float, hi: float) -> str | None:
    """"lo" / "hi" when the best point of a 1-D search is an end of its range (widen it), else None."""
    return "lo" if best == lo else "hi" if best == hi else None


def local_maxima(points: list[tuple[float, float]]) -> list[float]:
    """x where the objective, sorted by x, goes down then up again (a second valley)."""
    pts = sorted(points)
    return [x for (_, fa), (x, fb), (_, fc) in zip(pts, pts[1:], pts[2:]) if fb > fa and fb > fc]


def default_optimizer(n_dims: int) -> str:
    """golden-section for one parameter; Nelder-Mead for more: the fewest evaluations to the optimum in
    the worst case of benchmarks/bench_optimizers.py (Powell stalls in a tilted valley, CMA-ES and TPE
    need 3-4x more)."""
    return "golden" if n_dims == 1 else "nelder-mead"


def min_budget(n_dims: int) -> int:
    """The fewest evaluations a search can be given: golden-section's two ends and two interior points
    for one parameter; a start point and one bracketing sweep (3 per axis) for several."""
    return 4 if n_dims == 1 else 1 + 3 * n_dims


def one_at_a_time_points(n_dims: int, budget: int) -> int:
    """Grid points per parameter of the one-at-a-time search within `budget`: the start, each parameter's points with
    the others at the start, the bests together (2 + n x points evaluations at most)."""
    return (budget - 2) // n_dims


class _BudgetSpent(Exception):
    pass


def optimize(f: Callable[..., float], n: int, budget: int, optimizer: str = "auto",
             x0: list[float] | None = None, tol: float | None = None, bounded: bool = False) -> Trace:
    """Minimize f over [0, 1]^n within `budget` distinct evaluations. `tol`: golden-section's accuracy
    (default: as fine as the budget allows), the scipy optimizers' xtol (default 1e-3). `bounded`: f(x, above), as
    in `golden_section`, where the optimizer knows the one value x is compared with (golden-section);
    f(x, None) elsewhere (f then decides what a bound must exceed)."""
    if budget < min_budget(n):
        raise RopeCliError(f"--budget {budget} is below the minimum {min_budget(n)} for {n} parameter(s)")
    chosen = default_optimizer(n) if optimizer == "auto" else Optimizer(optimizer).value
    if chosen == "golden" and n != 1:
        raise RopeCliError("--optimizer golden searches one parameter; pass one --vary, or use powell")
    seen: dict[tuple, float] = {}
    order: list[tuple[list[float], float]] = []

    def clamp(v) -> float:
        return min(1.0, max(0.0, float(v)))

    def rounded(x) -> tuple:  # points 1e-6 apart are one point: the optimizers' re-visits cost nothing
        return tuple(round(clamp(v), 6) for v in x)

    # a coordinate at the start's value is evaluated at exactly that value (the method's defaults map back
    # to themselves: llama3's high_freq_factor 4, not 3.9999945), so the start shares the stock method's
    # cached windows and the first simplex keeps the defaults it does not move
    start = [{round(c, 6): c} for c in map(clamp, x0 or [])]

    def F(x, above: float | None = None) -> float:
        key = rounded(x)
        if key not in seen:
            if len(order) >= budget:
                raise _BudgetSpent
            point = [start[i].get(u, u) if start else u for i, u in enumerate(key)]
            v = f(point, above) if bounded else f(point)
            seen[key] = v if v == v else math.inf
            order.append((point, seen[key]))
        return seen[key]

    bracket = None
    try:
        if chosen == "golden":  # on [0, 1], as many interior points as the budget allows unless tol says fewer
            found = golden_section(lambda u, above=None: F([u], above), 0.0, 1.0, tol=tol or INV_PHI ** (budget - 2.5),
                                   bounded=True)
            bracket = found.bracket
        elif chosen == "grid":
            _grid(F, n, budget)
        elif chosen == "one-at-a-time":
            if one_at_a_time_points(n, budget) < 2:
                raise RopeCliError(f"--budget {budget} is below the minimum {2 + 2 * n} for a one-at-a-time search of "
                                   f"{n} parameter(s)")
            _one_at_a_time(F, n, one_at_a_time_points(n, budget), x0 or [0.5] * n)
        else:
            _scipy(F, chosen, n, x0 or [0.5] * n, tol or 1e-3, order)
    except _BudgetSpent:
        pass
    return Trace(order, bracket)


def _scipy(F, method: str, n: int, x0: list[float], tol: float, order: list) -> None:
    """scipy's bounded Powell or Nelder-Mead from x0, restarted from the best point (fresh directions or
    simplex) while a run still improves and budget is left: a converged run hands its evaluations back."""
    start, best = list(x0), math.inf
    F(start)
    for _ in range(50):
        if method == "powell":
            scipy_optimize.minimize(F, start, method="Powell", bounds=[(0.0, 1.0)] * n, options={"xtol": tol, "ftol": 1e-7})
        else:
            step = 0.25
            simplex = [start] + [[(x + step if x + step <= 1 else x - step) if i == j else x for j, x in enumerate(start)]
                                 for i in range(n)]
            scipy_optimize.minimize(F, start, method="Nelder-Mead", bounds=[(0.0, 1.0)] * n,
                     options={"xatol": tol, "fatol": 1e-7, "initial_simplex": simplex})
        x, v = min(order, key=lambda p: p[1])
        if not v < best - 1e-7:
            return
        start, best = x, v


def _one_at_a_time(F, n: int, points: int, x0: list[float]) -> None:
    """DPE's detection (LuLuLuyi/DPE effective_length_detection/run_niah_detect.sh: each dimension group's factor
    varied over T/len, len = T, T/2, … down to the window, the other groups held at one factor; the best per group
    kept): from x0, each coordinate alone over `points` even steps of [0, 1] (on a log range of powers of two, the
    powers themselves) with the others at x0, then every coordinate at its best together. Deterministic; a
    coordinate's ties go to the start, then to the lower value."""
    start = list(x0)
    at_start = F(start)
    grid = [i / (points - 1) for i in range(points)]
    best = []
    for a in range(n):
        tried = [(at_start, 0, start[a])] + [(F(start[:a] + [u] + start[a + 1:]), 1, u) for u in grid]
        best.append(min(tried)[2])
    F(best)


def _grid(F, n: int, budget: int) -> None:
    per_axis = max(2, int(math.floor(budget ** (1.0 / n) + 1e-9)))
    axis = [i / (per_axis - 1) for i in range(per_axis)]
    for x in itertools.product(axis, repeat=n):
        F(list(x))
