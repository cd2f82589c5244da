"""`ropecli ppl` and `ropecli compare`: perplexity of a real causal LM under schedules, at lengths."""

from __future__ import annotations

from typing import Annotated

import typer

from ropecli.cli_common import console, emit_json, handle_errors
from ropecli.errors import RopeCliError
from ropecli.options import (SCHEDULE, DataOptions, EvalOptions, ModelOptions, OutputOptions, ScheduleOptions,
                             with_option_groups)
from ropecli.session import Session, check_plot_path, fmt_ppl, open_session, plot_results


def _lengths(evaluation: EvalOptions) -> list[int]:
    from ropecli.evaluate import check_lengths

    return check_lengths(evaluation.length or [])


@handle_errors
@with_option_groups
def ppl(model: ModelOptions, schedule: ScheduleOptions, data: DataOptions, evaluation: EvalOptions, output: OutputOptions):
    """Perplexity of a model under one schedule at one or more lengths.

    Examples: ropecli ppl --len 256 --len 2048 --method mixed --b 0.625
              ropecli ppl --model meta-llama/Llama-2-7b-hf --len 4096 --len 8192 --method mixed --log-n
    """
    from ropecli.specs import specs_from_flags

    lengths = _lengths(evaluation)
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors, default="mixed",
                             factor=evaluation.k, log_n_modes=(evaluation.log_n,))
    if len(specs) != 1:
        raise RopeCliError("ppl evaluates one schedule (one --method, at most one --b); use `ropecli compare` for several")
    done = _evaluate(specs, lengths, model, data, evaluation, output)
    if done:
        _print_results(done[1], f"{specs[0].label} on {done[0].lm.name}")


def _evaluate(specs, lengths, model, data, evaluation, output) -> tuple[Session, list[dict]] | None:
    """Evaluate every spec at every length; plot and print JSON as asked. (session, results) for the
    table, None when JSON was printed."""
    check_plot_path(output.plot)
    session = open_session(model, data, evaluation, quiet=output.as_json)
    results = session.run(specs, lengths)
    if output.plot and session.is_main:
        plot_results(results, output.plot, session)
    if output.as_json:
        emit_json({**session.header(), "results": results})
        return None
    return session, results


def _print_results(results: list[dict], title: str) -> None:
    from rich.table import Table

    t = Table(title=title)
    for col in ["method", "len", "k", "PPL", "NLL/token", "tokens", "cached"]:
        t.add_column(col, justify="left" if col == "method" else "right")
    for r in results:
        t.add_row(r["label"], str(r["len"]), f"{r['factor']:g}", fmt_ppl(r), f"{r['nll']:.4f}", str(r["tokens"]),
                  "yes" if r.get("cached") else "")
    console().print(t)


@handle_errors
@with_option_groups
def compare(
    model: ModelOptions,
    schedule: ScheduleOptions,
    data: DataOptions,
    evaluation: EvalOptions,
    output: OutputOptions,
    both_log_n: Annotated[bool, typer.Option("--with-and-without-log-n", rich_help_panel=SCHEDULE,
                                             help="Evaluate every method with and without log-n.")] = False,
):
    """The article's table: methods x lengths of perplexity, on the same documents.

    Examples: ropecli compare --len 256 --len 2048
              ropecli compare --model meta-llama/Llama-2-7b-hf --len 4096 --len 16384 --method none,pi,ntk-fixed,mixed --log-n --plot ppl.png
    """
    from ropecli.specs import specs_from_flags

    lengths = _lengths(evaluation)
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors,
                             default="none,pi,ntk-old,ntk-fixed,mixed", factor=evaluation.k,
                             log_n_modes=(False, True) if both_log_n else (evaluation.log_n,))
    done = _evaluate(specs, lengths, model, data, evaluation, output)
    if done:
        _print_table(done[0], specs, lengths, done[1])


def _print_table(session: Session, specs, lengths: list[int], results: list[dict]) -> None:
    from rich.table import Table

    lm = session.lm
    t = Table(title=f"PPL on {lm.name} (L = {lm.train_len}); {session.ev.samples} windows per length; "
                    "± = std. error across windows")
    t.add_column("method")
    for n in lengths:
        t.add_column(f"{n}" + (" (train)" if n == lm.train_len else ""), justify="right")
    by = {(r["label"], r["len"]): r for r in results}
    best = {n: min(r["ppl"] for r in results if r["len"] == n) for n in lengths}
    for spec in specs:
        cells = []
        for n in lengths:
            r = by[(spec.label, n)]
            cell = fmt_ppl(r)
            cells.append(f"[bold green]{cell}[/]" if r["ppl"] == best[n] else cell)
        t.add_row(spec.label, *cells)
    console().print(t)
