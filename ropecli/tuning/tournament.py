"""The tournament of `ropecli advise`: every context-extension method on the same windows, searched
where it has knobs, ranked by a written rule on held-out windows (the winner is exported by
`ropecli.tuning.advise_exports.export_winner`, through `ropecli.export.plan.export_schedule`, the function
`ropecli export` runs). Free of torch and of the CLI: `tournament` takes the evaluators (Session.run
of the searched and of the held-out windows) and the user's plan whole (`AdvisePlan`).

Candidates (all at the longest target's k at every length, as the deployed config runs them; scored
on the same windows):
    none, pi, ntk-aware, dynamic, yarn (transformers' defaults), llama3 (defaults), ntk-fixed,
    yarn-tuned      YaRN's beta_fast, beta_slow searched (`ropecli search`), as its authors advise
    mixed-b         the seed's mixed family, b in [0, 1] by golden-section (`search-b`)
    mixed-clamped   the clamped mixed family, b and the critical pair m_c searched (`ropecli search`)
Searches run on windows 0…n-1 (their evaluations are cached and reused, never repeated); the
ranking uses held-out windows n…n+h-1 that no search saw.

Measures per candidate (held-out; `ropecli.tuning.held_out`): PPL at every target length (paired),
passkey accuracy at the longest target (skipped, with a note, when the unscaled model retrieves under
`PASSKEY_BASELINE` of keys within L), and the short-context cost at L: KL against the unscaled model
and the PPL rise, with the target's k. All of them for every candidate (`racing=None`), or raced: a
candidate significantly worse than the leader is dropped and measured no further, the tied ones get
more windows, costs are measured for the candidates left and passkey for the winner.

The ranking rule (`ropecli.tuning.ranking`, printed with the result): constraints; the best by mean
log-PPL; every other candidate shown worse, shown equivalent within the margin, or undecided (95% for
the whole ranking, on the inference that fits the data); the tie-break (least cost within L) only
among the best and the candidates shown equivalent to it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

from ropecli.evaluation.inference import MARGIN
from ropecli.evaluation.metrics import PPL, Metric
from ropecli.export.registry import PER_FORWARD, Runtime
from ropecli.maps.map_spelling import map_json
from ropecli.rope.target import Target
from ropecli.spec import Spec, make_spec, reference_spec
from ropecli.tuning.candidates import map_candidates, map_rule, map_spec, search_plans, search_ranges, static_candidates
from ropecli.tuning.error_budget import error_budget
from ropecli.tuning.held_out import (PASSKEY_BASELINE, Allowance, HeldOutBound, Measure, Racing, passkey_baseline,
                                     race_candidates)
from ropecli.tuning.objective import Evaluate
from ropecli.tuning.racing import ALPHA
from ropecli.tuning.ranking import RULE, RULE_RACED, rank
from ropecli.tuning.search import point_spec, run_search, scorer
from ropecli.tuning.serving import serve_workload
from ropecli.tuning.space import Effort, SearchSpace, parse_vary
from ropecli.tuning.standings import Standings
from ropecli.tuning.task_guard import guard_line, guard_row, guard_why
from ropecli.tuning.workload import Workload

__all__ = ["Racing", "tournament"]


def search_candidates(run: Evaluate, target: Target, names: list[str], budget: int,
                      log_n: bool, windows: int | None = None, screen: bool = False,
                      expect: Callable[..., None] = lambda count, metric=PPL, samples=None: None,
                      metric: Metric = PPL) -> dict[str, dict]:
    """The searched candidates' winners: name -> {spec, search} (the search's JSON), each searched on `metric`."""
    plans, mapped = search_plans(budget, target.geom.shipped_len, target.longest), map_candidates()
    out = {}
    for name in names:
        if name not in plans:
            continue
        method, vary, n_evals = plans[name]
        pmap = ()
        if name in mapped:  # the model as shipped, the map's parameters searched around its rule
            method, T = reference_spec(target.geom).method, target.longest
            pmap, vary = map_rule(name, target.geom.shipped_len, T), search_ranges(name, target.geom.shipped_len, T)
        dims = parse_vary(vary, method, target.geom, pmap)
        finalists = max(2, n_evals // 4) if screen else 0  # raced: precision bought late
        optimizer = pmap.record.optimizer if pmap else "auto"
        res = run_search(run, target, SearchSpace(method, tuple(dims), log_n=log_n, position_map=pmap),
                         Effort(n_evals, optimizer, windows=windows, screen=screen, finalists=finalists),
                         scorer(run, target, metric), expect=expect)
        out[name] = {"spec": point_spec(method, res["best_params"], target.factor, log_n, pmap), "search": res}
    return out


def serving_most(entrants: int, workload: Workload, runtimes: list[Runtime]) -> int:
    """The most (schedule, length) evaluations `serve_workload` can run for `entrants` candidates: each in every
    export a runtime serves differently (two where it picks factors per forward pass) at every workload length and
    within Ls, and the model as shipped once. It runs each distinct served schedule once, so most often fewer."""
    exports = sum(2 if runtime.rule == PER_FORWARD else 1 for runtime in runtimes)
    return entrants * exports * (len(workload.lengths) + 1) + 1


def entrant_names(names: list[str], with_log_n: bool, target: Target) -> list[str]:
    """The candidates `candidate_specs` will give, by name, known before any search (every searched name gives its
    winner): what advise's race reserves passes for before its first pass."""
    searched = search_plans(0, target.geom.shipped_len, target.longest)  # its names: which candidates are searched
    found = {name + ("+log-n" if log_n else ""): {"spec": None} for name in names if name in searched
             for log_n in ((False, True) if with_log_n else (False,))}
    return [name for name, _ in candidate_specs(names, found, with_log_n, target)]


