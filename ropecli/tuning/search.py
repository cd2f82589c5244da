"""The one search engine: `ropecli search` (any method's continuous parameters) and `ropecli search-b`
(the mixed exponent b, "binary search" in Su's "Transformer Upgrade Road 11") are both `run_search`.

`run_search` scores each point the optimizer asks for (`objective.Scorer`: objective over the target
lengths, short-context guards), so a point outside the method's joint domain (llama3 with high <= low)
is infeasible (+inf), not an error. After the search, every evaluation gets its paired difference to
the best (`vs_best`); a one-parameter search adds its notes from this one code path: the best at an
end of the range (`at_boundary`), bumps in the evaluated objective (`non_unimodal_at`), the golden
bracket, and the interval of values not distinguishable from the best (`equivalent`).

Verdicts, against the methods people deploy (`ropecli.spec.STANDARD_METHODS`):
- `search-b` = `run_search` of mixed over b with golden-section, then the standard methods on the
  same windows (`search_verdicts.reference_rows`; PI and NTK-fixed are the b = 0 and b = 1 evaluations, reused) and
  the verdict (`search_verdicts.references_verdict`), which says first when a reference beats the best b;
- `search`: the winner and the standard methods (and any `--reference`) re-measured on held-out
  windows no search saw: other documents where there are two or more (`search_verdicts.held_out_verdict`).
Results are cached per evaluation and the optimizers are deterministic, so a rerun after an interrupt
replays the finished evaluations from the cache and resumes.
"""

from __future__ import annotations

import math
from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.evaluation.metrics import PPL, Metric
from ropecli.maps.position_maps import BoundMap, check_map
from ropecli.rope.schedule import format_label
from ropecli.rope.target import Target
from ropecli.rope.temperature import TUNABLE_NAMES, tempered
from ropecli.spec import Spec, make_spec, reference_spec
from ropecli.tuning.late_precision import first_windows, promote
from ropecli.tuning.objective import Evaluate, Scorer, pair
from ropecli.tuning.optimizers import (
    boundary,
    check_range,
    default_optimizer,
    grid_evaluations,
    interior_evaluations,
    local_maxima,
    optimize,
)
from ropecli.tuning.racing import worse_test
from ropecli.tuning.search_verdicts import held_out_verdict, reference_rows, references_verdict
from ropecli.tuning.space import Dim, Effort, SearchSpace, start_point

SCREEN_ALPHA = 0.05  # one interim look per point, against the one incumbent


