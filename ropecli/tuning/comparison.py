"""`ropecli compare` on an open session (`Bench`): every schedule on every metric, on the same windows
(or raced, `ropecli.tuning.racing.race_specs`), each cell judged against the best of its column
(`ropecli.evaluation.stats.attach_paired`). Returns the command's JSON; the command prints it."""

from __future__ import annotations

from ropecli.tuning.objective import Bench



def compare_schedules(session: Bench, specs: list, lengths: list[int], metrics: list[str], factor: float | None, *,
            race: bool = False, max_windows: int | None = None, margin: float | None = None,
            serving: tuple | None = None) -> dict:
    """Every spec x length on each metric (kl: at L, the schedules built for the target's k: `factor`, or
    the longest length / L). With `race`, each metric is raced over all lengths from --samples windows.
    `serving` = (workload, runtimes): also each spec served by each runtime over the workload
    (`ropecli.tuning.serving`), its schedules exported for the target's k."""
    from ropecli.evaluation.metrics import REGISTRY
    from ropecli.evaluation.stats import attach_paired
    from ropecli.rope.spec import target_factor

    L = session.rope.train_len
    kl_k = target_factor(factor, lengths, L) if "kl" in metrics else None
    cells = {"ppl": (specs, lengths), "key-ppl": (specs, lengths), "passkey": (specs, lengths), "kl": ([s.but(factor=kl_k) for s in specs], [L])}
    served = None
    if serving is not None:  # first: its prefix passes at the target's k leave the table's windows at k cached
        from ropecli.tuning.serving import serve_workload

        k = target_factor(factor, lengths, L)
        served = {**serve_workload(session.run, specs, serving[0], serving[1], session.rope, k, margin), "factor": k}
    results, races = [], {}
    for m in [m for m in REGISTRY if m in metrics]:  # the registry's order: ppl, key-ppl, passkey, kl, the tasks
        if race and len(specs) > 1:
            got, races[m] = race_on(session, *cells.get(m, (specs, lengths)), m, max_windows, margin)
            results += got
        else:
            results += session.run(*cells.get(m, (specs, lengths)), m)
    agreement = task_agreement(results)
    results = attach_paired(results, *([margin] if margin is not None else []))
    return {**session.header(), "metrics": metrics, "kl_factor": kl_k, "results": results,
            **({"agreement": agreement} if agreement else {}),
            **({"races": races} if race else {}), **({"serving": served} if served else {}), **session.tally()}


def race_on(session: Bench, specs, lengths, metric: str, max_windows: int | None, margin: float | None = None):
    """One metric's race over every length, from --samples windows up to `max_windows` (default 4x),
    under one progress bar whose total grows with each round: (results, the race's record)."""
    from ropecli.evaluation.metrics import prompted
    from ropecli.tuning.racing import race_specs

    start = session.inputs.count(metric)  # windows, or prompts per depth
    most = max_windows or 4 * start
    for n in lengths:  # windows the text must hold; prompts are made, checked for their length only
        if not prompted(metric):
            session.inputs.check_available(n, most)
        else:
            session.check(metric, n, most)

    def on_round(r, n, alive):
        session.progress.grow(len(alive) * len(lengths) * session.inputs.resized(n).units(metric))

    with session.progress.task(0, f"race ({metric})"):
        return race_specs(session.run, specs, lengths, metric, start=start, max_windows=most, on_round=on_round,
                          **({"margin": margin} if margin is not None else {}))


def task_agreement(results: list) -> list[dict]:
    """For each RULER task and length also measured by PPL: Spearman's rho between the schedules' ranking by
    the task's answer NLL and by PPL (and by key-token PPL where measured), with a simultaneous 95 % interval
    (`ropecli.evaluation.agreement`; pairs ordered by paired intervals: prompts as units for the task, the
    documents-or-windows inference for PPL)."""
    from ropecli.evaluation.agreement import rank_agreement
    from ropecli.evaluation.metrics import is_task

    out = []
    ppl = {(r.label, r.len): r for r in results if r.metric == "ppl"}
    for n in sorted({r.len for r in results}):
        tasks = sorted({r.metric for r in results if is_task(r.metric) and r.len == n})
        for t in tasks:
            rows = [r for r in results if r.metric == t and r.len == n and (r.label, n) in ppl]
            if len(rows) < 3:
                continue
            task_values = {r.label: r.values for r in rows}
            base = [ppl[(r.label, n)] for r in rows]
            keyed = all(p.key_values() for p in base)
            for name, values, clusters, weights in (
                    ("ppl", {p.label: p.values for p in base}, base[0].clusters, None),
                    ("key-ppl", {p.label: p.key_values() for p in base} if keyed else None, base[0].key_clusters(),
                     base[0].key_weights() if keyed else None)):
                if values:
                    out.append({"task": t, "len": n, "vs": name,
                                **rank_agreement(task_values, values, None, clusters, weights_b=weights)})
    return out
