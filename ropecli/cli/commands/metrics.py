"""`ropecli passkey` and `ropecli kl`: retrieval at long lengths, and a schedule's cost within L.
Protocols: `ropecli.evaluation.passkey` (prompts) and `ropecli.models.scoring` (passkey_scores, window_kl)."""

from __future__ import annotations

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import console, stderr_console
from ropecli.errors import RopeCliError
from ropecli.cli.groups import (DataOptions, EvalOptions, ModelOptions, OutputOptions, PasskeyOptions,
                                ScheduleOptions, with_option_groups)
from ropecli.cli.options import KL_METHODS, PASSKEY_METHODS, TargetLenOpt
from ropecli.cli.session import check_plot_path, open_session


@handle_errors
@with_option_groups
def passkey(model: ModelOptions, schedule: ScheduleOptions, data: DataOptions, evaluation: EvalOptions,
            prompts: PasskeyOptions, output: OutputOptions):
    """Passkey retrieval: a random key stated once at each depth of real text, asked for at the end.

    Accuracy = share of prompts whose every key token is the model's argmax (teacher-forced); answer
    NLL = -log P(key | prompt). --samples keys per depth and length; the same prompts for every method.

    Examples: ropecli passkey --len 256 --len 2048 --method none --method mixed --plot pk.png
              ropecli passkey --model meta-llama/Llama-2-7b-hf --len 4096 --len 16384 --method yarn,mixed --samples 20
    """
    from ropecli.evaluation.evaluator import check_lengths, default_target
    from ropecli.cli.flags import specs_from_flags
    from ropecli.evaluation.stats import attach_paired

    prompts.parsed_depths(), prompts.checked_digits()  # bad --depths / --digits fail before the model loads
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors, default=PASSKEY_METHODS,
                             factor=evaluation.k, log_n_modes=(evaluation.log_n,))
    check_plot_path(output.plot)
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts)
    L = session.rope.train_len
    lengths = check_lengths(evaluation.length or [L, default_target(L)])
    results = attach_paired(session.run(specs, lengths, "passkey"))
    if output.plot and session.is_main:
        from ropecli.report.result_plots import plot_passkey_heatmaps

        plot_passkey_heatmaps(results, output.plot, f"Passkey accuracy: {session.rope.name} (L = {L}), "
                                                    f"{session.inputs.samples} keys of {session.inputs.digits} digits per cell")
        stderr_console().print(f"wrote {output.plot}")
    if output.as_json:
        rows = [{"method": r["label"], "log_n": r["log_n"], "len": r["len"], "factor": r["factor"], **d}
                for r in results for d in r["by_depth"]]
        return emit_json({**session.header(), "depths": list(session.inputs.depths), "digits": session.inputs.digits,
                          "rows": rows, "results": results, **session.tally()})
    print_passkey(results, session)


def print_passkey(results: list[dict], session) -> None:
    from rich.table import Table

    from ropecli.evaluation.stats import fmt_diff

    ev = session.inputs
    t = Table(title=f"Passkey accuracy on {session.rope.name} (L = {session.rope.train_len}): {ev.samples} key(s) of "
                    f"{ev.digits} digits per depth; depth 0 = key farthest from the question")
    t.add_column("method")
    t.add_column("len", justify="right")
    t.add_column("k", justify="right")
    for d in ev.depths:
        t.add_column(f"depth {d:g}", justify="right")
    t.add_column("all", justify="right")
    t.add_column("answer NLL", justify="right")
    t.add_column("Δ NLL vs best (paired)", justify="right")
    for r in sorted(results, key=lambda r: (r["len"], r["label"])):
        tie = " ≈" if r["vs_best"]["tied"] and not r["vs_best"]["best"] else (
            " ?" if r["vs_best"].get("verdict") == "undecided" else "")
        t.add_row(r["label"], str(r["len"]), f"{r['factor']:g}",
                  *[f"{d['accuracy']:.0%}" for d in r["by_depth"]], f"[bold]{r['accuracy']:.0%}[/]",
                  _num(r["answer_nll"]), fmt_diff(r["vs_best"]) + tie)
    console().print(t)
    console().print("Δ NLL: answer NLL minus the best method's at that length, over the same prompts, ± the 95% half-width; "
                    "≈ = shown equivalent to the best within ±0.01 nats, ? = undecided (paired, 95% for the column).",
                    highlight=False)


