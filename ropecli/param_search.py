"""`ropecli search`: the continuous parameters of any registry method, searched within a budget of
evaluations, then re-measured on held-out windows. Free of torch and of the CLI: `run_search` takes
the evaluators (Session.run of the searched windows and of the held-out ones), so tests drive it
with injected objectives.

Search space: each varied parameter is a `Dim` with bounds (defaults in `DEFAULT_BOUNDS`, or
`--vary NAME=LO:HI`), mapped to [0, 1] (log-scaled for the YaRN betas and llama3's factors) for the
optimizer. Optimizers (measured in benchmarks/bench_optimizers.py):
- 1 parameter: golden-section (as `search-b`), both ends first;
- 2+ parameters: scipy's bounded Nelder–Mead (default: fewest evaluations to the optimum in the
  worst case of the benchmark), bounded Powell, or a uniform grid of the budget; scipy's runs are
  restarted from the best point while they improve and budget is left.
The start point is the method's default where it lies inside the bounds; for the clamped mixed
family the critical pair of the geometry (LongRoPE2's critical dimension) is the start of m_c.
Every evaluation counts once (repeats are served from memory); the budget is a hard cap. Results
are cached per evaluation (`ropecli.evaluate`), and the optimizers are deterministic, so a rerun
after an interrupt replays the finished evaluations from the cache and resumes.

Held-out protocol: the search sees windows 0 … n-1 of the seeded sample; the verdict is made on
windows n … n+h-1 of the same sample (disjoint text: windows never overlap), where the winner and
every standard method (none, PI, NTK-aware, NTK-fixed, dynamic, YaRN, llama3, mixed b = 0.625, and
any `--reference`) are scored and compared by paired differences (`ropecli.stats`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.geometry import Geometry, critical_pair
from ropecli.schedules import format_label, resolve_method
from ropecli.search import INV_PHI, Evaluate, Scorer, golden_section
from ropecli.specs import Spec, make_spec

OPTIMIZERS = ("auto", "powell", "nelder-mead", "grid", "golden")
STANDARD = (("none", {}), ("pi", {}), ("ntk-aware", {}), ("ntk-fixed", {}), ("dynamic", {}), ("yarn", {}),
            ("llama3", {}), ("mixed", {"b": 0.625}))


@dataclass(frozen=True)
class Dim:
    """One searched parameter: bounds, and whether the optimizer sees it on a log scale."""
    name: str
    lo: float
    hi: float
    log: bool = False

    def value(self, u: float) -> float:
        u = min(1.0, max(0.0, u))
        if self.log:
            return math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo)))
        return self.lo + u * (self.hi - self.lo)

    def unit(self, v: float) -> float:
        if self.log:
            return (math.log(v) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (v - self.lo) / (self.hi - self.lo)


def default_bounds(method: str, name: str, geom: Geometry, varied: list[str]) -> tuple[float, float, bool]:
    """(lo, hi, log scale) of a parameter when `--vary NAME` gives no bounds."""
    half = geom.n_pairs
    table = {
        ("mixed", "b"): (0.0, 8.0 if "critical" in varied else 1.0, False),
        ("mixed", "critical"): (1.0, float(half), False),
        ("yarn", "beta_fast"): (2.0, 128.0, True),
        ("yarn", "beta_slow"): (0.125, 8.0, True),
        ("yarn", "attention_factor"): (0.8, 1.6, False),
        ("yarn", "mscale"): (0.0, 2.0, False),
        ("llama3", "low_freq_factor"): (0.25, 8.0, True),
        ("llama3", "high_freq_factor"): (1.0, 64.0, True),
        ("longrope", "attention_factor"): (0.8, 1.6, False),
    }
    if (method, name) not in table:
        raise RopeCliError(f"{method} parameter '{name}' has no default search range; give one, e.g. --vary {name}=LO:HI")
    return table[(method, name)]


def parse_vary(items: list[str] | None, method: str, geom: Geometry) -> list[Dim]:
    """`--vary b`, `--vary critical=4:32` -> Dims, checked against the method's parameters and domain."""
    m = resolve_method(method)
    params = {p.name: p for p in m.params if p.name != "factors"}
    if not items:
        raise RopeCliError(f"nothing to search: pass --vary with a parameter of {m.name} "
                           f"({', '.join(params) or 'it has none'}), e.g. --vary {next(iter(params), 'b')}")
    names = [item.partition("=")[0].strip().replace("-", "_") for item in items]
    dims = []
    for item, name in zip(items, names):
        if name not in params:
            raise RopeCliError(f"--vary {name}: method '{m.name}' has no such parameter "
                               f"(it has: {', '.join(params) or 'none'})")
        if names.count(name) > 1:
            raise RopeCliError(f"--vary {name} is given twice; give each parameter once")
        _, sep, rng = item.partition("=")
        if sep:
            try:
                lo_s, hi_s = rng.split(":")
                lo, hi = float(lo_s), float(hi_s)
            except ValueError:
                raise RopeCliError(f"--vary {item}: write bounds as NAME=LO:HI, e.g. --vary {name}=0:4") from None
            log = default_bounds(m.name, name, geom, names)[2] if (m.name, name) in _LOGGED else False
        else:
            lo, hi, log = default_bounds(m.name, name, geom, names)
        if not lo < hi:
            raise RopeCliError(f"--vary {name}={lo:g}:{hi:g}: the lower bound must be below the upper one")
        p = params[name]
        if (p.lo is not None and lo < p.lo) or (p.hi is not None and hi > p.hi) or (name == "critical" and hi > geom.n_pairs):
            top = geom.n_pairs if name == "critical" else p.hi
            raise RopeCliError(f"--vary {name}={lo:g}:{hi:g} leaves {m.name}'s domain "
                               f"[{'-inf' if p.lo is None else f'{p.lo:g}'}, {'inf' if top is None else f'{top:g}'}]; narrow it")
        if log and lo <= 0:
            raise RopeCliError(f"--vary {name}={lo:g}:{hi:g}: {name} is searched on a log scale; the lower bound must be positive")
        dims.append(Dim(name, lo, hi, log))
    return dims


