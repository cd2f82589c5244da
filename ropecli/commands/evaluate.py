"""`ropecli ppl` and `ropecli compare`: perplexity of a real causal LM under schedules, at lengths."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import Annotated, Optional

import typer

from ropecli.cli_common import BOpt, FactorsOpt, JsonOpt, ParamOpt, emit_json, handle_errors, parse_params, split_methods
from ropecli.errors import RopeCliError

ModelOpt = Annotated[Optional[str], typer.Option("--model", help="HF hub id, local folder, or .gguf file (default: the built-in model).")]
GgufOpt = Annotated[Optional[str], typer.Option("--gguf-file", help="GGUF file name inside --model's folder or repo.")]
DtypeOpt = Annotated[str, typer.Option("--dtype", help="auto | bf16 | fp16 | fp32 (auto: fp32 on CPU, bf16 on CUDA).")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto | cpu | cuda | cuda:N.")]
DeviceMapOpt = Annotated[Optional[str], typer.Option("--device-map", help="accelerate device map, e.g. auto (models larger than one GPU).")]
AttnOpt = Annotated[Optional[str], typer.Option("--attn-implementation", help="eager | sdpa | flash_attention_2 …")]
TrustOpt = Annotated[bool, typer.Option("--trust-remote-code", help="Allow the model repo's own code (off by default).")]
LenOpt = Annotated[Optional[list[int]], typer.Option("--len", help="Evaluation length in tokens (repeatable).")]
KOpt = Annotated[Optional[float], typer.Option("--k", "--factor", help="Fixed extension factor (default: len / L per length, at least 1).")]
LogNOpt = Annotated[bool, typer.Option("--log-n", help="Scale queries at position n by max(1, log_L n) (seed 003).")]
DataOpt = Annotated[Optional[list[str]], typer.Option("--data", help="Text file, folder, .jsonl, or hf:DATASET (default: held-out Shakespeare).")]
TextFieldOpt = Annotated[str, typer.Option("--text-field", help="JSONL / dataset field holding the text.")]
SamplesOpt = Annotated[int, typer.Option("--samples", help="Windows per length (documents, YaRN-style).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the document sampling.")]
ChunkOpt = Annotated[Optional[int], typer.Option("--chunk-size", help="Tokens per lm_head/cross-entropy chunk (default: 256 MiB of logits).")]
ScoreLastOpt = Annotated[Optional[int], typer.Option("--score-last", help="Score only the last N tokens of each window.")]
TrainLenOpt = Annotated[Optional[int], typer.Option("--train-len", "-L", help="Override the training length read from the config.")]
BaseOpt = Annotated[Optional[float], typer.Option("--base", help="Override the RoPE base read from the config.")]
DOpt = Annotated[Optional[int], typer.Option("--d", "--head-dim", help="Check the rotary dim read from the model.")]
RopeLayersOpt = Annotated[Optional[str], typer.Option("--rope-layers", help="Models with RoPE per layer type (Gemma 3): which to scale (default full_attention; 'all').")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the evaluation cache.")]
CacheDirOpt = Annotated[Optional[str], typer.Option("--cache-dir", help="Evaluation cache folder (default ~/.cache/ropecli or $ROPECLI_CACHE_DIR).")]
PlotOpt = Annotated[Optional[str], typer.Option("--plot", help="Write a PNG/SVG/PDF picture of the results.")]


def stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def load_for_eval(model, gguf_file, dtype, device, device_map, attn_implementation, trust_remote_code, d, base, train_len,
                  rope_layers, quiet):
    from ropecli.model.load import load_model

    err = stderr_console()
    with err.status(f"loading {model or 'the built-in model'} …", spinner="dots") if not quiet else nullcontext():
        lm = load_model(model, gguf_file=gguf_file, dtype=dtype, device=device, device_map=device_map,
                        attn_implementation=attn_implementation, trust_remote_code=trust_remote_code,
                        rotary_dim=d, base=base, train_len=train_len, rope_layers=rope_layers)
    err.print(f"model {lm.describe()}")
    return lm


def make_evaluator(lm, data, text_field, samples, seed, chunk_size, score_last, no_cache, cache_dir):
    from ropecli.cache import EvalCache
    from ropecli.evaluate import Evaluator

    if chunk_size is not None and chunk_size < 1:
        raise RopeCliError("--chunk-size must be at least 1 token")
    ev = Evaluator(lm, data=data, samples=samples, seed=seed, text_field=text_field, chunk_tokens=chunk_size,
                   score_last=score_last, cache=EvalCache(cache_dir, enabled=not no_cache))
    stderr_console().print(f"data {ev.data_label}; {samples} window(s) per length, seed {seed}")
    return ev


def run_grid(ev, specs, lengths, description="evaluating") -> list[dict]:
    """Every (spec, length), with one rich progress bar (ETA) over all windows; cached ones are instant."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    for n in lengths:  # fail on too little text before any forward pass
        ev.windows(n)
        if ev.score_last and ev.score_last >= n:
            raise RopeCliError(f"--score-last {ev.score_last} must be below --len {n}")
    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("ETA"), TimeRemainingColumn(), console=stderr_console(), transient=not sys.stderr.isatty()) as bar:
        task = bar.add_task(description, total=len(specs) * len(lengths) * ev.samples)
        for spec in specs:
            for n in lengths:
                bar.update(task, description=f"{spec.label} @ {n}")
                results.append(ev.evaluate(spec, n, on_window=lambda: bar.advance(task)))
    return results


