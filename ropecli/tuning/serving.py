"""Each candidate served by each runtime over a workload (`ropecli.tuning.workload`): at every request
length the schedule the runtime applies there (`ropecli.export.served`), its loss on the first n
tokens of the same windows, the expected loss over the mix, paired window by window and ranked per
runtime by the verdicts rule. One forward pass per window and served schedule (prefix scoring: a
static schedule scores every length from the longest; the unscaled model a runtime applies below L is
shared by every candidate)."""

from __future__ import annotations

import math

from ropecli.evaluation.decode_across import DecodePlan
from ropecli.evaluation.metrics import PPL
from ropecli.evaluation.stats import paired_difference, rank_against_best
from ropecli.export.registry import PER_FORWARD, Runtime
from ropecli.export.served import Served, decode_damage, is_dynamic, served
from ropecli.spec import Spec, reference_spec
from ropecli.tuning.objective import Evaluate
from ropecli.tuning.workload import Workload

VARIANTS = {True: "consistent (default)", False: "--switching"}


def variants(runtime: Runtime, spec: Spec) -> list[bool]:
    """The exports of a candidate worth serving in `runtime`: a runtime that picks short or long factors per
    forward pass (transformers, SGLang) serves the consistent export (the default) and the --switching one
    differently; the others apply one schedule to every request (both exports serve the same); dynamic NTK has one
    export."""
    return [True, False] if runtime.rule == PER_FORWARD and not is_dynamic(spec) else [True]


def serve_workload(run: Evaluate, specs: list[Spec], workload: Workload, runtimes: list[Runtime], rope, factor: float,
                   margin: float | None = None, names: list[str] | None = None, decoder=None) -> dict:
    """{runtime: {rows, best}} plus the workload; every row: the candidate, its export variant, what the
    runtime applies at each length, PPL there, the expected loss and its per-window values, vs_best. `decoder`: the
    evaluator (`ropecli.evaluation.evaluator.Evaluator`) `run` measures on, which also decodes each row across the
    switch (`decode_across`); None (an injected objective): no decoding."""
    plans: dict[Runtime, list] = {}  # runtime -> [(name, spec, consistent, {length: Served})], each distinct plan once
    for runtime in runtimes:
        seen = set()
        for name, spec in zip(names or [s.label for s in specs], specs):
            for consistent in variants(runtime, spec):
                plan = {n: served(runtime, spec, n, rope, factor, consistent) for n in workload.lengths}
                key = (spec.label, tuple(repr(x.spec) for x in plan.values()))
                if key not in seen:  # the other export serves the same schedules (none; vLLM's one schedule)
                    seen.add(key)
                    plans.setdefault(runtime, []).append((name, spec, consistent, plan))
    Ls = rope.shipped_len  # the cost within the shipped length, as each runtime serves the export there
    at_L = {(runtime, i): served(runtime, spec, Ls, rope, factor, consistent)
            for runtime, entries in plans.items() for i, (_, spec, consistent, _) in enumerate(entries)
            } if Ls <= workload.longest else {}
    native = Served("native", Ls, reference_spec(rope.geometry(factor)), "the model as shipped")
    results = _evaluate(run, [p for ps in plans.values() for *_, p in ps] + [{Ls: s} for s in [*at_L.values(), native]
                                                                              if at_L], workload.longest)
    out = {}
    for runtime, entries in plans.items():
        rows = [{"name": name, **_row(runtime, spec, consistent, plan, workload, results)}
                for name, spec, consistent, plan in entries]
        for i, row in enumerate(rows):
            if (runtime, i) in at_L and "values" in row:
                row["within_L"] = within_L(at_L[(runtime, i)], native, results, margin)
        measured = [i for i, r in enumerate(rows) if "values" in r]
        ranked = rank_against_best({i: rows[i]["values"] for i in measured}, rows[measured[0]]["docs"],
                                   **({"margin": margin} if margin is not None else {})) if measured else {}
        for i in measured:
            rows[i]["vs_best"] = ranked[i]
        best = next((rows[i] for i in measured if ranked[i]["best"]), None)
        out[runtime.name] = {"rows": rows, "best": best and {k: best[k] for k in ("name", "candidate", "variant", "consistent",
                                                                              "method", "composed", "params", "log_n")}}
    across = decode_across(decoder, plans, out, rope, factor, workload.longest)
    return {"workload": {"shares": {str(n): w for n, w in workload.shares.items()},
                         "token_shares": {str(n): w for n, w in workload.token_shares.items()}, "source": workload.source},
            "runtimes": out, **({"decode": across} if across else {})}