def run_search(run: Evaluate, target: Target, space: SearchSpace, effort: Effort, score: Scorer, *,
               held_out_run: Evaluate | None = None, references: list[Spec] | None = None,
               expect: Callable[..., None] = lambda count, metric=PPL, samples=None: None) -> dict:
    """Search `space` for the lowest objective `score` gives over the target's lengths (specs built with the target's
    factor as given), spending `effort`; with `held_out_run`, re-measure the winner and the standard methods
    (`references`) there. `score`: a Scorer (`scorer`), shared with a caller that scores its own references with the
    same guards (search-b); `expect` hears of the windows a screened or late-precision search did not take."""
    geom, lengths, factor = target.geom, list(target.lengths), target.factor
    method, dims, fixed, log_n, position_map = space.method, space.dims, space.fixed, space.log_n, space.position_map
    budget, optimizer, tol, windows, screen, finalists = (effort.budget, effort.optimizer, effort.tol, effort.windows,
                                                          effort.screen, effort.finalists)
    objective = score.objective
    evaluations: list[dict] = []

    def screened(spec: Spec, above: float | None) -> dict | None:
        """The point's entry on its first windows when it is already significantly worse than the incumbent
        there (one-sided paired t-test at SCREEN_ALPHA), else None. Its objective is then a *lower bound*:
        the incumbent's objective plus the lower confidence bound of the paired difference, so the optimizer
        sees a value the point's full objective exceeds (at that confidence), never an invented one. It stops
        only when that bound also lies above the value it is compared with (`above`, golden-section's other
        interior point), or, where the optimizer does not say (a simplex), above every value it has seen: an
        optimizer only compares values, so each comparison goes as with the full objective and the screened
        search visits the points the full one does (benchmarks/bench_racing.py)."""
        full = [e for e in evaluations if "windows" in e and "stopped_early" not in e and not e.get("violates_guard")
                and math.isfinite(e["objective"])]
        n0 = max(2, (windows or 0) // 2)
        if not (screen and full and windows and n0 < windows):
            return None
        incumbent = min(full, key=lambda e: e["objective"])
        part = score(spec, samples=n0, guards=False)
        test = worse_test(part["values"], incumbent["values"], part["docs"], SCREEN_ALPHA, tokens=part.get("weights"))
        if not test["worse"] or test["lower"] is None:
            return None
        if above is None:
            above = max(e["objective"] for e in evaluations if math.isfinite(e["objective"]) and not e.get("violates_guard"))
        if not incumbent["objective"] + test["lower"] > above:  # the optimizer could rank it below its rival
            return None
        expect(-len(lengths), score.objective, windows - n0)  # the windows it did not take, at every length
        return {**part, "objective": incumbent["objective"] + test["lower"], "stopped_early": {
            "windows": n0, "of": windows, "vs": incumbent["label"], "diff": test["diff"], "se": test["se"], "bound": "lower"}}

    def f(u: list[float], above: float | None = None) -> float:
        params = {d.name: d.value(x) for d, x in zip(dims, u)}
        try:  # a point outside the method's joint domain is infeasible, not an error
            spec = point_spec(method, {**fixed, **params}, factor, log_n, position_map)
            check_map(spec.position_map, [*lengths, *([score.train_len] if score.guard else [])])  # else: infeasible
            params = {**params, **{k: v for k, v in spec.position_map.params if k in params}} if position_map else params
            spec.schedule(geom)  # pure numpy: raises on such a point before any forward pass
        except RopeCliError as e:
            evaluations.append({"params": params, "label": format_label(method, {**fixed, **params}),
                                "objective": math.inf, "infeasible": str(e)})
            return math.inf
        entry = {"params": params, "label": spec.label, **(
            {**score(spec, samples=n0), "partial": {"windows": n0, "of": windows}} if n0 else screened(spec, above) or score(spec))}
        evaluations.append(entry)
        return entry["objective"] if not entry.get("violates_guard") else math.inf

    x0 = start_point(method, dims, {**fixed, **(position_map.values if position_map else {})}, geom)
    if changed := TUNABLE_NAMES & {*fixed, *(d.name for d in dims)}:  # the model must ship that temperature: one line
        tempered(geom.temperature, tuple((name, 0.0) for name in sorted(changed)))
    n0 = first_windows(windows, finalists)
    trace = optimize(f, len(dims), budget, optimizer, x0, tol, bounded=True)
    best = promote(evaluations, finalists, lambda e: score(point_spec(method, {**fixed, **e["params"]}, factor, log_n,
                                                                      position_map)),
                   windows, lambda n: expect(-len(lengths), score.objective, n)) if n0 else \
        evaluations[min(range(len(trace.points)), key=lambda i: trace.points[i][1])]
    if not math.isfinite(best["objective"]) or best.get("violates_guard"):
        raise RopeCliError("every evaluated schedule broke a guard or diverged; loosen --max-short-kl / "
                           "--max-short-regression or widen --vary's bounds")
    out = {
        "method": method, "fixed": fixed, "vary": [vars(d) for d in dims], "lengths": lengths, "objective_name": objective.name,
        "optimizer": default_optimizer(len(dims)) if optimizer == "auto" else optimizer,
        "budget": budget, "start": {d.name: d.value(x) for d, x in zip(dims, x0)}, "log_n": log_n, "factor": factor,
        "evaluations": evaluations, "best_params": best["params"], "best_label": best["label"],
        "late_precision": {"first_windows": n0, "of": windows, "finalists": finalists} if n0 else None,
        "best_objective": best["objective"], "guard": score.guard, "search_evaluations": len(evaluations),
        **compare_with_best(evaluations, best, dims, trace.bracket),
    }
    if held_out_run is not None:
        winner = point_spec(method, {**fixed, **best["params"]}, factor, log_n, position_map)
        out["held_out"] = held_out_verdict(held_out_run, target, objective, winner, references or [], log_n)
    return out


def compare_with_best(evaluations: list[dict], best: dict, dims: list[Dim], bracket: tuple | None) -> dict:
    """Each scored evaluation's paired difference to the best (`vs_best`; `tied`: shown equivalent within
    the margin); for one parameter, the notes of a 1-D search: boundary, bumps, golden bracket, the
    interval of values shown equivalent to the best. A point stopped early has only a lower bound for
    its objective: its tie is unknown (None) and it is left out of the bumps and the interval."""
    scored = [e for e in evaluations if "windows" in e and "stopped_early" not in e and "partial" not in e]
    for e in evaluations:
        if "stopped_early" in e:
            e["vs_best"] = {**pair(e, best), "best": False, "tied": None, "verdict": "stopped early (lower bound)",
                            "stopped_early": True}
        elif "partial" in e:  # late precision: an estimate on the first windows, its tie unknown
            e["vs_best"] = {**pair(e, best), "best": False, "tied": None,
                            "verdict": f"partial ({e['partial']['windows']} of {e['partial']['of']} windows)"}
    for e in scored:
        p = pair(e, best)
        e["vs_best"] = {**p, "best": e is best,
                        "tied": e is best or (p["verdict"] == "equivalent" and not e.get("violates_guard"))}
    if len(dims) != 1:
        return {}
    d = dims[0]
    x = {id(e): e["params"][d.name] for e in evaluations}
    tied = sorted(x[id(e)] for e in scored if e["vs_best"]["tied"])
    measured = [e for e in evaluations if "stopped_early" not in e and "partial" not in e]
    return {"at_boundary": boundary(x[id(best)], d.lo, d.hi),
            "non_unimodal_at": local_maxima([(x[id(e)], e["objective"]) for e in measured]),
            "bracket": [d.value(u) for u in bracket] if bracket else None, "equivalent": [tied[0], tied[-1]],
            # the evaluated points themselves: the values between two equivalent points are not shown equivalent
            "equivalent_points": [x[id(e)] for e in sorted(scored, key=lambda e: x[id(e)])
                                  if e["vs_best"]["tied"] and e is not best],
            "undecided_points": [x[id(e)] for e in sorted(scored, key=lambda e: x[id(e)])
                                 if e["vs_best"].get("verdict") == "undecided" and e is not best]}


def scorer(run: Evaluate, target: Target, objective: Metric = PPL, max_short_regression: float | None = None,
           max_short_kl: float | None = None) -> Scorer:
    """The Scorer of a search on `target`: its objective over the target's lengths, the guards at the shipped length
    (the target's k) against the model as shipped."""
    geom = target.geom
    return Scorer(run, geom.shipped_len, list(target.lengths), objective, target.k, max_short_regression, max_short_kl,
                  reference_spec(geom))


def search_b(run: Evaluate, target: Target, *, lo: float = 0.0, hi: float = 1.0, tol: float = 0.01,
             log_n: bool = False, max_short_regression: float | None = None,
             max_short_kl: float | None = None, objective: Metric = PPL, windows: int | None = None,
             screen: bool = False, expect: Callable[..., None] = lambda count, metric=PPL, samples=None: None) -> dict:
    """`search --method mixed --vary b=LO:HI` with golden-section to accuracy `tol`, then the standard
    methods on the same windows and the verdict. Returns every number the CLI prints. `windows`,
    `screen`, `expect`: as in `run_search` (hopeless points stop after their first windows)."""
    check_range(lo, hi, tol)
    evals = interior_evaluations(lo, hi, tol) + 2  # both ends, then the interior points
    geom, lengths, factor = target.geom, list(target.lengths), target.factor
    score = scorer(run, target, objective, max_short_regression, max_short_kl)  # one Scorer: the references meet the same guards
    out = run_search(run, target, SearchSpace("mixed", (Dim("b", lo, hi),), log_n=log_n),
                     Effort(evals, "golden", tol / (hi - lo), windows, screen), score, expect=expect)
    for e in out["evaluations"]:
        e["b"] = e["params"]["b"]
    best = next(e for e in out["evaluations"] if e.get("vs_best", {}).get("best"))
    references = reference_rows(score, geom, log_n, factor, {e["b"]: e for e in out["evaluations"]
                                                        if "windows" in e and "stopped_early" not in e})
    return {
        "lengths": lengths, "objective_name": objective.name, "log_n": log_n, "factor": factor, "lo": lo, "hi": hi, "tol": tol,
        "best_b": best["b"], "best_objective": best["objective"], "best_ppl": best.get(PPL.field),
        "at_boundary": out["at_boundary"], "non_unimodal_at": out["non_unimodal_at"], "bracket": out["bracket"],
        "evaluations": out["evaluations"], "references": references, "guard": out["guard"],
        "equivalent_b": out["equivalent"], "equivalent_points": out["equivalent_points"],
        "undecided_points": out["undecided_points"], **references_verdict(references, best),
        "search_evaluations": out["search_evaluations"], "grid_evaluations_same_accuracy": grid_evaluations(lo, hi, tol),
    }


def point_spec(method: str, params: dict, factor: float | None, log_n: bool, position_map: BoundMap | None = None) -> Spec:
    """The Spec of one searched point: the method's parameters to the method, a position map's to the map (its integer
    parameters rounded: the label and the cache key say what ran)."""
    if not position_map:
        return make_spec(method, params, factor=factor, log_n=log_n)
    own = {p.name for p in position_map.record.params}
    spec = make_spec(method, {k: v for k, v in params.items() if k not in own}, factor=factor, log_n=log_n)
    return spec.but(position_map=position_map.but(**{k: v for k, v in params.items() if k in own}))
