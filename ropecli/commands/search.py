"""`ropecli search-b`: golden-section search of the mixed exponent b on a real model, resumable."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Optional

import typer

from ropecli.cli_common import JsonOpt, emit_json, handle_errors
from ropecli.commands.evaluate import (AttnOpt, BaseOpt, CacheDirOpt, ChunkOpt, DataOpt, DeviceMapOpt, DeviceOpt, DOpt, DtypeOpt,
                                       GgufOpt, KOpt, LenOpt, LogNOpt, ModelOpt, NoCacheOpt, PlotOpt, RopeLayersOpt, SamplesOpt,
                                       ScoreLastOpt, SeedOpt, TextFieldOpt, TrainLenOpt, TrustOpt, header, load_for_eval,
                                       make_evaluator, run_grid, stderr_console)
from ropecli.errors import RopeCliError

REFERENCES = [("none", None), ("pi", None), ("ntk-fixed", None), ("mixed", 0.625)]


@handle_errors
def search_b(
    model: ModelOpt = None,
    length: LenOpt = None,
    k: KOpt = None,
    lo: Annotated[float, typer.Option("--lo", help="Lower end of b (0 = PI).")] = 0.0,
    hi: Annotated[float, typer.Option("--hi", help="Upper end of b (1 = NTK-fixed).")] = 1.0,
    tol: Annotated[float, typer.Option("--tol", help="Accuracy of the best b.")] = 0.01,
    log_n: LogNOpt = False,
    max_short_regression: Annotated[Optional[float], typer.Option(
        "--max-short-regression", help="Guard: PPL at the training length (with the target's k) may rise at most this many percent over none.")] = None,
    data: DataOpt = None,
    text_field: TextFieldOpt = "text",
    samples: SamplesOpt = 4,
    seed: SeedOpt = 0,
    gguf_file: GgufOpt = None,
    dtype: DtypeOpt = "auto",
    device: DeviceOpt = "auto",
    device_map: DeviceMapOpt = None,
    attn_implementation: AttnOpt = None,
    trust_remote_code: TrustOpt = False,
    d: DOpt = None,
    base: BaseOpt = None,
    train_len: TrainLenOpt = None,
    rope_layers: RopeLayersOpt = None,
    chunk_size: ChunkOpt = None,
    score_last: ScoreLastOpt = None,
    no_cache: NoCacheOpt = False,
    cache_dir: CacheDirOpt = None,
    plot: PlotOpt = None,
    export_config: Annotated[Optional[str], typer.Option("--export-config", help="Write the transformers rope_parameters block for the best b.")] = None,
    as_json: JsonOpt = False,
):
    """Search the exponent b of NTK-RoPE-mixed for the lowest perplexity at the target lengths.

    Objective: mean log-PPL over the lengths, on one fixed sample of documents. Every evaluation is
    cached at once; rerunning resumes where it stopped.

    Examples: ropecli search-b
              ropecli search-b --model meta-llama/Llama-2-7b-hf --len 8192 --len 16384 --export-config rope.json
    """
    from ropecli.evaluate import check_lengths, parse_spec
    from ropecli.search import check_range, golden_section, grid_evaluations

    check_range(lo, hi, tol)
    if k is not None and k < 1:
        raise RopeCliError(f"--k {k} must be >= 1")
    if max_short_regression is not None and max_short_regression < 0:
        raise RopeCliError("--max-short-regression is a percentage >= 0")
    if plot:
        from ropecli.plots import check_out

        check_out(plot)
    if export_config and not Path(export_config).resolve().parent.exists():
        raise RopeCliError(f"--export-config {export_config}: the folder does not exist")
    lm = load_for_eval(model, gguf_file, dtype, device, device_map, attn_implementation, trust_remote_code, d, base,
                       train_len, rope_layers, as_json)
    lengths = check_lengths(length or [8 * lm.train_len])
    err = stderr_console()
    if all(n <= lm.train_len for n in lengths) and k is None:
        err.print(f"[yellow]warning:[/] every --len is within the training length L={lm.train_len}: k = 1, nothing to extend; "
                  "every b gives the same perplexity")
    ev = make_evaluator(lm, data, text_field, samples, seed, chunk_size, score_last, no_cache, cache_dir)
    for n in lengths:
        ev.windows(n)
    guard_k = k if k is not None else max(1.0, max(lengths) / lm.train_len)
    guard = None
    if max_short_regression is not None:
        guard = {"len": lm.train_len, "factor": guard_k, "max_percent": max_short_regression,
                 "none_ppl": run_grid(ev, [parse_spec("none", None, False, None)], [lm.train_len], "guard: none @ L")[0]["ppl"]}

    evaluations: list[dict] = []

    def objective(b: float) -> float:
        spec = parse_spec("mixed", b, log_n, k)
        rows = run_grid(ev, [spec], lengths, f"b={b:.4f}")
        obj = float(sum(r["nll"] for r in rows) / len(rows))  # mean log-PPL
        entry = {"b": b, "objective": obj, "ppl": {str(r["len"]): r["ppl"] for r in rows},
                 "ppl_err": {str(r["len"]): r["ppl_err"] for r in rows}, "cached": all(r["cached"] for r in rows)}
        if guard:
            short = run_grid(ev, [parse_spec("mixed", b, log_n, guard_k)], [lm.train_len], f"guard b={b:.4f}")[0]
            rise = 100.0 * (short["ppl"] / guard["none_ppl"] - 1.0)
            entry["short_ppl"], entry["short_rise_percent"] = short["ppl"], rise
            if rise > max_short_regression:
                entry["violates_guard"] = True
                obj = math.inf
        evaluations.append(entry)
        return obj

    result = golden_section(objective, lo, hi, tol)
    references = reference_rows(ev, lengths, log_n, k, evaluations_by_b(evaluations))
    grid = grid_evaluations(lo, hi, tol)
    out = {
        **header(ev, lm), "lengths": lengths, "log_n": log_n, "factor": k, "lo": lo, "hi": hi, "tol": tol,
        "best_b": result.best_b, "best_objective": result.best_objective, "best_ppl": evaluations_by_b(evaluations)[result.best_b]["ppl"],
        "at_boundary": result.at_boundary, "non_unimodal_at": result.non_unimodal_at, "bracket": list(result.bracket),
        "evaluations": evaluations, "references": references, "guard": guard,
        "search_evaluations": len(evaluations), "grid_evaluations_same_accuracy": grid,
        "forward_passes": ev.forward_passes, "cache": {"hits": ev.cache.hits, "misses": ev.cache.misses, "rejected": ev.cache.rejected},
    }
    if export_config:
        out["export_config"] = write_export(export_config, lm, lengths, k, result.best_b, log_n)
    if plot:
        from ropecli.plots import plot_search

        plot_search(evaluations, references, result.best_b, plot,
                    f"search-b on {lm.name}: lengths {', '.join(map(str, lengths))}" + (" (log-n)" if log_n else ""))
        err.print(f"wrote {plot}")
    if as_json:
        return emit_json(out)
    print_search(out, lengths)


def evaluations_by_b(evaluations: list[dict]) -> dict[float, dict]:
    return {e["b"]: e for e in evaluations}


# b at which mixed *is* the reference method (b = 0: Lambda_m = k; b = 1: Lambda_m = k^(2m/d); both
# identities are tested in test_schedule_identities): an evaluated end of the range is reused instead of run again.
SAME_AS_MIXED = {"pi": 0.0, "ntk-fixed": 1.0}


def reference_rows(ev, lengths: list[int], log_n: bool, k: float | None, by_b: dict[float, dict]) -> list[dict]:
    """none, PI, NTK-fixed and b = 0.625 on the same documents; PI and NTK-fixed come from the
    search's b = 0 / b = 1 evaluations when the range includes them."""
    from ropecli.evaluate import parse_spec

    rows = []
    for name, b in REFERENCES:
        spec = parse_spec(name, b, log_n, k)
        same_b = SAME_AS_MIXED.get(name, b if name == "mixed" else None)
        if same_b in by_b:
            e = by_b[same_b]
            rows.append({"label": spec.label, "method": spec.method, "objective": e["objective"], "ppl": e["ppl"],
                         "same_as": f"mixed(b={same_b:g})"})
            continue
        res = run_grid(ev, [spec], lengths, f"reference {spec.label}")
        rows.append({"label": spec.label, "method": spec.method, "objective": sum(r["nll"] for r in res) / len(res),
                     "ppl": {str(r["len"]): r["ppl"] for r in res}})
    return rows


