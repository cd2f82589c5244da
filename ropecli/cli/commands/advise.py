"""`ropecli advise`: the tournament (`ropecli.tuning.advise.advise`: searches, ranking, the winner
exported through the same function as `ropecli export`), then advice.json and report.md in --out."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import console
from ropecli.cli.groups import DataOptions, EvalOptions, ModelOptions, PasskeyOptions, with_option_groups
from ropecli.cli.options import (AdviseBudgetOpt, AdviseOutOpt, CandidatesOpt, HeldOutOpt, JsonOpt, MarginOpt, MaxShortKlOpt,
                                 MaxShortRegressionOpt, MaxWindowsOpt, NoRaceOpt, flat_choices)
from ropecli.cli.session import open_session
from ropecli.report.advice import held_out_span
from ropecli.errors import RopeCliError

ADVISE = "Advise"
MARKER = ".ropecli-advise"  # a folder advise made: a rerun may write into it again


@handle_errors
@with_option_groups
def advise(
    model: ModelOptions,
    data: DataOptions,
    evaluation: EvalOptions,
    prompts: PasskeyOptions,
    out: AdviseOutOpt = "ropecli-advice",
    candidates: CandidatesOpt = None,
    with_log_n: Annotated[bool, typer.Option("--with-log-n", rich_help_panel=ADVISE, help="Add every candidate with log-n.")] = False,
    budget: AdviseBudgetOpt = 12,
    held_out: HeldOutOpt = None,
    max_short_kl: MaxShortKlOpt = None,
    max_short_regression: MaxShortRegressionOpt = None,
    min_passkey: Annotated[Optional[float], typer.Option(
        "--min-passkey", min=0.0, max=1.0, rich_help_panel=ADVISE, help="Out if passkey accuracy at the longest target is below this.")] = None,
    no_race: NoRaceOpt = False,
    margin: MarginOpt = None,
    max_windows: MaxWindowsOpt = None,
    as_json: JsonOpt = False,
):
    """Which context extension for my model: every method on the same windows, ranked, exported.

    Searches YaRN's betas, the mixed b and the clamped mixed family on the searched windows, then
    ranks every candidate on held-out windows by the written rule (constraints, mean log-PPL, ties by
    paired 95% going to the smallest cost within L) and exports the winner for transformers, vLLM
    and (GGUF input) llama.cpp. Racing (the default; --no-race measures every candidate on every
    window): candidates significantly worse than the leader are dropped after each round, the tied
    ones get doubled windows up to --max-windows. Every window is cached: an interrupted run resumes.

    Examples: ropecli advise
              ropecli advise --model meta-llama/Llama-2-7b-hf --len 32768 --len 65536 --out llama-advice
    """
    from ropecli.cli.session import overall_progress
    from ropecli.evaluation.evaluator import check_lengths, default_target
    from ropecli.rope.spec import target_factor
    import ropecli.tuning.advise
    from ropecli.tuning.advise import estimate_units, export_winner
    from ropecli.tuning.candidates import CANDIDATES

    names = flat_choices(candidates, CANDIDATES)
    prompts.parsed_depths(), prompts.checked_digits()
    out_dir = prepare_out(out)
    session = open_session(model, data, evaluation, quiet=as_json, passkey=prompts)
    rope = session.rope
    lengths = check_lengths(evaluation.length or [default_target(rope.train_len)])
    held = session.held_out(held_out)
    for n in lengths:
        session.ev.check_inputs("ppl", n), held.ev.check_inputs("ppl", n)
    notes: list[str] = []
    try:
        held.ev.check_inputs("passkey", rope.train_len)
        passkey = True
    except RopeCliError as exc:  # L shorter than the prompt: no passkey test possible at all
        passkey = False
        notes.append(f"passkey skipped: {exc}")
    if passkey:
        held.ev.check_inputs("passkey", max(lengths))
    geom = rope.geometry(target_factor(evaluation.k, lengths, rope.train_len))
    racing = None if no_race else racing_plan(held, lengths, max_windows, notes)

    def units(with_passkey: bool) -> int:  # the bar's total; the unscaled model's passkey baseline ticks too
        if racing:  # the searches; the race adds its rounds as it decides them (expect)
            return estimate_units(names, with_log_n, budget, lengths, session.inputs, held.inputs, False, searches_only=True)
        total = estimate_units(names, with_log_n, budget, lengths, session.inputs, held.inputs, with_passkey)
        return total + (held.inputs.units("passkey") if passkey else 0)

    total = [units(passkey)]
    with overall_progress(total[0], "advise") as (bar, task):
        session.progress = held.progress = (bar, task)

        def expect(count: int, metric: str = "ppl", samples: int | None = None) -> None:
            total[0] += count * held.inputs.resized(samples).units(metric)
            bar.update(task, total=total[0])

        result = ropecli.tuning.advise.advise(
            session.run, held.run, geom, lengths, names=names, budget=budget, with_log_n=with_log_n,
            factor=evaluation.k, max_short_kl=max_short_kl, max_short_regression=max_short_regression,
            min_passkey=min_passkey, passkey=passkey, note=notes.append,
            on_passkey_skipped=lambda: None if racing else bar.update(task, total=units(False)),
            held_windows=held.inputs.samples, search_windows=session.inputs.samples, racing=racing,
            expect=expect, margin=margin)
    result = {**session.header(), **result, "notes": notes, "searched_windows": session.inputs.samples,
              "held_out_windows": held.inputs.samples, "held_out_first_window": held.inputs.first_window_at(max(lengths)),
              "held_out_split": held.inputs.split_note(max(lengths)),
              "racing": vars(racing) if racing else None,
              "windows_per_candidate": {r["candidate"]: r.get("race", {}).get("windows", held.inputs.samples)
                                        for r in result["rows"]}, **session.tally(held)}
    if session.is_main:
        from ropecli.files import atomic_write_text
        from ropecli.report.advice import write_report

        result["exports"] = export_winner(result, rope, model.model, model.gguf_file, out_dir)
        result["commands"] = reproduce_commands(result, model, data, lengths, out, with_log_n, budget)
        write_report(result, out_dir, rope.geometry(result["factor"]), rope.name)
        atomic_write_text(out_dir / "advice.json", json.dumps(result, indent=1, default=_plain))
    if as_json:
        return emit_json(result)
    print_advice(result, out_dir)


def racing_plan(held, lengths: list[int], max_windows: int | None, notes: list[str]):
    """The race's windows: from the --held-out count up to --max-windows (default 4x, as far as the text goes)."""
    from ropecli.tuning.advise import Racing

    from ropecli.tuning.racing import race_start

    prompts = start = held.inputs.samples
    have = min(held.inputs.available(n) for n in lengths)
    most = max_windows if max_windows is not None else max(start, min(4 * start, have))
    for n in lengths:
        held.inputs.check_available(n, most)
    start = min(most, race_start(start, min(held.inputs.documents(n, most) for n in lengths)))
    if max_windows is None and have < 4 * prompts:
        notes.append(f"racing: at most {max(have, start)} held-out windows (the text's limit at {max(lengths)} tokens), "
                     f"not {4 * prompts}; add text with --data for more")
    return Racing(start, max(start, most), prompts, have)