def within_L(at, native, results: dict, margin: float | None) -> dict:
    """The cost within Ls of what the runtime serves there (`at`, a Served; `native`, the model as shipped): PPL at Ls
    against the model as shipped, paired over the
    same windows (the first Ls tokens of the workload's), as a rise in percent and a paired difference in nats."""
    mine, ref = results[(repr(at.spec), at.length)], results[(repr(native.spec), native.length)]
    d = paired_difference(mine.values, ref.values, mine.clusters, **({"margin": margin} if margin is not None else {}))
    return {"len": at.length, "applies": at.spec.label, PPL.field: mine.ppl, "native_ppl": ref.ppl,
            "rise_percent": 100 * (math.exp(mine.nll - ref.nll) - 1), "vs_native": d}


def decode_across(ev, plans: dict, out: dict, rope, factor: float, longest: int) -> dict | None:
    """Each served row's generation across the switch (L, or Ls for a model that ships a schedule): a prompt
    ending 1/8 of it before, decoded through the KV cache to a quarter past it (`DecodePlan.across`), in the runtime's
    segments (`ropecli.export.served.decode_damage`); the row gets `decode` (its damage) and `generation_safe`.
    None without an evaluator (injected objectives) or a request past the switch."""
    switch = rope.shipped_len
    if ev is None or longest <= switch:
        return None
    plan = DecodePlan.across(switch, longest)
    for runtime, entries in plans.items():
        for row, (name, spec, consistent, _) in zip(out[runtime.name]["rows"], entries):
            if "unservable" in row:
                continue
            d = decode_damage(ev, runtime, spec, factor, consistent, plan, span=longest)
            row["decode"] = {k: d.get(k) for k in ("decode_nll", "one_pass_nll", "worst_token", "windows", "one_schedule",
                                                   "segments", "unservable")} | {"damage": d.get("damage")}
            row["generation_safe"] = bool(d.get("one_schedule") or (d.get("damage") or {}).get("verdict") == "equivalent")
    return {"prompt_len": plan.prompt_len, "total_len": plan.total_len, "switch": switch}


def _row(runtime: Runtime, spec: Spec, consistent: bool, plan: dict, workload: Workload, results: dict) -> dict:
    row = {"candidate": spec.label, "consistent": consistent, "method": spec.method, "composed": spec.composed,
           "params": dict(spec.params),
           "log_n": spec.log_n,
           "variant": VARIANTS[consistent] if len(variants(runtime, spec)) > 1 else "as exported",
           "served": {str(n): f"{s.spec.label if s.spec else '—'} ({s.how})" for n, s in plan.items()}}
    missing = [s.how for s in plan.values() if s.spec is None]
    if missing:
        return {**row, "unservable": missing[0]}
    at = {n: results[(repr(s.spec), n)] for n, s in plan.items()}
    row.update(ppl={str(n): r.ppl for n, r in at.items()}, nll={str(n): r.nll for n, r in at.items()},
               docs=at[max(at)].clusters, expected_nll=sum(workload.token_shares[n] * r.nll for n, r in at.items()))
    row["values"] = [sum(workload.token_shares[n] * r.values[i] for n, r in at.items())
                     for i in range(min(len(r.values) for r in at.values()))]
    return row


def _evaluate(run: Evaluate, plans: list[dict], T: int) -> dict:
    """{(served spec, length): PplResult}: every served schedule once, at every length some plan serves it,
    in one call (prefix scoring: one pass per window at its longest), on the first tokens of the windows at T."""
    need: dict[str, tuple] = {}
    for plan in plans:
        for n, s in plan.items():
            if s.spec is not None:
                key = repr(s.spec)  # a Spec is frozen: its repr names method, params, k and log-n
                need.setdefault(key, (s.spec, set()))[1].add(n)
    return {(key, r.len): r for key, (spec, lengths) in need.items() for r in run([spec], sorted(lengths), span=T)}
