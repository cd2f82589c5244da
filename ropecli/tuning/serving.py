"""Each candidate served by each runtime over a workload (`ropecli.tuning.workload`): at every request
length the schedule the runtime applies there (`ropecli.export.served`), its loss on the first n
tokens of the same windows, the expected loss over the mix, paired window by window and ranked per
runtime by the verdicts rule. One forward pass per window and served schedule (prefix scoring: a
static schedule scores every length from the longest; the unscaled model a runtime applies below L is
shared by every candidate)."""

from __future__ import annotations

from ropecli.rope.spec import Spec
from ropecli.tuning.objective import Evaluate
from ropecli.tuning.workload import Workload

VARIANTS = {False: "as exported (short_factor = 1)", True: "--consistent"}


def variants(runtime: str, spec: Spec) -> list[bool]:
    """The exports of a candidate worth serving in `runtime`: transformers switches a default (short_factor
    = 1) export per forward pass, so both it and --consistent are candidates; vLLM and llama.cpp apply one
    schedule to every request (the two exports serve the same), dynamic NTK has one export."""
    return [False, True] if runtime == "transformers" and not spec.length_dependent else [False]


def serve_workload(run: Evaluate, specs: list[Spec], workload: Workload, runtimes: list[str], rope, factor: float,
                   margin: float | None = None) -> dict:
    """{runtime: {rows, best, winner}} plus the workload; every row: the candidate, its export variant, what
    the runtime applies at each length, PPL there, the expected loss and its per-window values, vs_best."""
    from ropecli.evaluation.stats import rank_against_best
    from ropecli.export.served import served

    T, memo = workload.longest, {}
    out = {}
    for runtime in runtimes:
        rows, seen = [], set()
        for spec in specs:
            for consistent in variants(runtime, spec):
                plan = {n: served(runtime, spec, n, rope, factor, consistent) for n in workload.lengths}
                if (spec.label, tuple(repr(s.spec) for s in plan.values())) in seen:
                    continue  # the other export serves the same schedules (e.g. none, or vLLM's one schedule)
                seen.add((spec.label, tuple(repr(s.spec) for s in plan.values())))
                row = {"candidate": spec.label, "consistent": consistent,
                       "variant": VARIANTS[consistent] if runtime == "transformers" else "as exported",
                       "served": {str(n): f"{s.spec.label if s.spec else '—'} ({s.how})" for n, s in plan.items()}}
                missing = [s.how for s in plan.values() if s.spec is None]
                if missing:
                    rows.append({**row, "unservable": missing[0]})
                    continue
                results = _evaluate(run, plan, T, memo)
                row.update(ppl={str(n): r.ppl for n, r in results.items()}, nll={str(n): r.nll for n, r in results.items()},
                           docs=results[max(results)].clusters)
                row["values"] = [sum(workload.shares[n] * r.values[i] for n, r in results.items())
                                 for i in range(min(len(r.values) for r in results.values()))]
                row["expected_nll"] = sum(workload.shares[n] * r.nll for n, r in results.items())
                rows.append(row)
        measured = [i for i, r in enumerate(rows) if "values" in r]
        ranked = rank_against_best({i: rows[i]["values"] for i in measured}, rows[measured[0]]["docs"],
                                   **({"margin": margin} if margin is not None else {})) if measured else {}
        for i in measured:
            rows[i]["vs_best"] = ranked[i]
        best = next((rows[i] for i in measured if ranked[i]["best"]), None)
        out[runtime] = {"rows": rows, "best": best and {"candidate": best["candidate"], "variant": best["variant"]}}
    return {"workload": {"shares": {str(n): w for n, w in workload.shares.items()}, "source": workload.source},
            "runtimes": out}


def _evaluate(run: Evaluate, plan: dict, T: int, memo: dict) -> dict:
    """{length: PplResult} of a row's served schedules: lengths that share a served schedule in one call
    (prefix scoring), on the first tokens of the windows at T; each (schedule, length) once per workload."""
    groups: dict[tuple, list[int]] = {}
    specs = {}
    for n, s in plan.items():
        key = repr(s.spec)  # a Spec is frozen: its repr names method, params, k and log-n
        specs[key] = s.spec
        if (key, n) not in memo:
            groups.setdefault(key, []).append(n)
    for key, lengths in groups.items():
        for r in run([specs[key]], lengths, span=T):
            memo[(key, r.len)] = r
    return {n: memo[(repr(s.spec), n)] for n, s in plan.items()}
