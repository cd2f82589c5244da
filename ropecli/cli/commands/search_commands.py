"""`ropecli search` and `ropecli search-b`: both run the one search engine (`ropecli.tuning.search`) through
`ropecli.tuning.search_run`, resumable through the cache; these parse, call it, and print."""

from __future__ import annotations

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import show, stderr_console
from ropecli.cli.eval_groups import DataOptions, EvalOptions, ModelOptions, PasskeyOptions, SearchOptions
from ropecli.cli.eval_options import (
    FixedParamOpt,
    HeldOutOpt,
    HiOpt,
    LoOpt,
    OptimizerOpt,
    ReferenceOpt,
    SearchBudgetOpt,
    TolOpt,
    TunedMethodOpt,
    VaryOpt,
)
from ropecli.cli.groups import OutputOptions, with_option_groups
from ropecli.cli.options import DEFAULT_METHOD, MapOpt
from ropecli.cli.session_opening import open_session
from ropecli.report.search_tables import search_b_tables, search_tables
from ropecli.tuning.optimizers import Optimizer, check_range
from ropecli.tuning.search_run import check_search, check_something_to_extend, search_b_on, search_on


def deliver(out: dict, as_json: bool, tables) -> None:
    """What the run wrote (stderr), then its JSON or its tables."""
    for line in out["written"] + ([f"[yellow]warning:[/] {out['warning']}"] if "warning" in out else []):
        stderr_console().print(line, highlight=False)
    emit_json(out) if as_json else show(tables(out))


@handle_errors
@with_option_groups
def search_b(model: ModelOptions, data: DataOptions, evaluation: EvalOptions, output: OutputOptions, prompts: PasskeyOptions,
             search: SearchOptions, lo: LoOpt = 0.0, hi: HiOpt = 1.0, tol: TolOpt = 0.01):
    """Search the exponent b of NTK-RoPE-mixed for the lowest perplexity at the target lengths.

    Objective: mean log-PPL over the lengths (default 8·L), on one fixed sample of documents. Every
    evaluation is cached at once; rerunning resumes where it stopped. The same engine as
    `ropecli search --method mixed --vary b --optimizer golden`, with the standard methods as references.

    Examples: ropecli search-b
              ropecli search-b --model meta-llama/Llama-2-7b-hf --len 8192 --len 16384 --export-config rope.json
    """
    check_range(lo, hi, tol)
    plan = search.plan(evaluation, output, prompts, model)
    if early := evaluation.target_before_loading(model):  # a --len with nothing to extend fails before loading
        check_something_to_extend(early[0].train_len, early[1])
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if plan.prompted else None)
    deliver(search_b_on(session, plan, evaluation.target(session.rope), lo, hi, tol), output.as_json, search_b_tables)


@handle_errors
@with_option_groups
def search(model: ModelOptions, data: DataOptions, evaluation: EvalOptions, output: OutputOptions, prompts: PasskeyOptions,
           search: SearchOptions, method: TunedMethodOpt = DEFAULT_METHOD, vary: VaryOpt = None, param: FixedParamOpt = None,
           budget: SearchBudgetOpt = 30, optimizer: OptimizerOpt = Optimizer.auto, held_out: HeldOutOpt = None,
           reference: ReferenceOpt = None, position_map: MapOpt = None):
    """Search the continuous parameters of any method within a budget; verdict on held-out windows.

    The searched windows are the first --samples of the seeded sample; the winner and the standard
    methods (none, PI, NTK-aware, NTK-fixed, dynamic, YaRN, llama3, mixed b=0.625) are then scored on
    held-out windows (other documents where there are two or more), and compared there (paired 95%).
    Cached and resumable like search-b; under --map, its parameters may be varied too (--vary G=2:16).

    Examples: ropecli search --method mixed --vary b --vary critical
              ropecli search --method yarn --vary beta_fast --vary beta_slow --budget 30
              ropecli search --model meta-llama/Llama-2-7b-hf --len 16384 --method llama3 --vary low_freq_factor --vary high_freq_factor
    """
    plan = search.plan(evaluation, output, prompts, model, position_map)
    optimizer = Optimizer(optimizer).value
    method, fixed, refs = check_search(method, vary, param, budget, optimizer, reference, plan)
    evaluation.target_before_loading(model)
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if plan.prompted else None)
    out = search_on(session, plan, evaluation.target(session.rope), method, vary, fixed, refs, budget, optimizer, held_out)
    deliver(out, output.as_json, search_tables)
