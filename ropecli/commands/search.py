"""`ropecli search-b`: golden-section search of the mixed exponent b on a real model, resumable.
The search itself (objective, guard, references) is `ropecli.search.search_b`; this parses and prints."""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer

from ropecli.cli_common import console, emit_json, handle_errors, stderr_console
from ropecli.errors import RopeCliError
from ropecli.options import OUTPUT, DataOptions, EvalOptions, ModelOptions, OutputOptions, PasskeyOptions, with_option_groups
from ropecli.session import check_plot_path, open_session

SEARCH = "Search"


@handle_errors
@with_option_groups
def search_b(
    model: ModelOptions,
    data: DataOptions,
    evaluation: EvalOptions,
    output: OutputOptions,
    lo: Annotated[float, typer.Option("--lo", min=0.0, max=1.0, rich_help_panel=SEARCH, help="Lower end of b (0 = PI).")] = 0.0,
    hi: Annotated[float, typer.Option("--hi", min=0.0, max=1.0, rich_help_panel=SEARCH, help="Upper end of b (1 = NTK-fixed).")] = 1.0,
    tol: Annotated[float, typer.Option("--tol", min=1e-6, rich_help_panel=SEARCH, help="Accuracy of the best b.")] = 0.01,
    max_short_regression: Annotated[Optional[float], typer.Option(
        "--max-short-regression", min=0.0, rich_help_panel=SEARCH,
        help="Guard: PPL at the training length (with the target's k) may rise at most this many percent over none.")] = None,
    max_short_kl: Annotated[Optional[float], typer.Option(
        "--max-short-kl", min=0.0, rich_help_panel=SEARCH,
        help="Guard: mean KL against the unscaled model at the training length (target's k) at most this, nats/token.")] = None,
    objective: Annotated[str, typer.Option(
        "--objective", rich_help_panel=SEARCH,
        help="ppl: mean log-PPL over the lengths; passkey: mean passkey answer NLL over the lengths.")] = "ppl",
    prompts: PasskeyOptions = None,
    export_config: Annotated[Optional[str], typer.Option(
        "--export-config", rich_help_panel=OUTPUT, help="Write the transformers rope_parameters block for the best b.")] = None,
):
    """Search the exponent b of NTK-RoPE-mixed for the lowest perplexity at the target lengths.

    Objective: mean log-PPL over the lengths (default 8·L), on one fixed sample of documents. Every
    evaluation is cached at once; rerunning resumes where it stopped.

    Examples: ropecli search-b
              ropecli search-b --model meta-llama/Llama-2-7b-hf --len 8192 --len 16384 --export-config rope.json
    """
    from ropecli.evaluate import check_lengths
    from ropecli.export import check_writable, write_hf_block
    from ropecli.geometry import default_factor
    from ropecli.search import OBJECTIVES, check_range, search_b as run_search
    from ropecli.specs import make_spec

    check_range(lo, hi, tol)
    if objective not in OBJECTIVES:
        raise RopeCliError(f"--objective {objective}: choose ppl or passkey")
    if objective == "passkey":
        prompts.parsed_depths(), prompts.checked_digits()
    check_plot_path(output.plot)
    if export_config:
        check_writable(export_config, "--export-config")
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if objective == "passkey" else None)
    lm = session.lm
    lengths = check_lengths(evaluation.length or [8 * lm.train_len])
    if all(n <= lm.train_len for n in lengths) and evaluation.k is None:
        stderr_console().print(f"[yellow]warning:[/] every --len is within the training length L={lm.train_len}: k = 1, "
                               "nothing to extend; every b gives the same perplexity")
    for n in lengths:  # too little text is an error before the first forward pass
        session.ev.check_inputs("passkey" if objective == "passkey" else "ppl", n)
    out = run_search(session.run, lm.train_len, lengths, lo=lo, hi=hi, tol=tol, log_n=evaluation.log_n,
                     factor=evaluation.k, max_short_regression=max_short_regression, max_short_kl=max_short_kl,
                     objective=objective)
    out = {**session.header(), **out, "forward_passes": session.forward_passes(), "cache": session.cache_stats()}
    if export_config and session.is_main:
        k = evaluation.k if evaluation.k is not None else default_factor(max(lengths), lm.train_len)
        best = make_spec("mixed", {"b": out["best_b"]}, log_n=evaluation.log_n)
        out["export_config"] = write_hf_block(export_config, lm, best, k)
        stderr_console().print(f"wrote {export_config}: {out['export_config']['note']}", highlight=False)
    if output.plot and session.is_main:
        from ropecli.plots import plot_search

        plot_search(out["evaluations"], out["references"], out["best_b"], output.plot, objective,
                    f"search-b on {lm.name}: lengths {', '.join(map(str, lengths))}" + (" (log-n)" if evaluation.log_n else ""))
        stderr_console().print(f"wrote {output.plot}")
    if output.as_json:
        return emit_json(out)
    print_search(out, lengths)


