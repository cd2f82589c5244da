"""`ropecli compare` on an open session (`Bench`): every schedule on every metric, on the same windows
(or raced, `race_specs` on `ropecli.tuning.racing.race`), each cell judged against the best of its column
(`ropecli.evaluation.compared.attach_paired`). Returns the command's output, its results as typed rows (`Row`);
the command prints it, or writes it as JSON."""

from __future__ import annotations

from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.evaluation.agreement import rank_agreement
from ropecli.evaluation.compared import attach_paired
from ropecli.evaluation.effective_length import effective_lengths
from ropecli.evaluation.inference import MARGIN
from ropecli.evaluation.metrics import KEY_PPL, PASSKEY, PASSKEYS, PPL, REGISTRY, Metric, is_task
from ropecli.rope.target import Target
from ropecli.spec import reference_spec
from ropecli.tuning.objective import Bench, window_docs, window_values, window_weights
from ropecli.tuning.racing import looks, race
from ropecli.tuning.serving import serve_workload


def compare_schedules(session: Bench, specs: list, target: Target, metrics: list[Metric], *, race: bool = False,
                      max_windows: int | None = None, margin: float | None = None, serving: tuple | None = None) -> dict:
    """Every spec x length on each metric (kl: at L, the schedules built for the target's k). With `race`, each
    metric is raced over all lengths from --samples windows. `serving` = (workload, runtimes): also each spec served
    by each runtime over the workload (`ropecli.tuning.serving`), its schedules exported for the target's k. Every
    metric is checked at every length first (enough text; a task's smallest prompt fits), before any forward pass."""
    L, lengths = session.rope.train_len, list(target.lengths)
    chosen = {m.name: m for m in metrics}  # each once, in the order asked
    metrics = [m for name, m in chosen.items()]
    at_L = [m for m in metrics if m.at_train_len]  # kl: the schedules built for the target's k, run at L
    kl_k = target.k if at_L else None
    cells = {m: ([s.but(factor=target.k) for s in specs], [L]) for m in at_L}
    for m in metrics:  # the boundary's checks, all of them before the first forward pass
        for n in cells.get(m, (specs, lengths))[1]:
            session.check(m, n)
    served = None
    if serving is not None and any(s.position_map for s in specs):
        raise RopeCliError("--workload ranks what each runtime applies to an exported schedule; a position map is served "
                           "by llama.cpp's flags alone (`ropecli export --map`): leave --map out of a --workload comparison")
    if serving is not None:  # first: its prefix passes at the target's k leave the table's windows at k cached

        served = {**serve_workload(session.run, specs, serving[0], serving[1], session.rope, target.k, margin,
                                   decoder=session.ev),
                  "factor": target.k}
    results, races = [], {}
    for m in [REGISTRY[name] for name in REGISTRY if name in chosen]:  # the registry's order: ppl, …, the tasks
        if race and len(specs) > 1:
            got, races[m.name] = race_on(session, *cells.get(m, (specs, lengths)), m, max_windows, margin)
            results += got
        else:
            results += session.run(*cells.get(m, (specs, lengths)), m)
    agreement = task_agreement(results)
    rows = attach_paired(results, *([margin] if margin is not None else []))
    passkey = next((m for m in PASSKEYS if m in metrics), None)  # the published prompt where both were measured
    beyond = passkey is not None and target.longest > session.rope.shipped_len  # effective length: an extension's question
    effective = effective_against_shipped(session, results, passkey) if beyond else None
    return {**session.header(), "metrics": list(chosen), "kl_factor": kl_k, "results": rows,
            **({"agreement": agreement} if agreement else {}), **({"effective_length": effective} if effective else {}),
            **({"races": races} if race else {}), **({"serving": served} if served else {}), **session.tally()}