def header(ev, lm) -> dict:
    return {"model": lm.name, "model_fingerprint": lm.fingerprint, "rotary_dim": lm.rotary_dim, "base": lm.base,
            "train_len": lm.train_len, "dtype": lm.dtype, "device": lm.device, "data": ev.data_label,
            "samples": ev.samples, "seed": ev.seed, "score_last": ev.score_last}


def fmt_ppl(r: dict) -> str:
    if r["ppl"] == float("inf"):
        return "inf"
    err = f" ± {r['ppl_err']:.3g}" if r.get("ppl_err") else ""
    return f"{r['ppl']:.4g}{err}"


@handle_errors
def ppl(
    model: ModelOpt = None,
    length: LenOpt = None,
    method: Annotated[str, typer.Option("--method", "-m", help="Scaling method (see `ropecli methods`).")] = "mixed",
    b: BOpt = None,
    k: KOpt = None,
    log_n: LogNOpt = False,
    param: ParamOpt = None,
    factors: FactorsOpt = None,
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
    as_json: JsonOpt = False,
):
    """Perplexity of a model under one schedule at one or more lengths.

    Examples: ropecli ppl --len 256 --len 2048 --method mixed --b 0.625
              ropecli ppl --model meta-llama/Llama-2-7b-hf --len 4096 --len 8192 --method mixed --log-n
    """
    from ropecli.evaluate import check_lengths, parse_spec

    lengths = check_lengths(length or [])
    if k is not None and k < 1:
        raise RopeCliError(f"--k {k} must be >= 1")
    factor_values = _read_factors(factors)
    spec = parse_spec(split_methods([method], "mixed")[0], b, log_n, k, parse_params(param), factor_values)
    _check_spec_params(spec, b, param, factors)
    lm = load_for_eval(model, gguf_file, dtype, device, device_map, attn_implementation, trust_remote_code, d, base,
                       train_len, rope_layers, as_json)
    ev = make_evaluator(lm, data, text_field, samples, seed, chunk_size, score_last, no_cache, cache_dir)
    results = run_grid(ev, [spec], lengths)
    if as_json:
        return emit_json({**header(ev, lm), "results": results})
    _print_results(lm, results, f"{spec.label} on {lm.name}")


def _read_factors(path):
    if not path:
        return None
    from ropecli.factor_files import read_factors

    return read_factors(path)


def _check_spec_params(spec, b, param, factors):
    from ropecli.cli_common import check_params_fit
    from ropecli.schedules import resolve_method

    check_params_fit([resolve_method(spec.method)],
                     (["b"] if b is not None else []) + list(parse_params(param)) + (["factors"] if factors else []))


def _print_results(lm, results, title):
    from rich.table import Table

    from ropecli.cli_common import console

    t = Table(title=title)
    for col in ["method", "len", "k", "PPL", "NLL/token", "tokens", "cached"]:
        t.add_column(col, justify="left" if col == "method" else "right")
    for r in results:
        t.add_row(r["label"], str(r["len"]), f"{r['factor']:g}", fmt_ppl(r), f"{r['nll']:.4f}", str(r["tokens"]),
                  "yes" if r.get("cached") else "")
    console().print(t)


@handle_errors
def compare(
    model: ModelOpt = None,
    length: LenOpt = None,
    methods: Annotated[Optional[str], typer.Option("--methods", help="Comma list of methods (mixed uses --b; repeat --b for several).")] = "none,pi,ntk-old,ntk-fixed,mixed",
    b: Annotated[Optional[list[float]], typer.Option("--b", help="b for mixed (repeatable).")] = None,
    k: KOpt = None,
    log_n: LogNOpt = False,
    both_log_n: Annotated[bool, typer.Option("--with-and-without-log-n", help="Evaluate every method with and without log-n.")] = False,
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
    as_json: JsonOpt = False,
):
    """The seed's table: methods x lengths of perplexity, on the same documents.

    Examples: ropecli compare --len 256 --len 2048
              ropecli compare --model meta-llama/Llama-2-7b-hf --len 4096 --len 16384 --methods none,pi,ntk-fixed,mixed --log-n --plot ppl.png
    """
    from ropecli.evaluate import check_lengths, parse_spec
    from ropecli.schedules import resolve_method

    lengths = check_lengths(length or [])
    if k is not None and k < 1:
        raise RopeCliError(f"--k {k} must be >= 1")
    if plot:
        from ropecli.plots import check_out

        check_out(plot)
    names = split_methods([methods or ""], "mixed")
    log_modes = [False, True] if both_log_n else [log_n]
    specs = []
    for name in names:
        takes_b = any(p.name == "b" for p in resolve_method(name).params)
        for bv in (b or [None]) if takes_b else [None]:
            for ln in log_modes:
                specs.append(parse_spec(name, bv, ln, k))
    if b and not any(any(p.name == "b" for p in resolve_method(n).params) for n in names):
        raise RopeCliError("--b applies to the mixed method; add mixed to --methods")
    lm = load_for_eval(model, gguf_file, dtype, device, device_map, attn_implementation, trust_remote_code, d, base,
                       train_len, rope_layers, as_json)
    ev = make_evaluator(lm, data, text_field, samples, seed, chunk_size, score_last, no_cache, cache_dir)
    results = run_grid(ev, specs, lengths)
    if plot:
        from ropecli.plots import plot_ppl_vs_length

        plot_ppl_vs_length(results, plot, f"Perplexity vs length: {lm.name} (L = {lm.train_len})")
        stderr_console().print(f"wrote {plot}")
    if as_json:
        return emit_json({**header(ev, lm), "results": results})
    from rich.table import Table

    from ropecli.cli_common import console

    t = Table(title=f"PPL on {lm.name} (L = {lm.train_len}); {ev.samples} windows per length; ± = std. error across windows")
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
