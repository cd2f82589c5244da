"""`ropecli search` and `ropecli search-b`: both run the one search engine (`ropecli.tuning.search`),
resumable through the cache; these parse, call it, and print."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import console, stderr_console
from ropecli.cli.groups import DataOptions, EvalOptions, ModelOptions, OutputOptions, PasskeyOptions, with_option_groups
from ropecli.cli.options import (DEFAULT_METHOD, SEARCH, ExportConfigOpt, FixedParamOpt, HeldOutOpt, MaxShortKlOpt,
                                 MaxShortRegressionOpt, ObjectiveOpt, OptimizerOpt, NoRaceOpt, SearchBudgetOpt, TunedMethodOpt)
from ropecli.cli.session import check_plot_path, open_session
from ropecli.errors import RopeCliError
from ropecli.tuning.objective import Objective
from ropecli.tuning.optimizers import Optimizer


@handle_errors
@with_option_groups
def search_b(
    model: ModelOptions,
    data: DataOptions,
    evaluation: EvalOptions,
    output: OutputOptions,
    prompts: PasskeyOptions,
    lo: Annotated[float, typer.Option("--lo", min=0.0, max=1.0, rich_help_panel=SEARCH, help="Lower end of b (0 = PI).")] = 0.0,
    hi: Annotated[float, typer.Option("--hi", min=0.0, max=1.0, rich_help_panel=SEARCH, help="Upper end of b (1 = NTK-fixed).")] = 1.0,
    tol: Annotated[float, typer.Option("--tol", min=1e-6, rich_help_panel=SEARCH, help="Accuracy of the best b.")] = 0.01,
    max_short_regression: MaxShortRegressionOpt = None,
    max_short_kl: MaxShortKlOpt = None,
    objective: ObjectiveOpt = Objective.ppl,
    export_config: ExportConfigOpt = None,
    no_race: NoRaceOpt = False,
):
    """Search the exponent b of NTK-RoPE-mixed for the lowest perplexity at the target lengths.

    Objective: mean log-PPL over the lengths (default 8·L), on one fixed sample of documents. Every
    evaluation is cached at once; rerunning resumes where it stopped. The same engine as
    `ropecli search --method mixed --vary b --optimizer golden`, with the standard methods as references.

    Examples: ropecli search-b
              ropecli search-b --model meta-llama/Llama-2-7b-hf --len 8192 --len 16384 --export-config rope.json
    """
    from ropecli.tuning.optimizers import check_range
    import ropecli.tuning.search

    objective = Objective(objective).value
    check_range(lo, hi, tol)
    session, lengths, geom = _open(model, data, evaluation, output, prompts, objective, export_config)
    if all(n <= session.rope.train_len for n in lengths) and evaluation.k is None:
        stderr_console().print(f"[yellow]warning:[/] every --len is within the training length L={session.rope.train_len}: "
                               "k = 1, nothing to extend; every b gives the same perplexity")
    out = ropecli.tuning.search.search_b(
        session.run, geom, lengths, lo=lo, hi=hi, tol=tol, log_n=evaluation.log_n, factor=evaluation.k,
        max_short_regression=max_short_regression, max_short_kl=max_short_kl, objective=objective,
        windows=session.inputs.samples, screen=not no_race)
    out = {**session.header(), **out, "screened": not no_race, **session.tally()}

    def plot(path):
        from ropecli.report.result_plots import plot_search

        plot_search(out["evaluations"], out["references"], out["best_b"], path, objective,
                    f"search-b on {session.rope.name}: lengths {', '.join(map(str, lengths))}"
                    + (" (log-n)" if evaluation.log_n else ""))

    _deliver(session, out, ("mixed", {"b": out["best_b"]}), geom, evaluation, output, export_config, plot)
    if output.as_json:
        return emit_json(out)
    print_search(out, lengths)


def _open(model, data, evaluation, output, prompts, objective: str, export_config):
    """Check every path, load the model, and fail on too little text before the first forward pass:
    (session, lengths, geometry at the target's k)."""
    from ropecli.evaluation.evaluator import check_lengths, default_target
    from ropecli.export.hf import check_writable
    from ropecli.rope.spec import target_factor

    if objective == "passkey":
        prompts.parsed_depths(), prompts.checked_digits()
    check_plot_path(output.plot)
    if export_config:
        check_writable(export_config, "--export-config")
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if objective == "passkey" else None)
    rope = session.rope
    lengths = check_lengths(evaluation.length or [default_target(rope.train_len)])
    for n in lengths:
        session.ev.check_inputs("passkey" if objective == "passkey" else "ppl", n)
    return session, lengths, rope.geometry(target_factor(evaluation.k, lengths, rope.train_len))