def prepare_out(out: str) -> Path:
    """--out must be creatable and writable, and empty unless an earlier advise made it."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise RopeCliError(f"--out {out} is a file; pass a folder")
    if p.exists() and any(p.iterdir()) and not (p / MARKER).exists():
        raise RopeCliError(f"--out {out} is not empty and was not made by ropecli advise; pass a new or empty folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
        (p / MARKER).write_text("made by ropecli advise; a rerun writes here again\n")
    except OSError as exc:
        raise RopeCliError(f"--out {out} is not writable ({exc.strerror}); pass a folder you can write") from None
    return p


def reproduce_commands(result, model: ModelOptions, data: DataOptions, lengths, out, with_log_n, budget) -> list[str]:
    parts = ["ropecli", "advise"]
    if model.model:
        parts += ["--model", model.model]
    for n in lengths:
        parts += ["--len", str(n)]
    for d in data.data or []:
        parts += ["--data", d]
    parts += ["--samples", str(data.samples), "--seed", str(data.seed), "--budget", str(budget), "--out", out]
    if with_log_n:
        parts.append("--with-log-n")
    return [" ".join(shlex.quote(p) for p in parts), *[e["command"] for e in result.get("exports", []) if e["command"]]]


def print_advice(result: dict, out_dir: Path) -> None:
    from rich.table import Table

    from ropecli.report.advice import inference_line, ranking

    con = console()
    con.print(f"[bold]winner: {result['winner_label']}[/] — {result['verdict']}", highlight=False)
    t = Table(title=f"advise on {result['model']} (L = {result['train_len']}): {held_out_span(result)}, k = {result['factor']:g}")
    head, rows = ranking(result)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i == 1 or h == "verdict" else "right")
    for cells in rows:
        t.add_row(*cells, style="bold green" if cells[-1] == "winner" else "")
    con.print(t)
    con.print(inference_line(result), highlight=False)
    for n in result["notes"]:
        con.print(f"note: {n}", highlight=False)
    con.print(f"rule: {result['rule']}", highlight=False)
    if result["race"]:
        con.print(f"race: {result['race']['outcome']}", highlight=False)
        if result["kl_race"]:
            con.print(f"tie-break (KL within L): {result['kl_race']['outcome']}", highlight=False)
    for e in result["exports"]:
        con.print(f"{e['runtime']}: {'ok' if e['ok'] else 'not written'} — {e['command'] or e['output']}", highlight=False,
                  soft_wrap=True)
    con.print(f"wrote {out_dir}/advice.json and {out_dir}/report.md; {result['forward_passes']} forward passes, "
              f"{result['cache']['hits']} cached windows reused", highlight=False)


def _plain(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON: {type(x)}")