_LOGGED = {("yarn", "beta_fast"), ("yarn", "beta_slow"), ("llama3", "low_freq_factor"), ("llama3", "high_freq_factor")}


def default_optimizer(n_dims: int) -> str:
    """golden-section for one parameter; Nelder-Mead for more: the fewest evaluations to the optimum in
    the worst case of benchmarks/bench_optimizers.py (Powell stalls in a tilted valley, CMA-ES and TPE
    need 3-4x more)."""
    return "golden" if n_dims == 1 else "nelder-mead"


def min_budget(n_dims: int) -> int:
    """The fewest evaluations a search can be given: golden-section's two ends and two interior points
    for one parameter; a start point and one bracketing sweep (3 per axis) for several."""
    return 4 if n_dims == 1 else 1 + 3 * n_dims


def start_point(method: str, dims: list[Dim], fixed: dict, geom: Geometry) -> list[float]:
    """In [0, 1]^n: the method's defaults (the clamped mixed family: m_c = the critical pair, b = 1)."""
    m = resolve_method(method)
    defaults = {p.name: p.default for p in m.params}
    if method == "mixed" and any(d.name == "critical" for d in dims):
        defaults["critical"] = float(critical_pair(geom) or geom.n_pairs)
        defaults["b"] = 1.0
    out = []
    for d in dims:
        v = fixed.get(d.name, defaults.get(d.name))
        usable = isinstance(v, (int, float)) and math.isfinite(v) and (v > 0 or not d.log)
        out.append(min(1.0, max(0.0, d.unit(v))) if usable else 0.5)
    return out


class _BudgetSpent(Exception):
    pass