def _deliver(session, out: dict, winner: tuple, geom, evaluation, output, export_config, plot) -> None:
    """On the main rank: the winner's transformers block to --export-config, the picture to --plot."""
    if not session.is_main:
        return
    if export_config:
        from ropecli.export.hf import write_hf_block
        from ropecli.rope.spec import make_spec
        out["export_config"] = write_hf_block(export_config, session.rope, make_spec(*winner, log_n=evaluation.log_n),
                                              geom.factor)
        stderr_console().print(f"wrote {export_config}: {out['export_config']['note']}", highlight=False)
    if output.plot:
        plot(output.plot)
        stderr_console().print(f"wrote {output.plot}")


def print_search(out: dict, lengths: list[int]) -> None:
    from ropecli.evaluation.stats import fmt_diff
    from ropecli.tuning.search import objective_text

    con = console()
    con.print(f"[bold]verdict:[/] {out['verdict']}", highlight=False)
    passkey = out["objective_name"] == "passkey"
    what = "mean passkey answer NLL over lengths" if passkey else "mean log-PPL over lengths"
    t = _table(f"search-b on {out['model']} (L = {out['train_len']}), objective = {what}"
               + (", with log-n" if out["log_n"] else ""), "b", lengths, passkey, "Δ vs best (paired, ± 95%)", "note")
    for e in sorted(out["evaluations"], key=lambda e: e["b"]):
        note = "best" if e["b"] == out["best_b"] else ("equivalent to the best" if e["vs_best"]["tied"] else
                                                        "stopped early: a lower bound" if "stopped_early" in e else "")
        if e.get("violates_guard"):
            note = "guard: " + ", ".join(x for x in [
                f"short PPL +{e['short_rise_percent']:.1f}%" if "short_rise_percent" in e else "",
                f"short KL {e['short_kl']:.4f}" if "short_kl" in e else ""] if x)
        style = "bold green" if e["b"] == out["best_b"] else ""
        t.add_row(f"{e['b']:.4f}", *_cells(e, lengths, passkey), objective_text(e), fmt_diff(e["vs_best"]), note, style=style)
    con.print(t)
    r = _table("References on the same documents (Δ: minus the best b, paired over windows, ± 95% half-width)", "method",
               lengths, passkey, "Δ vs best b", "verdict")
    for ref in sorted(out["references"], key=lambda x: x["objective"]):
        d = ref["vs_best_b"]
        r.add_row(ref["label"], *_cells(ref, lengths, passkey), f"{ref['objective']:.4f}", fmt_diff(d),
                  "beats best b" if d["beats_best_b"] else d["verdict"])
    con.print(r)
    lo_b, hi_b = out["equivalent_b"]
    con.print(f"best b = [bold]{out['best_b']:.4f}[/] (±{out['tol']:g}), objective {out['best_objective']:.4f}; b in [{lo_b:.4f}, "
              f"{hi_b:.4f}] is shown equivalent to it (paired 95%, fully evaluated points); {out['search_evaluations']} "
              f"evaluations (a uniform grid of the same accuracy needs {out['grid_evaluations_same_accuracy']}); "
              f"{out['forward_passes']} forward passes, {out['cache']['hits']} cached results reused")
    print_one_dim_notes(con, out, "b", out["lo"], out["hi"], "--lo/--hi")


def print_one_dim_notes(con, out: dict, name: str, lo: float, hi: float, flags: str) -> None:
    """The notes of a one-parameter search (`ropecli.tuning.search.compare_with_best`): best at an end, bumps."""
    if out.get("at_boundary"):
        end = lo if out["at_boundary"] == "lo" else hi
        what = (" (PI)" if end == 0 else " (NTK-fixed)" if end == 1 else "") if name == "b" and out.get("method", "mixed") == "mixed" else ""
        con.print(f"[yellow]note:[/] the minimum sits at the boundary {name} = {end:g}{what}; widen {flags} if the range allows")
    if out.get("non_unimodal_at"):
        con.print(f"[yellow]warning:[/] the objective is not unimodal over the evaluated points (a bump at {name} = "
                  f"{', '.join(f'{b:.3f}' for b in out['non_unimodal_at'])}); the search may have missed a better valley")