@handle_errors
@with_option_groups
def kl(model: ModelOptions, schedule: ScheduleOptions, data: DataOptions, evaluation: EvalOptions, output: OutputOptions,
       target_len: TargetLenOpt = None):
    """What a schedule costs within the training length: KL(p_unscaled || p_scaled) per token at L.

    The schedule is built for the target's k (--k, or --target-len / L) and run at lengths up to L
    (default L), where the unscaled model is the reference. Reported like llama.cpp's --kl-divergence:
    mean KL, 99th percentile, max, and top-1 agreement.

    Examples: ropecli kl --k 8
              ropecli kl --model meta-llama/Llama-2-7b-hf --target-len 32768 --method yarn,llama3,mixed
    """
    from ropecli.evaluation.evaluator import check_lengths
    from ropecli.cli.flags import resolve_factor, specs_from_flags
    from ropecli.evaluation.stats import attach_paired

    if evaluation.k is None and target_len is None:
        raise RopeCliError("kl needs the target's factor: pass --k 8 or --target-len N (at k = 1 every schedule is the "
                           "unscaled model and every KL is 0)")
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors,
                             default=KL_METHODS, log_n_modes=(evaluation.log_n,))
    check_plot_path(output.plot)
    session = open_session(model, data, evaluation, quiet=output.as_json)
    L = session.rope.train_len
    k = resolve_factor(L, evaluation.k, target_len)
    specs = [s.but(factor=k) for s in specs]
    lengths = check_lengths(evaluation.length or [L])
    results = attach_paired(session.run(specs, lengths, "kl"))
    if output.plot and session.is_main:
        from ropecli.report.result_plots import plot_kl

        plot_kl(results, output.plot, f"KL against the unscaled model: {session.rope.name} (L = {L}), k = {k:g}")
        stderr_console().print(f"wrote {output.plot}")
    if output.as_json:
        return emit_json({**session.header(), "factor": k, "results": results, **session.tally()})
    print_kl(results, session, k)


def print_kl(results: list[dict], session, k: float) -> None:
    from rich.table import Table

    from ropecli.evaluation.stats import fmt_diff

    t = Table(title=f"KL(unscaled || scaled) per token on {session.rope.name} (L = {session.rope.train_len}), schedules "
                    f"for k = {k:g}; {session.inputs.samples} windows")
    for col in ["method", "len", "mean KL", "p99 KL", "max KL", "top-1 agree", "Δ vs best (paired)"]:
        t.add_column(col, justify="left" if col == "method" else "right")
    for r in sorted(results, key=lambda r: (r["len"], r["kl_mean"])):
        tie = " ≈" if r["vs_best"]["tied"] and not r["vs_best"]["best"] else (
            " ?" if r["vs_best"].get("verdict") == "undecided" else "")
        t.add_row(r["label"], str(r["len"]), f"{r['kl_mean']:.5f}", f"{r['kl_p99']:.4f}",
                  f"{r['kl_max']:.3f}", f"{r['top1_agreement']:.2f}%", fmt_diff(r["vs_best"]) + tie)
    console().print(t)
    console().print("nats per token; Δ: mean KL minus the lowest one over the same windows, ± the 95% half-width; "
                    "≈ = shown equivalent to the lowest within ±0.01 nats, ? = undecided (paired, 95% for the column).",
                    highlight=False)


def _num(x) -> str:
    return "inf" if x is None else f"{x:.3f}"