def candidate_specs(names: list[str], searched: dict, with_log_n: bool, target: Target) -> list[tuple[str, Spec]]:
    candidates: list[tuple[str, Spec]] = []
    static, factor, mapped = static_candidates(), target.k, map_candidates()
    for log_n in (False, True) if with_log_n else (False,):
        for name in names:
            key = name + ("+log-n" if log_n else "")
            if name in static:
                method, params = static[name]
                candidates.append((key, make_spec(method, params, factor=factor, log_n=log_n)))
            elif mapped.get(name) == name:  # a map at its rule (MAP-tuned, searched, maps to MAP)
                candidates.append((key, map_spec(name, target.geom, target.longest, factor, log_n)))
            elif key in searched:
                candidates.append((key, searched[key]["spec"]))
    return candidates


def families(rows: list[dict]) -> dict | None:
    """Past the shipped length, which family won: the best composed candidate (native+METHOD: on top of the shipped
    schedule) against the best re-derived one (a method rebuilt from L0 with k = N / L0; not none, not native), each
    with its paired difference to the overall best (the ranking's own pairs: same windows, same level). None when a
    family has no eligible candidate (a model that ships plain RoPE has no composed one)."""
    def diff(r: dict) -> float:
        d = r["vs_best"].get("diff")
        return 0.0 if r["verdict"] == "best" else (d if d is not None else math.inf)

    eligible = [r for r in rows if not r["excluded"] and not r.get("position_map")]  # frequency schedules only
    composed = [r for r in eligible if r["candidate"].startswith("native+")]
    rederived = [r for r in eligible if not r["candidate"].startswith("native") and r["candidate"] != "none"]
    if not composed or not rederived:
        return None
    best = {"composed": min(composed, key=diff), "re-derived": min(rederived, key=diff)}
    won = min(best, key=lambda f: diff(best[f]))
    lost = "re-derived" if won == "composed" else "composed"

    def standing(r: dict) -> str:
        if r["verdict"] == "best":
            return "the best"
        ci = r["vs_best"].get("half_width")
        return f"{diff(r):+.4f} nats vs the best" + (f" ± {ci:.2g}" if ci is not None else "") + f", {r['verdict']}"

    decided = best[lost]["verdict"] == "worse"  # "wins" only where the other family's best is shown worse
    head = (f"past Ls the {won} family wins" if decided else
            f"past Ls the {won} family leads by its point estimate, not shown better")
    line = (f"{head}: its best, {best[won]['candidate']}, is {standing(best[won])}; the {lost} family's best, "
            f"{best[lost]['candidate']}, is {standing(best[lost])} ({diff(best[lost]) - diff(best[won]):.4f} nats of mean "
            "log-PPL apart)")
    return {"winner_family": won, "decided": decided, "composed_best": best["composed"]["candidate"],
            "rederived_best": best["re-derived"]["candidate"], "gap_nats": diff(best[lost]) - diff(best[won]), "line": line}


def constraint_breaks(r: dict, max_short_kl, max_short_regression, min_passkey) -> list[str]:
    """Why a measured candidate is out (empty: eligible)."""
    why = []
    if max_short_kl is not None and r["short_kl"] > max_short_kl:
        why.append(f"short KL {r['short_kl']:.4f} > --max-short-kl {max_short_kl:g}")
    if max_short_regression is not None and r["short_rise_percent"] > max_short_regression:
        why.append(f"PPL at L +{r['short_rise_percent']:.2f}% > --max-short-regression {max_short_regression:g}")
    if min_passkey is not None and r.get("passkey_accuracy") is not None and r["passkey_accuracy"] < min_passkey:
        why.append(f"passkey {r['passkey_accuracy']:.0%} < --min-passkey {min_passkey:g}")
    if (r.get("task_guard") or {}).get("worse"):
        why.append(guard_why(r["task_guard"]))
    if not math.isfinite(r["objective"]):
        why.append("diverged (infinite PPL)")
    return why