def write_export(path: str, lm, lengths: list[int], k: float | None, best_b: float, log_n: bool) -> dict:
    """transformers rope_parameters for mixed(best_b) at the longest length's k; with log-n, the
    constant attention factor sqrt(log_L(k*L)) that equals log-n's query scale at the target length."""
    from ropecli.factor_files import rope_parameters_block
    from ropecli.geometry import Geometry
    from ropecli.schedules import compute_schedule

    factor = k if k is not None else max(1.0, max(lengths) / lm.train_len)
    geom = Geometry(lm.rotary_dim, lm.base, lm.train_len, factor)
    sched = compute_schedule("mixed", geom, b=best_b)
    block = rope_parameters_block(geom, sched, partial_rotary_factor=_partial(lm))
    note = "mixed(b={:.6g}) as longrope long_factor; attention_factor 1".format(best_b)
    if log_n:
        att = math.sqrt(math.log(geom.target_len) / math.log(lm.train_len))
        block["rope_parameters"]["attention_factor"] = att
        note = (f"mixed(b={best_b:.6g}); attention_factor {att:.6f} = sqrt(log_L(k*L)) approximates the per-position "
                "log-n query scale by its value at the target length (transformers applies one constant to q and k)")
    if lm.layer_types:
        block = {"rope_parameters": {lt: (block["rope_parameters"] if lt in [s.layer_type for s in lm.slots] else "unchanged")
                                     for lt in lm.layer_types}, "max_position_embeddings": block["max_position_embeddings"]}
        note += "; per layer type: merge the scaled entries into your config's rope_parameters, keep the others"
    Path(path).write_text(json.dumps(block, indent=2) + "\n")
    stderr_console().print(f"wrote {path}: {note}")
    return {"path": path, "note": note}