def _table(title: str, first: str, lengths: list[int], passkey: bool, diff: str, last: str):
    """A search-b table: the first column, the objective at each length, the objective, Δ, a note."""
    from rich.table import Table

    t = Table(title=title)
    t.add_column(first, justify="right" if first == "b" else "left")
    for n in lengths:
        t.add_column(f"{'passkey' if passkey else 'PPL'} @ {n}", justify="right")
    for column in ("objective", diff):
        t.add_column(column, justify="right")
    t.add_column(last)
    return t


def _cells(e: dict, lengths: list[int], passkey: bool) -> list[str]:
    return [f"{e['accuracy'][str(n)]:.0%} / {e['answer_nll'][str(n)]:.2f}" if passkey else _p(e["ppl"][str(n)])
            for n in lengths]


def _p(x) -> str:
    return "inf" if x is None or x == math.inf else f"{x:.4g}"


@handle_errors
@with_option_groups
def search(
    model: ModelOptions,
    data: DataOptions,
    evaluation: EvalOptions,
    output: OutputOptions,
    prompts: PasskeyOptions,
    method: TunedMethodOpt = DEFAULT_METHOD,
    vary: Annotated[Optional[list[str]], typer.Option(
        "--vary", rich_help_panel=SEARCH,
        help="A parameter to search, NAME or NAME=LO:HI (repeatable), e.g. --vary b --vary critical=4:32.")] = None,
    param: FixedParamOpt = None,
    budget: SearchBudgetOpt = 30,
    optimizer: OptimizerOpt = Optimizer.auto,
    held_out: HeldOutOpt = None,
    reference: Annotated[Optional[list[str]], typer.Option(
        "--reference", rich_help_panel=SEARCH,
        help="Another schedule for the held-out verdict, METHOD[:KEY=VALUE,...] (repeatable), e.g. mixed:b=0.95.")] = None,
    objective: ObjectiveOpt = Objective.ppl,
    max_short_regression: MaxShortRegressionOpt = None,
    max_short_kl: MaxShortKlOpt = None,
    export_config: ExportConfigOpt = None,
    no_race: NoRaceOpt = False,
):
    """Search the continuous parameters of any method within a budget; verdict on held-out windows.

    The searched windows are the first --samples of the seeded sample; the winner and the standard
    methods (none, PI, NTK-aware, NTK-fixed, dynamic, YaRN, llama3, mixed b=0.625) are then scored on
    the next --held-out windows, and compared there (paired 95%). Cached and resumable like search-b.

    Examples: ropecli search --method mixed --vary b --vary critical
              ropecli search --method yarn --vary beta_fast --vary beta_slow --budget 30
              ropecli search --model meta-llama/Llama-2-7b-hf --len 16384 --method llama3 --vary low_freq_factor --vary high_freq_factor
    """
    from ropecli.cli.flags import parse_params
    from ropecli.rope.methods import resolve_method
    from ropecli.rope.spec import make_spec
    from ropecli.tuning.optimizers import min_budget
    from ropecli.tuning.search import parse_reference, run_search
    from ropecli.tuning.space import ANY_GEOMETRY, parse_vary

    objective, optimizer = Objective(objective).value, Optimizer(optimizer).value
    method = resolve_method(method).name
    fixed = parse_params(param)
    dims = parse_vary(vary, method, ANY_GEOMETRY)  # names, syntax, domains now; critical's bound d/2 once the model is read
    clash = [d.name for d in dims if d.name in fixed]
    if clash:
        raise RopeCliError(f"{clash[0]} is both varied (--vary) and fixed (--param); pass it once")
    if budget < min_budget(len(dims)):
        raise RopeCliError(f"--budget {budget} is below the minimum {min_budget(len(dims))} for {len(dims)} parameter(s)")
    if optimizer == "golden" and len(dims) != 1:
        raise RopeCliError("--optimizer golden searches one parameter; pass one --vary, or use powell")
    refs = [parse_reference(r, evaluation.k, evaluation.log_n) for r in reference or []]
    make_spec(method, fixed)  # a fixed value outside the domain fails before the model loads
    session, lengths, geom = _open(model, data, evaluation, output, prompts, objective, export_config)
    dims = parse_vary(vary, method, geom)  # default bounds from the model's geometry (critical: 1 … d/2)
    held = session.held_out(held_out)  # splits the documents: the searched windows are checked again
    for n, s in ((n, s) for n in lengths for s in (session, held)):  # too little text fails before any forward pass
        s.ev.check_inputs("passkey" if objective == "passkey" else "ppl", n)
    out = run_search(session.run, held.run, geom, method, dims, fixed, lengths, budget=budget, optimizer=optimizer,
                     objective=objective, log_n=evaluation.log_n, factor=evaluation.k,
                     max_short_regression=max_short_regression, max_short_kl=max_short_kl, references=refs,
                     windows=session.inputs.samples, screen=not no_race)
    out = {**session.header(), **out, "held_out_windows": held.inputs.samples, "held_out_first_window": held.inputs.first_window_at(max(lengths)),
           "held_out_split": held.inputs.split_note(max(lengths)),
           "screened": not no_race, **session.tally(held)}

    def plot(path):
        from ropecli.report.result_plots import plot_param_search

        plot_param_search(out, path, f"search {method} on {session.rope.name}: lengths {', '.join(map(str, lengths))}")

    _deliver(session, out, (method, {**fixed, **out["best_params"]}), geom, evaluation, output, export_config, plot)
    if output.as_json:
        return emit_json(out)
    print_param_search(out, lengths)


