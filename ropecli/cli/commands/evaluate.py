"""`ropecli ppl` and `ropecli compare`: perplexity of a real causal LM under schedules, at lengths."""

from __future__ import annotations

from typing import Annotated

import typer

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import console
from ropecli.errors import RopeCliError
from ropecli.cli.groups import (DataOptions, EvalOptions, ModelOptions, OutputOptions, PasskeyOptions,
                                ScheduleOptions, with_option_groups)
from ropecli.cli.options import (COMPARE_METHODS, DEFAULT_METHOD, SCHEDULE, MarginOpt, MaxWindowsOpt, MetricOpt,
                                 flat_choices)
from ropecli.cli.session import Session, check_plot_path, fmt_ppl, open_session, plot_results


def _lengths(evaluation: EvalOptions) -> list[int]:
    from ropecli.evaluation.evaluator import check_lengths

    return check_lengths(evaluation.length or [])


@handle_errors
@with_option_groups
def ppl(model: ModelOptions, schedule: ScheduleOptions, data: DataOptions, evaluation: EvalOptions, output: OutputOptions):
    """Perplexity of a model under one schedule at one or more lengths.

    Examples: ropecli ppl --len 256 --len 2048 --method mixed --b 0.625
              ropecli ppl --model meta-llama/Llama-2-7b-hf --len 4096 --len 8192 --method mixed --log-n
    """
    from ropecli.cli.flags import specs_from_flags

    lengths = _lengths(evaluation)
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors, default=DEFAULT_METHOD,
                             factor=evaluation.k, log_n_modes=(evaluation.log_n,))
    if len(specs) != 1:
        raise RopeCliError("ppl evaluates one schedule (one --method, at most one --b); use `ropecli compare` for several")
    done = _evaluate(specs, lengths, model, data, evaluation, output)
    if done:
        _print_results(done[1], f"{specs[0].label} on {done[0].rope.name}")


def _evaluate(specs, lengths, model, data, evaluation, output) -> tuple[Session, list[dict]] | None:
    """Evaluate every spec at every length; plot and print JSON as asked. (session, results) for the
    table, None when JSON was printed."""
    check_plot_path(output.plot)
    session = open_session(model, data, evaluation, quiet=output.as_json)
    results = [r.to_json() for r in session.run(specs, lengths)]
    if output.plot and session.is_main:
        plot_results(results, output.plot, session)
    if output.as_json:
        emit_json({**session.header(), "results": results, **session.tally()})
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
    prompts: PasskeyOptions,
    output: OutputOptions,
    metric: MetricOpt = None,
    both_log_n: Annotated[bool, typer.Option("--with-and-without-log-n", rich_help_panel=SCHEDULE,
                                             help="Evaluate every method with and without log-n.")] = False,
    race: Annotated[bool, typer.Option("--race", help="Race the methods: from --samples windows, drop the ones "
                                       "shown worse than the leader, double the windows of the undecided ones up to "
                                       "--max-windows (per metric, over all --len).")] = False,
    max_windows: MaxWindowsOpt = None,
    margin: MarginOpt = None,
):
    """The article's table: methods x lengths, on the same documents, with paired confidence.

    --metric ppl (default), passkey (accuracy at each --len), kl (at L, schedules for the target's k:
    --k, or the longest --len / L). Cells shown equivalent to the best (paired, within --margin) are
    marked ≈, undecided ones ?; the verdicts hold at 95% for each column.

    Examples: ropecli compare --len 256 --len 2048
              ropecli compare --len 2048 --method none,yarn,llama3,mixed --metric ppl,passkey,kl
              ropecli compare --model meta-llama/Llama-2-7b-hf --len 4096 --len 16384 --method none,pi,ntk-fixed,mixed --log-n --plot ppl.png
    """
    from ropecli.cli.flags import specs_from_flags
    from ropecli.evaluation.stats import attach_paired
    from ropecli.rope.spec import target_factor

    metrics = flat_choices(metric, ("ppl",))
    lengths = _lengths(evaluation)
    if "passkey" in metrics:
        prompts.parsed_depths(), prompts.checked_digits()
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors,
                             default=COMPARE_METHODS, factor=evaluation.k,
                             log_n_modes=(False, True) if both_log_n else (evaluation.log_n,))
    check_plot_path(output.plot)
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if "passkey" in metrics else None)
    L = session.rope.train_len
    kl_k = target_factor(evaluation.k, lengths, L) if "kl" in metrics else None
    cells = {"ppl": (specs, lengths), "passkey": (specs, lengths), "kl": ([s.but(factor=kl_k) for s in specs], [L])}
    results, races = [], {}
    for m in ("ppl", "passkey", "kl"):
        if m not in metrics:
            continue
        if race and len(specs) > 1:
            results_m, races[m] = _race(session, *cells[m], m, max_windows, margin)
            results += results_m
        else:
            results += session.run(*cells[m], m)
    results = attach_paired(results, *([margin] if margin is not None else []))
    ppl_rows = [r for r in results if r["metric"] == "ppl"]
    if output.plot and session.is_main and ppl_rows:
        plot_results(ppl_rows, output.plot, session)
    if output.as_json:
        return emit_json({**session.header(), "metrics": metrics, "kl_factor": kl_k, "results": results,
                          **({"races": races} if race else {}), **session.tally()})
    _print_table(session, specs, lengths, results, kl_k)
    for m, record in races.items():
        console().print(f"race ({m}): {record['outcome']}", highlight=False)


