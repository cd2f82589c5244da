"""`ropecli advise` end to end on an open session (`Bench`): the pre-flight (lengths, enough text for
every search, held-out window and passkey prompt before the first forward pass), the race's plan, the
progress bar's total, the tournament (`ropecli.tuning.tournament.tournament`), and the files in --out: the
winner's exports, report.md, advice.json. The command only parses, calls `run_advise`, and prints.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.evaluation.metrics import PASSKEY, PPL
from ropecli.evaluation.results import EvalResult
from ropecli.export.registry import SERVED_BY_DEFAULT, record
from ropecli.files import atomic_write_text
from ropecli.report.advice import write_report
from ropecli.rope.target import Target
from ropecli.tuning.advise_exports import export_winner
from ropecli.tuning.candidates import SHIPPED_ONLY, default_candidates, maps_apply, search_plans
from ropecli.tuning.held_out import Racing
from ropecli.tuning.objective import Bench
from ropecli.tuning.racing import race_start
from ropecli.tuning.standings import Standings
from ropecli.tuning.tournament import AdvisePlan, tournament
from ropecli.tuning.workload import parse_workload

MARKER = ".ropecli-advise"  # a folder advise made: a rerun may write into it again (its advice.json: with --force)


@dataclass
class Source:
    """Where the model and the text came from, as the user named them: for the exports and the command
    that reproduces the run."""
    model: str | None = None
    gguf_file: str | None = None
    data: list[str] | None = None
    engine: tuple[str, ...] = ()  # how it was measured beyond the defaults: --backend vllm --tensor-parallel 2, …


def run_advise(session: Bench, plan: AdvisePlan, target: Target, out_dir: Path, source: Source) -> dict:
    """The whole of `ropecli advise` into `out_dir` (made by `prepare_out`); returns advice.json's content
    (written on the main rank)."""
    rope = session.rope
    names = list(plan.candidates or ()) or default_candidates(
        rope.shipped is not None, maps_apply(session.model, rope, target.longest))
    if rope.shipped is None and any(n in SHIPPED_ONLY for n in names):
        raise RopeCliError(f"--candidates {','.join(n for n in names if n in SHIPPED_ONLY)}: {rope.name} ships plain RoPE, "
                           "so native is none and native+METHOD is METHOD; leave those candidates out")
    lengths, longest = list(target.lengths), target.longest
    held = session.held_out(plan.held_out)
    for n in lengths:
        session.check(PPL, n), held.check(PPL, n)
    notes: list[str] = rope.extension_notes()  # chunked, NoPE, hybrid, p-RoPE, temperature: what extension can change
    passkey = passkey_possible(held, rope.shipped_len, longest, notes)
    if plan.task_guard:  # its prompts at Ls and at the target: too little text or too short fails here
        try:
            held.check(plan.task_guard, rope.shipped_len)
        except RopeCliError as exc:
            raise RopeCliError(f"--task-guard {plan.task_guard.name} compares with the model as shipped at its shipped length "
                               f"Ls = {rope.shipped_len}, and there: {str(exc).split('; pass')[0]}; pick a task with shorter prompts "
                               "(niah-single-noise, niah-multikey-needle) or leave --task-guard out") from None
        held.check(plan.task_guard, longest)
    racing = None if not plan.race else racing_plan(held, target, plan.max_windows, notes, plan.delta)
    serving = None
    if plan.workload:
        serving = (parse_workload(plan.workload, longest), plan.runtime or [record(n) for n in SERVED_BY_DEFAULT], rope, held.ev)
    with session.progress.task(bar_total(plan, names, lengths, session, held, racing, passkey), "advise"):
        result, standings = tournament(
            session.run, held.run, target, plan, names=names, passkey=passkey, note=notes.append,
            on_passkey_skipped=lambda: None if racing else session.progress.grow(  # every candidate's prompts
                -held.inputs.units(PASSKEY) * len(names) * (2 if plan.with_log_n else 1)),
            held_windows=held.inputs.samples, search_windows=session.inputs.samples, racing=racing,
            expect=lambda count, metric=PPL, samples=None: session.progress.grow(
                count * held.inputs.resized(samples).units(metric)), serving=serving)
    result = {**session.header(), **result, "notes": notes, "searched_windows": session.inputs.samples,
              "held_out_windows": held.inputs.samples, "held_out_first_window": held.inputs.first_window_at(longest),
              "held_out_split": held.inputs.split_note(longest), "racing": vars(racing) if racing else None,
              "windows_per_candidate": {r["candidate"]: r.get("race", {}).get("windows", held.inputs.samples)
                                        for r in result["rows"]}, **session.tally(held)}
    if session.is_main:
        write_advice(result, standings, session, plan, source, lengths, out_dir)
    return result


def passkey_possible(held: Bench, L: int, longest: int, notes: list[str]) -> bool:
    """Whether passkey prompts fit within L (else a note says why it is skipped); enough text at the longest target."""
    try:
        held.check(PASSKEY, L)
    except RopeCliError as exc:  # L shorter than the prompt: no passkey test possible at all
        notes.append(f"passkey skipped: {exc}")
        return False
    held.check(PASSKEY, longest)
    return True


def racing_plan(held: Bench, target: Target, max_windows: int | None, notes: list[str], delta: float | None = None):
    """The race's windows at the target's lengths: from the --held-out count up to --max-windows (default 4x, as far
    as the text goes); `delta`: its indifference zone (None: the margin)."""
    first, lengths = held.inputs.samples, target.lengths
    have = min(held.inputs.available(n) for n in lengths)
    most = max_windows if max_windows is not None else max(first, min(4 * first, have))
    for n in lengths:
        held.inputs.check_available(n, most)
    start = min(most, race_start(first, min(held.inputs.documents(n, most) for n in lengths)))
    if max_windows is None and have < 4 * first:
        notes.append(f"racing: at most {max(have, start)} held-out windows (the text's limit at {target.longest} tokens), "
                     f"not {4 * first}; add text with --data for more")
    return Racing(start, max(start, most), held.inputs.per_depth, have, delta)


def bar_total(plan: AdvisePlan, names, lengths, session: Bench, held: Bench, racing, passkey: bool) -> int:
    """Forward passes the progress bar expects up front (cached ones tick too); a race adds its rounds as it
    decides them (`expect`), a skipped passkey takes its part back (`on_passkey_skipped`)."""
    args = (names, plan.with_log_n, plan.budget, lengths, session.inputs, held.inputs)
    Ls = session.rope.shipped_len  # a searched map's own budget (DPE's detection) depends on Ls and the target
    if racing:
        return estimate_units(*args, False, searches_only=True, Ls=Ls)
    return estimate_units(*args, passkey, Ls=Ls) + (held.inputs.units(PASSKEY) if passkey else 0)


def prepare_out(out: str, force: bool = False) -> Path:
    """--out must be creatable and writable, and empty unless an earlier advise made it; an earlier advise's results
    (advice.json) are replaced only with --force (its windows stay in the evaluation cache either way)."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise RopeCliError(f"--out {out} is a file; pass a folder")
    if p.exists() and any(p.iterdir()) and not (p / MARKER).exists():
        raise RopeCliError(f"--out {out} is not empty and was not made by ropecli advise; pass a new or empty folder")
    if (p / "advice.json").exists() and not force:
        raise RopeCliError(f"--out {out} holds an earlier advise's results (advice.json); pass --force to replace them "
                           "(its measured windows are reused from the cache), or another --out")
    try:
        p.mkdir(parents=True, exist_ok=True)
        (p / MARKER).write_text("made by ropecli advise; a rerun writes here again\n")
    except OSError as exc:
        raise RopeCliError(f"--out {out} is not writable ({exc.strerror}); pass a folder you can write") from None
    return p