def optimize(f: Callable[[list[float]], float], n: int, budget: int, optimizer: str = "auto",
             x0: list[float] | None = None, tol: float = 1e-3) -> list[tuple[list[float], float]]:
    """Minimize f over [0, 1]^n within `budget` distinct evaluations; returns every (point, value) in
    evaluation order. The best is the minimum of them."""
    if budget < min_budget(n):
        raise RopeCliError(f"--budget {budget} is below the minimum {min_budget(n)} for {n} parameter(s)")
    chosen = default_optimizer(n) if optimizer == "auto" else optimizer
    if chosen not in OPTIMIZERS:
        raise RopeCliError(f"--optimizer {optimizer}: choose from {', '.join(OPTIMIZERS)}")
    if chosen == "golden" and n != 1:
        raise RopeCliError("--optimizer golden searches one parameter; pass one --vary, or use powell")
    seen: dict[tuple, float] = {}
    order: list[tuple[list[float], float]] = []

    def F(x) -> float:
        key = tuple(round(min(1.0, max(0.0, float(v))), 6) for v in x)
        if key not in seen:
            if len(order) >= budget:
                raise _BudgetSpent
            v = f(list(key))
            seen[key] = v if v == v else math.inf
            order.append((list(key), seen[key]))
        return seen[key]

    x0 = x0 or [0.5] * n
    try:
        if chosen == "golden":  # search-b's golden-section on [0, 1], as many interior points as the budget allows
            golden_section(lambda u: F([u]), 0.0, 1.0, tol=INV_PHI ** (budget - 2.5))
        elif chosen == "grid":
            _grid(F, n, budget)
        else:
            _scipy(F, chosen, n, x0, tol, order)
    except _BudgetSpent:
        pass
    return order


def _scipy(F, method: str, n: int, x0: list[float], tol: float, order: list) -> None:
    """scipy's bounded Powell or Nelder-Mead from x0, restarted from the best point (fresh directions or
    simplex) while a run still improves and budget is left: a converged run hands its evaluations back."""
    from scipy.optimize import minimize

    start, best = list(x0), math.inf
    F(start)
    for _ in range(50):
        if method == "powell":
            minimize(F, start, method="Powell", bounds=[(0.0, 1.0)] * n, options={"xtol": tol, "ftol": 1e-7})
        else:
            step = 0.25
            simplex = [start] + [[(x + step if x + step <= 1 else x - step) if i == j else x for j, x in enumerate(start)]
                                 for i in range(n)]
            minimize(F, start, method="Nelder-Mead", bounds=[(0.0, 1.0)] * n,
                     options={"xatol": tol, "fatol": 1e-7, "initial_simplex": simplex})
        x, v = min(order, key=lambda p: p[1])
        if not v < best - 1e-7:
            return
        start, best = x, v


def _grid(F, n: int, budget: int) -> None:
    import itertools

    per_axis = max(2, int(math.floor(budget ** (1.0 / n) + 1e-9)))
    axis = [i / (per_axis - 1) for i in range(per_axis)]
    for x in itertools.product(axis, repeat=n):
        F(list(x))


def run_search(run: Evaluate, held_out_run: Evaluate | None, geom: Geometry, method: str, dims: list[Dim], fixed: dict,
               lengths: list[int], *, budget: int, optimizer: str = "auto", objective: str = "ppl", log_n: bool = False,
               factor: float | None = None, max_short_regression: float | None = None, max_short_kl: float | None = None,
               references: list[Spec] | None = None) -> dict:
    """Search `dims` of `method` (other parameters `fixed`) for the lowest objective over `lengths`
    within `budget` evaluations, then re-measure the winner and the standard methods on held-out windows."""
    from ropecli.geometry import default_factor

    guard_k = factor if factor is not None else default_factor(max(lengths), geom.train_len)
    score = Scorer(run, geom.train_len, lengths, objective, guard_k, max_short_regression, max_short_kl)
    evaluations: list[dict] = []

    def spec_at(u: list[float]) -> Spec:
        return make_spec(method, {**fixed, **{d.name: d.value(x) for d, x in zip(dims, u)}}, factor=factor, log_n=log_n)

    def f(u: list[float]) -> float:
        params = {d.name: d.value(x) for d, x in zip(dims, u)}
        try:  # a point outside the method's joint domain (llama3 with high <= low) is infeasible, not an error
            spec = spec_at(u)
            spec.schedule(geom)  # pure numpy: raises on such a point before any forward pass
        except RopeCliError as e:
            evaluations.append({"params": params, "label": format_label(method, {**fixed, **params}),
                                "objective": math.inf, "infeasible": str(e)})
            return math.inf
        entry = {"params": params, "label": spec.label, **score(spec, spec.label)}
        evaluations.append(entry)
        return entry["objective"] if not entry.get("violates_guard") else math.inf

    x0 = start_point(method, dims, fixed, geom)
    points = optimize(f, len(dims), budget, optimizer, x0)
    best_i = min(range(len(points)), key=lambda i: points[i][1])
    best = evaluations[best_i]
    if not math.isfinite(best["objective"]) or best.get("violates_guard"):
        raise RopeCliError("every evaluated schedule broke a guard or diverged; loosen --max-short-kl / "
                           "--max-short-regression or widen --vary's bounds")
    out = {
        "method": method, "fixed": fixed, "vary": [vars(d) for d in dims], "lengths": lengths, "objective_name": objective,
        "optimizer": default_optimizer(len(dims)) if optimizer == "auto" else optimizer,
        "budget": budget, "start": {d.name: d.value(x) for d, x in zip(dims, x0)}, "log_n": log_n, "factor": factor,
        "evaluations": evaluations, "best_params": best["params"], "best_label": best["label"],
        "best_objective": best["objective"], "guard": score.guard, "search_evaluations": len(evaluations),
    }
    if held_out_run is not None:
        winner = make_spec(method, {**fixed, **best["params"]}, factor=factor, log_n=log_n)
        out["held_out"] = held_out_verdict(held_out_run, geom, lengths, objective, winner, references or [], log_n, factor)
    return out