def race_on(session: Bench, specs, lengths, metric: Metric, max_windows: int | None, margin: float | None = None):
    """One metric's race over every length, from --samples windows up to `max_windows` (default 4x), under one
    progress bar whose total is the race's most passes, reserved before the first (every entrant at every look of
    `racing.looks`: each look scores its windows again, the cached ones at once): each round gives back the passes
    of the entrants it dropped, at its look and every later one; the end, the looks it did not take. (results, the
    race's record)"""
    start = session.inputs.count(metric)  # windows, or prompts per depth
    most = max_windows or 4 * start
    for n in lengths:  # windows the text must hold; prompts are made, checked for their length only
        if not metric.prompted:
            session.inputs.check_available(n, most)
        else:
            session.check(metric, n, most)

    plan = looks(start, most)  # the race's own looks (race_specs' default growth)
    per_look = [len(lengths) * session.inputs.resized(n).units(metric) for n in plan]  # one entrant's passes at each
    entrants = len({s.label for s in specs})  # the race's field (race_specs: one entrant per label)
    held = {"entrants": entrants, "taken": 0}  # entrants the untaken looks hold passes for; looks taken

    def on_round(r, n, alive):
        session.progress.grow(-(held["entrants"] - len(alive)) * sum(per_look[held["taken"]:]))
        held.update(entrants=len(alive), taken=r)

    with session.progress.task(entrants * sum(per_look), f"race ({metric.name})"):
        out = race_specs(session.run, specs, lengths, metric, start=start, max_windows=most, on_round=on_round,
                         **({"margin": margin} if margin is not None else {}))
        session.progress.grow(-held["entrants"] * sum(per_look[held["taken"]:]))  # the looks it did not take
        return out


def task_agreement(results: list) -> list[dict]:
    """For each RULER task and length also measured by PPL: Spearman's rho between the schedules' ranking by
    the task's answer NLL and by PPL (and by key-token PPL where measured), with a simultaneous 95 % interval
    (`ropecli.evaluation.agreement`; pairs ordered by paired intervals: prompts as units for the task, the
    documents-or-windows inference for PPL)."""
    out = []
    ppl = {(r.label, r.len): r for r in results if r.metric == PPL.name}
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
                    (PPL.name, {p.label: p.values for p in base}, base[0].clusters, None),
                    (KEY_PPL.name, {p.label: p.key_values() for p in base} if keyed else None, base[0].key_clusters(),
                     base[0].key_weights() if keyed else None)):
                if values:
                    out.append({"task": t, "len": n, "vs": name,
                                **rank_agreement(task_values, values, None, clusters, weights_b=weights)})
    return out


def effective_against_shipped(session: Bench, results: list, passkey: Metric = PASSKEY) -> dict | None:
    """Each candidate's effective length (`ropecli.evaluation.effective_length`) against the model as shipped at Ls on
    `passkey` (the published prompt or passkey-text; its prompts at Ls: one more set of passes, cached); None, with
    nothing run, where its prompts do not fit within Ls."""
    Ls = session.rope.shipped_len
    try:
        session.check(passkey, Ls)
    except RopeCliError:
        return None
    reference = session.run([reference_spec(session.rope.geometry(1.0))], [Ls], passkey)[0]
    return effective_lengths([r for r in results if r.metric == passkey.name], reference)


def race_specs(run, specs: list, lengths: list[int], metric: Metric, *, start: int, max_windows: int,
               margin: float = MARGIN, on_round: Callable[[int, int, list[str]], None] = lambda r, n, alive: None
               ) -> tuple[list, dict]:
    """`ropecli compare --race`: race schedules on one metric (ppl, passkey answer NLL or KL), the
    objective of window i being its mean over `lengths`. `run` is an `ropecli.tuning.objective.Evaluate`.
    Returns every schedule's EvalResults on the windows it got (spec-major, as `run` gives them) and the
    race's record."""
    by_label = {s.label: s for s in specs}
    latest: dict[str, list] = {}

    def score(label: str, n: int):
        latest[label] = run([by_label[label]], lengths, metric, n)
        rows = latest[label]
        return window_values(rows), window_docs(rows), window_weights(rows)  # what a Scorer pairs candidates on

    unit = "windows" if metric.units == "windows" else f"{metric.unit_word} per depth"
    record = race(score, list(by_label), start=start, max_windows=max_windows, margin=margin, on_round=on_round,
                  unit=unit)
    return [r for s in specs for r in latest[s.label]], record