def write_advice(result: dict, standings: Standings, session: Bench, plan: AdvisePlan, source: Source, lengths,
                 out_dir: Path) -> None:
    """The winner exported for every runtime, report.md with its pictures, and advice.json, in --out."""
    rope = session.rope
    result["exports"] = export_winner(standings, result, rope, source.model, source.gguf_file, out_dir, plan.weights)
    result["commands"] = [reproduce_command(plan, source, lengths, session.inputs, str(out_dir)),
                          *[e["command"] for e in result["exports"] if e["command"]]]
    write_report(result, out_dir, rope.geometry(result["factor"]), rope.name)
    atomic_write_text(out_dir / "advice.json", json.dumps(result, indent=1, default=_plain))


def reproduce_command(plan: AdvisePlan, source: Source, lengths, inputs, out: str) -> str:
    parts = ["ropecli", "advise", *(["--model", source.model] if source.model else []), *source.engine]
    parts += ["--candidates", ",".join(plan.candidates)] if plan.candidates else []
    parts += [x for n in lengths for x in ("--len", str(n))] + [x for d in source.data or [] for x in ("--data", d)]
    parts += ["--samples", str(inputs.samples), "--seed", str(inputs.seed), "--budget", str(plan.budget), "--out", out,
              "--force"]  # the folder holds the advice this command replaces
    parts += ["--weights", plan.weights] if plan.weights != "auto" else []
    parts += ["--prompts", str(inputs.prompt_count)] if inputs.prompt_count is not None else []
    return " ".join(shlex.quote(p) for p in parts + (["--with-log-n"] if plan.with_log_n else []))


def estimate_units(names, with_log_n, budget, lengths, inputs, held_inputs, passkey: bool, searches_only: bool = False,
                   Ls: int | None = None) -> int:
    """Forward passes of a full run (cached ones included, they tick at once): the progress bar's total.
    `inputs`, `held_inputs`: the searched and held-out windows (ropecli.evaluation.inputs.Inputs);
    `passkey`: whether every candidate is measured on passkey prompts too; `searches_only`: the searches' part."""
    plans = search_plans(budget, Ls, max(lengths))
    modes = 2 if with_log_n else 1
    n_search = sum(plans[n][2] for n in names if n in plans) * modes
    if searches_only:
        return n_search * inputs.units(PPL) * len(lengths)
    per_candidate = held_inputs.units(PPL) * (len(lengths) + 2) + (held_inputs.units(PASSKEY) if passkey else 0)
    return n_search * inputs.units(PPL) * len(lengths) + len(names) * modes * per_candidate + held_inputs.units(PPL)


def _plain(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, EvalResult):  # a row's passkey result
        return x.to_json()
    raise TypeError(f"not JSON: {type(x)}")