def held_out_verdict(run: Evaluate, geom: Geometry, lengths: list[int], objective: str, winner: Spec,
                     extra: list[Spec], log_n: bool, factor: float | None) -> dict:
    """The winner and the standard methods on held-out windows; the winner against the best of them, paired."""
    from ropecli.stats import paired_difference

    score = Scorer(run, geom.train_len, lengths, objective, 1.0, None, None)
    standard = [make_spec(n, p, factor=factor, log_n=log_n) for n, p in STANDARD] + list(extra)
    rows = [{"label": winner.label, "role": "winner", **score(winner, f"held-out {winner.label}")}]
    for spec in standard:
        if spec.label != winner.label:
            rows.append({"label": spec.label, "role": "standard", **score(spec, f"held-out {spec.label}")})
    win = rows[0]
    for r in rows:
        r["vs_winner"] = paired_difference(r["windows"], win["windows"])
    best_std = min((r for r in rows[1:]), key=lambda r: r["objective"])
    d = paired_difference(win["windows"], best_std["windows"])
    if d["diff"] is not None and d["diff"] < 0 and d["distinguishable"]:
        verdict = (f"{winner.label} beats the best standard method, {best_std['label']}, on held-out windows: "
                   f"{d['diff']:+.4f} nats ± {d['se']:.2g} (paired 95%)")
    elif d["diff"] is not None and d["diff"] > 0 and d["distinguishable"]:
        verdict = (f"{best_std['label']} beats the searched {winner.label} on held-out windows: "
                   f"{-d['diff']:+.4f} nats ± {d['se']:.2g} (paired 95%); use {best_std['label']}")
    else:
        verdict = (f"{winner.label} and the best standard method, {best_std['label']}, are not distinguishable on "
                   f"held-out windows ({d['diff']:+.4f} nats ± {d['se'] or 0:.2g}, paired 95%)")
    return {"rows": rows, "best_standard": best_std["label"], "winner_vs_best_standard": d, "verdict": verdict,
            "winner_beats_best_standard": bool(d["diff"] is not None and d["diff"] < 0 and d["distinguishable"])}


def parse_reference(text: str, factor: float | None, log_n: bool) -> Spec:
    """`--reference yarn`, `--reference mixed:b=0.95`, `--reference yarn:beta_fast=16,beta_slow=2`."""
    name, _, rest = text.partition(":")
    params = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, sep, value = item.partition("=")
        try:
            params[key.strip().replace("-", "_")] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise RopeCliError(f"--reference {text}: write METHOD or METHOD:KEY=VALUE,KEY=VALUE, e.g. --reference mixed:b=0.95")
    return make_spec(name.strip(), params, factor=factor, log_n=log_n)