def tournament(run: Evaluate, held_run: Evaluate, target: Target, plan: AdvisePlan, *, names: list[str], passkey: bool = True,
               note: Callable[[str], None] = lambda s: None, on_passkey_skipped: Callable[[], None] = lambda: None,
               held_windows: int = 4, search_windows: int | None = None, racing: Racing | None = None,
               expect: Callable[..., None] = lambda count, metric=PPL, samples=None: None,
               serving: tuple | None = None) -> tuple[dict, Standings]:
    """Search, measure on held-out windows (every candidate on every window, or `racing`), rank by the
    rule. `plan`: the user's flags (candidates, budget, constraints, margin, metric); `names`: the candidates the model
    admits. Returns every number for advice.json, and the standings (`tuning.standings`: the winner and the ranked,
    typed, each with the spec it was measured as). `expect(count, metric, samples)`:
    hears of evaluations the plan adds or drops (negative: a searched point stopped early): before the first pass,
    the most a race, a --task-guard and --workload can take (`held_out.HeldOutBound`), so the progress bar's total is
    a bound from then on; given back as each stage takes less. `serving` = (workload, runtimes, the model's rope, the held-out evaluator that decodes across the
    switch, or None): every candidate also served by each
    runtime over the workload on the first round's held-out windows (`ropecli.tuning.serving`), before
    the race, whose first round then finds its windows at the target cached."""
    budget, with_log_n, metric = plan.budget, plan.with_log_n, plan.metric  # the record (the command resolved it)
    max_short_kl, max_short_regression, min_passkey = plan.max_short_kl, plan.max_short_regression, plan.min_passkey
    task_guard = plan.task_guard
    margin = MARGIN if plan.margin is None else plan.margin
    # one config serves every length once deployed: every candidate runs at the longest target's k at every length
    target = dataclasses.replace(target, factor=target.k)
    geom, lengths, k = target.geom, list(target.lengths), target.k
    L = geom.shipped_len  # costs within the shipped length, against the model as shipped
    # before the first pass: the most the held-out measures can take (a race's every look), so the progress bar's
    # total is a bound from its first pass on, given back as the race decides (`held_out.HeldOutBound`)
    entrants = len(entrant_names(names, with_log_n, target))
    bound = HeldOutBound(expect, racing, entrants, len(lengths), held_windows, passkey, task_guard,
                         min_passkey is not None) if racing is not None else None
    if racing is None and task_guard:  # the guard's prompts, the model as shipped's and each candidate's: not in
        expect(entrants + 1, task_guard, None)  # the full tournament's plan, which counts every other measure
    serving_bound = Allowance(expect)  # the most the served candidates can take (--workload), spent as they run
    if serving is not None:
        serving_bound.reserve(serving_most(entrants, serving[0], serving[1]), PPL, None)
    searched: dict[str, dict] = {}
    for log_n in (False, True) if with_log_n else (False,):
        for name, found in search_candidates(run, target, names, budget, log_n, search_windows,
                                             racing is not None, expect, metric).items():
            searched[name + ("+log-n" if log_n else "")] = found
    candidates = candidate_specs(names, searched, with_log_n, target)
    specs = dict(candidates)
    m = Measure(held_run, L, lengths, k, held_windows, bound.measures.spend if bound else (lambda *a, **kw: None),
                metric, reference_spec(geom))
    served = None
    if serving is not None:
        workload, runtimes, rope, decoder = serving
        unmapped = {n: s for n, s in specs.items() if not s.position_map}  # a map is served by its runtime's flags alone
        served = {**serve_workload(serving_bound.spent_by(held_run), list(unmapped.values()), workload, runtimes, rope,
                                   k, margin, list(unmapped), decoder),
                  "factor": k}
        serving_bound.close()  # each distinct served schedule ran once: fewer than the most
    passkey_ok, none_acc = (passkey_baseline(m, racing) if passkey else (False, None))
    if bound:
        bound.baseline_done(passkey_ok)
    if passkey and not passkey_ok:
        on_passkey_skipped()
        note(f"passkey skipped: the unscaled model retrieves {none_acc:.0%} of keys within L = {L} "
             f"(under {PASSKEY_BASELINE:.0%}), so retrieval at the target says nothing about the schedules")
    rows = {name: {"candidate": name, "label": spec.label, "method": spec.method, "composed": spec.composed,
                   "params": dict(spec.params),
                   "log_n": spec.log_n, "position_map": map_json(spec.position_map)} for name, spec in candidates}

    def with_passkey(name: str) -> None:
        r = rows[name]
        if passkey_ok and "passkey_accuracy" not in r:
            pk = m.passkey(specs[name], target.longest)  # the PasskeyResult: advise's picture reads it, JSON at the edge
            r.update(passkey_accuracy=pk.accuracy, passkey_by_depth=pk.by_depth, passkey_result=pk)

    guard_ref: list = []  # the model as shipped on the guard's task at Ls, measured once

    def costs(name: str) -> None:  # the cost within L (and passkey where it decides something), measured once
        if "short_kl" not in rows[name]:
            rows[name].update(m.short(specs[name]))
        if task_guard and "task_guard" not in rows[name]:
            guard_ref[:] = guard_ref or [m.task(m.reference, L, task_guard)]
            rows[name]["task_guard"] = guard_row(task_guard.name, m.task(specs[name], target.longest, task_guard), guard_ref[0],
                                                 margin)
        if racing is None or min_passkey is not None:  # raced without --min-passkey: passkey is only reported
            with_passkey(name)

    def breaks(r: dict) -> list[str]:
        return constraint_breaks(r, max_short_kl, max_short_regression, min_passkey)

    races = (None, None)
    if racing is None:
        for name in specs:
            rows[name].update(m.objective(specs[name]))
            costs(name)
    else:
        constrained = any(c is not None for c in (max_short_kl, max_short_regression, min_passkey, task_guard))
        races = race_candidates(m, specs, rows, racing, costs, breaks if constrained else None, margin, breaks, bound)
    out = rank(list(rows.values()), lengths, breaks, *races, margin=margin,
               measure=metric.measure, metric=metric)
    out["families"] = families(out["rows"])
    if out["families"]:
        out["verdict"] += f"; {out['families']['line']}"
    with_passkey(out["winner"])  # raced: the winner's retrieval, for the report
    if bound:
        bound.close()  # the last measure is taken: the bar's total is the work done
    guard = next((r.get("task_guard") for r in out["rows"] if r["candidate"] == out["winner"]), None)
    if guard:
        out["verdict"] += f"; {guard_line(out['winner'], guard)}"
    rule = RULE if racing is None else RULE_RACED
    rule = rule.replace(PPL.measure, metric.measure)
    result = {"lengths": lengths, "factor": k, "rule": rule, "candidates": [n for n, _ in candidates], **out,
            "metric": metric.name, **({"serving": served} if served else {}), "passkey_measured": passkey_ok, "unscaled_passkey_at_L": none_acc,
            "searches": {n: s["search"] for n, s in searched.items()},
            "constraints": {"max_short_kl": max_short_kl, "max_short_regression": max_short_regression, "min_passkey": min_passkey,
                            "task_guard": task_guard and task_guard.name},
              "passkey_baseline_alpha": ALPHA if racing is not None and passkey else None}
    result["error_budget"] = error_budget(result)
    return result, Standings.of(result, specs)  # advice.json's numbers; the winner and the ranked, each with its spec


@dataclass
class AdvisePlan:
    """What the user asked of advise (the flags of its own panel), defaults as the CLI shows them."""
    candidates: list[str] | None = None  # None: every candidate (ropecli.tuning.candidates.CANDIDATES)
    with_log_n: bool = False
    budget: int = 12  # evaluations per searched candidate
    held_out: int | None = None  # held-out windows of the first round (default: --samples)
    max_short_kl: float | None = None
    max_short_regression: float | None = None
    min_passkey: float | None = None
    race: bool = True  # racing: forward passes only where they change the verdict (--no-race: every one)
    margin: float | None = None
    delta: float | None = None  # racing's indifference zone (ropecli.tuning.racing); None: the margin, 0: off
    max_windows: int | None = None
    metric: Metric = PPL  # what the searches minimize and the rule ranks by (ppl or key-ppl), the record
    task_guard: Metric | None = None  # a RULER task's record: out if shown worse at the target than as shipped within Ls
    workload: str | None = None  # --workload: also every candidate served per runtime over these request lengths
    runtime: list | None = None  # the runtimes of --workload, their records (None: transformers, vLLM, llama.cpp)
    weights: str = "auto"  # how the transformers export holds a local model's weights (`export.hf_folder.place_weights`)
