"""`ropecli passkey` and `ropecli kl`: retrieval at long lengths, and a schedule's cost within L.
Protocols: `ropecli.evaluation.passkey` (prompts) and `ropecli.models.chunked_scoring` (passkey_scores, window_kl)."""

from __future__ import annotations

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import show, stderr_console
from ropecli.cli.eval_groups import DataOptions, EvalOptions, MappedScheduleOptions, ModelOptions, PasskeyOptions
from ropecli.cli.eval_options import PasskeyScore, PasskeyScoreOpt, TextVariantOpt
from ropecli.cli.groups import OutputOptions, ScheduleOptions, with_option_groups
from ropecli.cli.options import KL_METHODS, PASSKEY_METHODS, TargetLenOpt
from ropecli.cli.session_opening import check_plot_path, open_session
from ropecli.errors import RopeCliError
from ropecli.evaluation.compared import attach_paired
from ropecli.evaluation.metrics import KL, PASSKEY, PASSKEY_TEXT
from ropecli.evaluation.passkey import KEY_RANGE
from ropecli.models.model_geometry import resolve_factor
from ropecli.report.result_plots import plot_kl, plot_passkey_heatmaps
from ropecli.report.tables import kl_table, passkey_table
from ropecli.rope.target import check_lengths, default_target


@handle_errors
@with_option_groups
def passkey(model: ModelOptions, schedule: MappedScheduleOptions, data: DataOptions, evaluation: EvalOptions,
            prompts: PasskeyOptions, output: OutputOptions, text: TextVariantOpt = False,
            score: PasskeyScoreOpt = PasskeyScore.teacher):
    """Passkey retrieval as papers report it, on the published prompt (landmark attention's, as YaRN and LongRoPE run it).

    The prompt: an instruction, the repeated "The grass is green…" filler, the key stated twice at each depth, asked
    at the end.

    Accuracy = share of prompts whose every key token is the model's argmax (teacher-forced); --score generate: also
    the published scripts' score (10 greedy tokens, the first integer is the key); answer NLL = -log P(key | prompt).
    --prompts keys per depth and length (default --samples); the same prompts for every method. --text: ropecli's
    real-text variant (passkey-text).

    Examples: ropecli passkey --len 256 --len 2048 --method none --method mixed --plot pk.png
              ropecli passkey --model meta-llama/Llama-2-7b-hf --len 4096 --len 16384 --method yarn,mixed --samples 20
              ropecli passkey --len 1024 --method none,yarn --text
              ropecli passkey --len 512 --method none,yarn --score generate
    """
    prompts.parsed_depths(), prompts.checked_digits()  # bad --depths / --digits fail before the model loads
    specs = schedule.specs(PASSKEY_METHODS, factor=evaluation.k, log_n_modes=(evaluation.log_n,))
    check_plot_path(output.plot, output.force)
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts, generate=score == "generate")
    L, ins, metric = session.rope.train_len, session.inputs, PASSKEY_TEXT if text else PASSKEY
    results = session.run(specs, check_lengths(evaluation.length or [L, default_target(L)]), metric)
    rows = [{"method": r.label, "log_n": r.log_n, "len": r.len, "factor": r.factor, **d} for r in results for d in r.by_depth]
    keys = f"keys of {ins.digits} digits" if text else f"keys {KEY_RANGE[0]}–{KEY_RANGE[1]:,}"  # the source's randint
    out = {**session.header(), "metric": metric.name, "score": PasskeyScore(score).value, "depths": list(ins.depths),
           "digits": ins.digits if text else None, "rows": rows, "results": attach_paired(results), **session.tally()}
    if output.plot and session.is_main:
        plot_passkey_heatmaps(results, output.plot, f"Passkey accuracy: {session.rope.name} (L = {L}), "
                                                    f"{ins.per_depth} {keys} per cell ({metric.name})")
        stderr_console().print(f"wrote {output.plot}")
    return emit_json(out) if output.as_json else show(passkey_table(out))


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
    if evaluation.k is None and target_len is None:
        raise RopeCliError("kl needs the target's factor: pass --k 8 or --target-len N (at k = 1 every schedule is the "
                           "unscaled model and every KL is 0)")
    specs = schedule.specs(KL_METHODS, log_n_modes=(evaluation.log_n,))
    check_plot_path(output.plot, output.force)
    session = open_session(model, data, evaluation, quiet=output.as_json)
    L = session.rope.train_len
    k = resolve_factor(L, evaluation.k, target_len)
    results = session.run([s.but(factor=k) for s in specs], check_lengths(evaluation.length or [L]), KL)
    if output.plot and session.is_main:
        plot_kl(results, output.plot, f"KL against the unscaled model: {session.rope.name} (L = {L}), k = {k:g}")
        stderr_console().print(f"wrote {output.plot}")
    out = {**session.header(), "factor": k, "results": attach_paired(results), **session.tally()}
    return emit_json(out) if output.as_json else show(kl_table(out))