def print_param_search(out: dict, lengths: list[int]) -> None:
    from rich.table import Table
    from ropecli.evaluation.stats import fmt_diff
    from ropecli.tuning.search import objective_text

    con = console()
    held = out["held_out"]
    con.print(f"[bold]verdict (held-out windows {out['held_out_first_window']}…"
              f"{out['held_out_first_window'] + out['held_out_windows'] - 1}; {out['held_out_split']}):[/] {held['verdict']}",
              highlight=False)
    names = [d["name"] for d in out["vary"]]
    t = Table(title=f"search {out['method']} over {', '.join(names)} ({out['optimizer']}, {out['search_evaluations']} of "
                    f"{out['budget']} evaluations) on windows 0…{out['samples'] - 1}; best 10 by objective")
    for n in names:
        t.add_column(n, justify="right")
    t.add_column("objective", justify="right")
    t.add_column("note")
    ranked = sorted(out["evaluations"], key=lambda e: (e.get("violates_guard", False), e["objective"]))
    for e in ranked[:10]:
        note = ("best" if e["params"] == out["best_params"] else "guard" if e.get("violates_guard")
                else "outside the method's domain" if e.get("infeasible") else
                "stopped early: a lower bound" if "stopped_early" in e else "")
        t.add_row(*[f"{e['params'][n]:.4g}" for n in names], objective_text(e), note,
                  style="bold green" if note == "best" else "")
    con.print(t)
    h = Table(title="Held-out windows: the winner and the standard methods (Δ: minus the winner, paired, ± 95% half-width)")
    h.add_column("schedule")
    if out["objective_name"] == "ppl":
        for n in lengths:
            h.add_column(f"PPL @ {n}", justify="right")
    h.add_column("objective", justify="right")
    h.add_column("Δ vs winner", justify="right")
    for r in sorted(held["rows"], key=lambda r: r["objective"]):
        cells = [_p(r["ppl"][str(n)]) for n in lengths] if out["objective_name"] == "ppl" else []
        diff = "winner" if r["role"] == "winner" else fmt_diff(r["vs_winner"])
        h.add_row(r["label"], *cells, f"{r['objective']:.4f}", diff, style="bold green" if r["role"] == "winner" else "")
    con.print(h)
    con.print(f"best {out['best_label']}: objective {out['best_objective']:.4f} on the searched windows; "
              f"{out['forward_passes']} forward passes, {out['cache']['hits']} cached results reused")
    if len(out["vary"]) == 1:
        d = out["vary"][0]
        print_one_dim_notes(con, out, d["name"], d["lo"], d["hi"], f"--vary {d['name']}=LO:HI")
