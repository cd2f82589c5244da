"""`ropecli advise`: the tournament end to end (`ropecli.tuning.advise.run_advise`: pre-flight,
searches, ranking, the winner exported through the same function as `ropecli export`, advice.json and
report.md in --out); this parses, calls it, and prints."""

from __future__ import annotations

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import show
from ropecli.cli.eval_groups import AdviseOptions, DataOptions, EvalOptions, ModelOptions, PasskeyOptions
from ropecli.cli.eval_options import AdviseOutOpt
from ropecli.cli.groups import with_option_groups
from ropecli.cli.options import ForceOpt, JsonOpt
from ropecli.cli.session_opening import open_session
from ropecli.report.advice import advice_lines
from ropecli.tuning.advise import Source, prepare_out, run_advise


@handle_errors
@with_option_groups
def advise(model: ModelOptions, data: DataOptions, evaluation: EvalOptions, prompts: PasskeyOptions, plan: AdviseOptions,
           out: AdviseOutOpt = "ropecli-advice", force: ForceOpt = False, as_json: JsonOpt = False):
    """Which context extension for my model: every method on the same windows, ranked, exported.

    Searches YaRN's betas, the mixed family and the tuned position maps on the searched windows, then
    ranks every candidate (the schedules and the position maps, `ropecli methods`) on held-out windows by
    the written rule (constraints, mean log-PPL, the paired verdicts, ties to the smallest cost within L)
    and exports each runtime (`ropecli runtimes`) the best-ranked candidate it serves. Racing (the
    default; --no-race measures every candidate on every window) drops the candidates shown worse and
    doubles the undecided ones' windows up to --max-windows. Every window is cached: an interrupted run
    resumes.

    Examples: ropecli advise
              ropecli advise --model meta-llama/Llama-2-7b-hf --len 32768 --len 65536 --out llama-advice
    """
    prompts.parsed_depths(), prompts.checked_digits()
    out_dir = prepare_out(out, force)  # a bad --out fails before the model loads
    evaluation.target_before_loading(model)  # so does a --len that disagrees with --k
    session = open_session(model, data, evaluation, quiet=as_json, passkey=prompts)
    result = run_advise(session, plan.plan(), evaluation.target(session.rope), out_dir,
                        Source(model.model, model.gguf_file, data.data, model.engine_flags()))
    return emit_json(result) if as_json else show(advice_lines(result, out_dir), wrap=False)