def print_search(out: dict, lengths: list[int]) -> None:
    from rich.table import Table

    from ropecli.stats import fmt_diff

    con = console()
    con.print(f"[bold]verdict:[/] {out['verdict']}", highlight=False)
    passkey = out["objective_name"] == "passkey"
    what = "mean passkey answer NLL over lengths" if passkey else "mean log-PPL over lengths"
    t = Table(title=f"search-b on {out['model']} (L = {out['train_len']}), objective = {what}"
                    + (", with log-n" if out["log_n"] else ""))
    t.add_column("b", justify="right")
    for n in lengths:
        t.add_column(f"{'passkey' if passkey else 'PPL'} @ {n}", justify="right")
    t.add_column("objective", justify="right")
    t.add_column("Δ vs best (paired)", justify="right")
    t.add_column("note")
    for e in sorted(out["evaluations"], key=lambda e: e["b"]):
        note = "best" if e["b"] == out["best_b"] else ("≈ best" if e["vs_best"]["tied"] else "")
        if e.get("violates_guard"):
            note = "guard: " + ", ".join(x for x in [
                f"short PPL +{e['short_rise_percent']:.1f}%" if "short_rise_percent" in e else "",
                f"short KL {e['short_kl']:.4f}" if "short_kl" in e else ""] if x)
        style = "bold green" if e["b"] == out["best_b"] else ""
        t.add_row(f"{e['b']:.4f}", *_cells(e, lengths, passkey), f"{e['objective']:.4f}", fmt_diff(e["vs_best"]), note, style=style)
    con.print(t)
    r = Table(title="References on the same documents (Δ: minus the best b, paired over windows, ± std. error)")
    r.add_column("method")
    for n in lengths:
        r.add_column(f"{'passkey' if passkey else 'PPL'} @ {n}", justify="right")
    r.add_column("objective", justify="right")
    r.add_column("Δ vs best b", justify="right")
    r.add_column("verdict")
    for ref in sorted(out["references"], key=lambda x: x["objective"]):
        d = ref["vs_best_b"]
        v = "beats best b" if d["beats_best_b"] else ("≈ best b" if not d["distinguishable"] else "worse")
        r.add_row(ref["label"], *_cells(ref, lengths, passkey), f"{ref['objective']:.4f}", fmt_diff(d), v)
    con.print(r)
    lo_b, hi_b = out["equivalent_b"]
    con.print(f"best b = [bold]{out['best_b']:.4f}[/] (±{out['tol']:g}), objective {out['best_objective']:.4f}; b in "
              f"[{lo_b:.4f}, {hi_b:.4f}] is not distinguishable from it (paired 95%, evaluated points); "
              f"{out['search_evaluations']} evaluations (a uniform grid of the same accuracy needs "
              f"{out['grid_evaluations_same_accuracy']}); {out['forward_passes']} forward passes, "
              f"{out['cache']['hits']} cached results reused")
    if out["at_boundary"]:
        end = out["lo"] if out["at_boundary"] == "lo" else out["hi"]
        con.print(f"[yellow]note:[/] the minimum sits at the boundary b = {end:g}"
                  + (" (PI)" if end == 0 else " (NTK-fixed)" if end == 1 else "") + "; widen --lo/--hi if the range allows")
    if out["non_unimodal_at"]:
        con.print(f"[yellow]warning:[/] the objective is not unimodal over the evaluated points (a bump at b = "
                  f"{', '.join(f'{b:.3f}' for b in out['non_unimodal_at'])}); the search may have missed a better valley")