def _partial(lm) -> float:
    from ropecli.model.rotary import rope_parameters, text_config

    cfg = text_config(lm.model)
    rp = rope_parameters(cfg, lm.slots[0].layer_type)
    return float(rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0)) or 1.0)


def print_search(out: dict, lengths: list[int]) -> None:
    from rich.table import Table

    from ropecli.cli_common import console

    con = console()
    t = Table(title=f"search-b on {out['model']} (L = {out['train_len']}), objective = mean log-PPL over lengths"
                    + (", with log-n" if out["log_n"] else ""))
    t.add_column("b", justify="right")
    for n in lengths:
        t.add_column(f"PPL @ {n}", justify="right")
    t.add_column("objective", justify="right")
    t.add_column("note")
    for e in sorted(out["evaluations"], key=lambda e: e["b"]):
        note = "best" if e["b"] == out["best_b"] else ""
        if e.get("violates_guard"):
            note = f"short PPL +{e['short_rise_percent']:.1f}% (guard)"
        style = "bold green" if e["b"] == out["best_b"] else ""
        t.add_row(f"{e['b']:.4f}", *[_p(e["ppl"][str(n)]) for n in lengths], f"{e['objective']:.4f}", note, style=style)
    con.print(t)
    r = Table(title="References on the same documents")
    r.add_column("method")
    for n in lengths:
        r.add_column(f"PPL @ {n}", justify="right")
    r.add_column("objective", justify="right")
    for ref in out["references"]:
        r.add_row(ref["label"], *[_p(ref["ppl"][str(n)]) for n in lengths], f"{ref['objective']:.4f}")
    con.print(r)
    best_ref = min(out["references"], key=lambda x: x["objective"])
    con.print(f"best b = [bold]{out['best_b']:.4f}[/] (±{out['tol']:g}), objective {out['best_objective']:.4f} vs best reference "
              f"{best_ref['label']} {best_ref['objective']:.4f}; {out['search_evaluations']} evaluations "
              f"(a uniform grid of the same accuracy needs {out['grid_evaluations_same_accuracy']}); "
              f"{out['forward_passes']} forward passes, {out['cache']['hits']} cached results reused")
    if out["at_boundary"]:
        end = out["lo"] if out["at_boundary"] == "lo" else out["hi"]
        con.print(f"[yellow]note:[/] the minimum sits at the boundary b = {end:g}"
                  + (" (PI)" if end == 0 else " (NTK-fixed)" if end == 1 else "") + "; widen --lo/--hi if the range allows")
    if out["non_unimodal_at"]:
        con.print(f"[yellow]warning:[/] the objective is not unimodal over the evaluated points (a bump at b = "
                  f"{', '.join(f'{b:.3f}' for b in out['non_unimodal_at'])}); the search may have missed a better valley")


def _p(x) -> str:
    return "inf" if x is None or x == math.inf else f"{x:.4g}"