def _race(session: Session, specs, lengths, metric: str, max_windows: int | None, margin: float | None = None):
    """One metric's race over every --len, under one progress bar whose total grows with each round."""
    from ropecli.cli.session import overall_progress
    from ropecli.tuning.racing import race_specs

    start = session.inputs.samples
    most = max_windows or 4 * start
    for n in lengths:
        session.inputs.check_available(n, most)
    total = [0]
    with overall_progress(0, f"race ({metric})") as (bar, task):
        session.progress = (bar, task)

        def on_round(r, n, alive):
            total[0] += len(alive) * len(lengths) * session.inputs.resized(n).units(metric)
            bar.update(task, total=total[0])

        try:
            return race_specs(session.run, specs, lengths, metric, start=start, max_windows=most, on_round=on_round,
                              **({"margin": margin} if margin is not None else {}))
        finally:
            session.progress = None


def _cell(r: dict, text: str) -> str:
    """A cell marked by its paired comparison with the best of its column: bold green = best, ≈ = shown
    equivalent, ? = undecided (neither shown worse nor shown equivalent)."""
    p = r["vs_best"]
    if p["best"]:
        return f"[bold green]{text}[/]"
    return text + (" ≈" if p["tied"] else " ?" if p.get("verdict") == "undecided" else "")


def _print_table(session: Session, specs, lengths: list[int], results: list[dict], kl_k: float | None) -> None:
    from rich.table import Table

    lm = session.rope
    by = {(r["metric"], r["label"], r["len"]): r for r in results}
    have = {r["metric"] for r in results}
    counts = sorted({len(r.get("window_nll") or r.get("window_kl") or r.get("prompt_answer_nll") or []) for r in results})
    per_cell = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} (raced)"
    t = Table(title=f"{lm.name} (L = {lm.train_len}); {per_cell} windows/keys per cell; ± = 95% half-width across "
                    "windows; bold = best, ≈ = shown equivalent to it, ? = undecided (paired, 95% for the whole column)")
    t.add_column("method")
    columns = []
    if "ppl" in have:
        columns += [("ppl", n, f"PPL {n}" + (" (train)" if n == lm.train_len else "")) for n in lengths]
    if "passkey" in have:
        columns += [("passkey", n, f"passkey {n}") for n in lengths]
    if "kl" in have:
        columns += [("kl", lm.train_len, f"KL @ L (k={kl_k:g})"), ("kl-top1", lm.train_len, "top-1 @ L")]
    for _, _, title in columns:
        t.add_column(title, justify="right")
    for spec in specs:
        cells = []
        for metric, n, _ in columns:
            r = by[("kl" if metric == "kl-top1" else metric, spec.label, n)]
            if metric == "ppl":
                cells.append(_cell(r, fmt_ppl(r)))
            elif metric == "passkey":
                cells.append(_cell(r, f"{r['accuracy']:.0%}"))
            elif metric == "kl":
                cells.append(_cell(r, f"{r['kl_mean']:.4f}"))
            else:
                cells.append(f"{r['top1_agreement']:.1f}%")
        t.add_row(spec.label, *cells)
    console().print(t)
    if "passkey" in have:
        console().print("passkey: accuracy over all depths; bold/≈ rank by the answer NLL (paired over the same prompts).",
                        highlight=False)
    _print_ties(results, lm.train_len)


def _print_ties(results: list[dict], L: int) -> None:
    """One line per column: the best, the candidates shown equivalent to it, the undecided ones and what
    would decide each, and what the verdicts generalize to."""
    from ropecli.evaluation.stats import tie_answer

    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault((r["metric"], r["len"]), []).append(r)
    for (metric, n), rows in groups.items():
        if len(rows) < 2:
            continue
        best = next(r for r in rows if r["vs_best"]["best"])
        others = [r for r in rows if not r["vs_best"]["best"]]
        equivalent = [r["label"] for r in others if r["vs_best"]["tied"]]
        undecided = [r for r in others if r["vs_best"].get("verdict") == "undecided"]
        what = {"ppl": f"PPL @ {n}", "passkey": f"passkey answer NLL @ {n}", "kl": f"KL @ L={n}"}[metric]
        unit = "keys" if metric == "passkey" else "windows"
        parts = [f"equivalent within ±{others[0]['vs_best']['margin']:g}: {', '.join(equivalent)}"] if equivalent else []
        if undecided:
            parts.append("undecided: " + "; ".join(f"{r['label']} ({tie_answer(r['vs_best'], unit)})" for r in undecided))
        if not parts:
            parts.append("every other candidate is shown worse")
        p = others[0]["vs_best"]
        scope = f" [{p['inference']} inference: generalizes to {p['generalizes_to']}]" if p.get("generalizes_to") else ""
        console().print(f"{what}: best {best['label']}; {'; '.join(parts)} (paired, 95% for the column){scope}",
                        highlight=False)