def _cells(e: dict, lengths: list[int], passkey: bool) -> list[str]:
    if passkey:
        return [f"{e['accuracy'][str(n)]:.0%} / {e['answer_nll'][str(n)]:.2f}" for n in lengths]
    return [_p(e["ppl"][str(n)]) for n in lengths]


def _p(x) -> str:
    return "inf" if x is None or x == math.inf else f"{x:.4g}"


@handle_errors
@with_option_groups
def search(
    model: ModelOptions,
    data: DataOptions,
    evaluation: EvalOptions,
    output: OutputOptions,
    method: Annotated[str, typer.Option("--method", "-m", rich_help_panel=SEARCH, help="The registry method to tune.")] = "mixed",
    vary: Annotated[Optional[list[str]], typer.Option(
        "--vary", rich_help_panel=SEARCH,
        help="A parameter to search, NAME or NAME=LO:HI (repeatable), e.g. --vary b --vary critical=4:32.")] = None,
    param: Annotated[Optional[list[str]], typer.Option(
        "--param", rich_help_panel=SEARCH, help="A parameter held fixed, KEY=VALUE (repeatable).")] = None,
    budget: Annotated[int, typer.Option("--budget", rich_help_panel=SEARCH, help="Most evaluations the search may spend.")] = 30,
    optimizer: Annotated[str, typer.Option(
        "--optimizer", rich_help_panel=SEARCH,
        help="auto (golden-section for 1 parameter, Powell for more), powell, nelder-mead, grid, golden.")] = "auto",
    held_out: Annotated[Optional[int], typer.Option(
        "--held-out", min=1, rich_help_panel=SEARCH,
        help="Held-out windows for the verdict, after the searched ones (default: as many as --samples).")] = None,
    reference: Annotated[Optional[list[str]], typer.Option(
        "--reference", rich_help_panel=SEARCH,
        help="Another schedule for the held-out verdict, METHOD[:KEY=VALUE,...] (repeatable), e.g. mixed:b=0.95.")] = None,
    objective: Annotated[str, typer.Option("--objective", rich_help_panel=SEARCH, help="ppl or passkey (as search-b).")] = "ppl",
    max_short_regression: Annotated[Optional[float], typer.Option(
        "--max-short-regression", min=0.0, rich_help_panel=SEARCH, help="Guard: PPL rise at L, percent (as search-b).")] = None,
    max_short_kl: Annotated[Optional[float], typer.Option(
        "--max-short-kl", min=0.0, rich_help_panel=SEARCH, help="Guard: mean KL at L, nats/token (as search-b).")] = None,
    prompts: PasskeyOptions = None,
    export_config: Annotated[Optional[str], typer.Option(
        "--export-config", rich_help_panel=OUTPUT, help="Write the transformers rope_parameters block of the winner.")] = None,
):
    """Search the continuous parameters of any method within a budget; verdict on held-out windows.

    The searched windows are the first --samples of the seeded sample; the winner and the standard
    methods (none, PI, NTK-aware, NTK-fixed, dynamic, YaRN, llama3, mixed b=0.625) are then scored on
    the next --held-out windows, and compared there (paired 95%). Cached and resumable like search-b.

    Examples: ropecli search --method mixed --vary b --vary critical
              ropecli search --method yarn --vary beta_fast --vary beta_slow --budget 30
              ropecli search --model meta-llama/Llama-2-7b-hf --len 16384 --method llama3 --vary low_freq_factor --vary high_freq_factor
    """
    from ropecli.evaluate import check_lengths
    from ropecli.export import check_writable, write_hf_block
    from ropecli.geometry import Geometry, default_factor
    from ropecli.param_search import OPTIMIZERS, min_budget, parse_reference, parse_vary, run_search
    from ropecli.schedules import resolve_method
    from ropecli.search import OBJECTIVES
    from ropecli.session import Session
    from ropecli.specs import make_spec, parse_params

    if objective not in OBJECTIVES:
        raise RopeCliError(f"--objective {objective}: choose ppl or passkey")
    if optimizer not in OPTIMIZERS:
        raise RopeCliError(f"--optimizer {optimizer}: choose from {', '.join(OPTIMIZERS)}")
    method = resolve_method(method).name
    fixed = parse_params(param)
    # names, syntax and domains now (any d); critical's upper bound d/2 once the model's geometry is read
    dims = parse_vary(vary, method, Geometry(2_000_000, 1e4, 4096, 8.0))
    clash = [d.name for d in dims if d.name in fixed]
    if clash:
        raise RopeCliError(f"{clash[0]} is both varied (--vary) and fixed (--param); pass it once")
    if budget < min_budget(len(dims)):
        raise RopeCliError(f"--budget {budget} is below the minimum {min_budget(len(dims))} for {len(dims)} parameter(s)")
    refs = [parse_reference(r, evaluation.k, evaluation.log_n) for r in reference or []]
    make_spec(method, fixed)  # a fixed value outside the domain fails before the model loads
    if objective == "passkey":
        prompts.parsed_depths(), prompts.checked_digits()
    check_plot_path(output.plot)
    if export_config:
        check_writable(export_config, "--export-config")
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if objective == "passkey" else None)
    lm = session.lm
    lengths = check_lengths(evaluation.length or [8 * lm.train_len])
    k = evaluation.k if evaluation.k is not None else default_factor(max(lengths), lm.train_len)
    geom = Geometry(lm.rotary_dim, lm.base, lm.train_len, k)
    dims = parse_vary(vary, method, geom)  # default bounds from the model's geometry (critical: 1 … d/2)
    held = Session(lm, session.ev.held_out(held_out or session.ev.samples))
    metric = "passkey" if objective == "passkey" else "ppl"
    for n in lengths:  # too little text, for the searched or the held-out windows, fails before any forward pass
        session.ev.check_inputs(metric, n)
        held.ev.check_inputs(metric, n)
    out = run_search(session.run, held.run, geom, method, dims, fixed, lengths, budget=budget, optimizer=optimizer,
                     objective=objective, log_n=evaluation.log_n, factor=evaluation.k,
                     max_short_regression=max_short_regression, max_short_kl=max_short_kl, references=refs)
    out = {**session.header(), **out, "held_out_windows": held.ev.samples, "held_out_first_window": held.ev.first_window,
           "forward_passes": session.forward_passes() + held.forward_passes(), "cache": session.cache_stats()}
    winner = make_spec(method, {**fixed, **out["best_params"]}, log_n=evaluation.log_n)
    if export_config and session.is_main:
        out["export_config"] = write_hf_block(export_config, lm, winner, k)
        stderr_console().print(f"wrote {export_config}: {out['export_config']['note']}", highlight=False)
    if output.plot and session.is_main:
        from ropecli.plots import plot_param_search

        plot_param_search(out, output.plot, f"search {method} on {lm.name}: lengths {', '.join(map(str, lengths))}")
        stderr_console().print(f"wrote {output.plot}")
    if output.as_json:
        return emit_json(out)
    print_param_search(out, lengths)


def print_param_search(out: dict, lengths: list[int]) -> None:
    from rich.table import Table

    from ropecli.stats import fmt_diff

    con = console()
    held = out["held_out"]
    con.print(f"[bold]verdict (held-out windows {out['held_out_first_window']}…"
              f"{out['held_out_first_window'] + out['held_out_windows'] - 1}):[/] {held['verdict']}", highlight=False)
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
                else "outside the method's domain" if e.get("infeasible") else "")
        t.add_row(*[f"{e['params'][n]:.4g}" for n in names], f"{e['objective']:.4f}", note,
                  style="bold green" if note == "best" else "")
    con.print(t)
    h = Table(title="Held-out windows: the winner and the standard methods (Δ: minus the winner, paired, ± std. error)")
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
