"""`ropecli verify PATH`: check what `ropecli export` (or `advise`) wrote against what ropecli measured.
The work is `ropecli.export.readback` (what the runtime applies) and `ropecli.export.verify` (the checks)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import console, stderr_console
from ropecli.cli.groups import GeometryOptions, ScheduleOptions, with_option_groups
from ropecli.cli.options import EVALUATION, OUTPUT, SCHEDULE, CacheDirOpt, ExportLenOpt, JsonOpt, LogNOpt
from ropecli.errors import RopeCliError

RUNTIME_NAMES = {"hf": "transformers", "vllm": "vllm", "gguf": "llama.cpp"}


class Artefact(str, Enum):
    hf = "hf"
    vllm = "vllm"
    gguf = "gguf"


@handle_errors
@with_option_groups
def verify(
    path: Annotated[str, typer.Argument(help="What export wrote: a transformers folder, a .json block / vLLM overrides, or a .gguf.")],
    geometry: GeometryOptions,
    schedule: ScheduleOptions,
    log_n: LogNOpt = False,
    length: ExportLenOpt = None,
    advice: Annotated[Optional[str], typer.Option(
        "--advice", rich_help_panel=SCHEDULE,
        help="advise's advice.json (default: the one beside PATH, if any); else give --method and --len.")] = None,
    runtime: Annotated[Optional[Artefact], typer.Option(
        "--runtime", rich_help_panel=OUTPUT, help="Which runtime reads PATH: hf, vllm or gguf (default: from the file).")] = None,
    run: Annotated[bool, typer.Option("--run/--no-run", rich_help_panel=EVALUATION,
                                      help="Also run the runtime where it is installed (transformers: reload and score a window).")] = True,
    run_len: Annotated[Optional[int], typer.Option("--run-len", min=2, rich_help_panel=EVALUATION,
                                                   help="Tokens of the window the run scores (default: the target length).")] = None,
    cache_dir: CacheDirOpt = None,
    as_json: JsonOpt = False,
):
    """Read an exported artefact back, rebuild what its runtime applies at the target length, and compare.

    Examples: ropecli verify advise-out/hf          (advice.json beside it says what was measured)
              ropecli verify overrides.json --model meta-llama/Llama-2-7b-hf --method yarn --len 32768
              ropecli verify model-32k.gguf --model model.gguf --method mixed --b 0.75 --len 32768
    """
    from ropecli.export.readback import kind_of, read_json
    from ropecli.export.plan import manifest_path
    from ropecli.export.verify import Verdict, compare, expected_from_advice, expected_from_export

    target = Path(path)
    if not target.exists():
        raise RopeCliError(f"{path}: no such file or folder; pass what `ropecli export` wrote")
    kind = kind_of(target, runtime.value if runtime else None)
    flags_given = bool(schedule.method) or length is not None  # explicit flags win over an advice.json found beside PATH
    manifest = None if (advice or flags_given) else manifest_path(target)
    advice_path = Path(advice) if advice else (None if flags_given or manifest.is_file() else _advice_beside(target))
    model, gguf_file = geometry.model, geometry.gguf_file
    if manifest is not None and manifest.is_file():  # what `ropecli export` wrote beside PATH
        made = read_json(manifest)
        model, gguf_file = model or made.get("model") or None, gguf_file or made.get("gguf_file")
        exp = expected_from_export(made, manifest, _model_rope(model, gguf_file))
    elif advice_path is not None:
        adv = read_json(advice_path)
        model = model or adv.get("model") or None
        exp = expected_from_advice(adv, advice_path, _model_rope(model, gguf_file))
    else:
        exp = _expected_from_flags(target, kind, geometry, schedule, log_n, length)
    verdict = Verdict(RUNTIME_NAMES[kind])
    applied, block = _applied(target, kind, exp)
    verdict.checks += compare(applied, exp, verdict.runtime)
    if kind == "hf" and target.suffix == ".json" and runtime is None:
        verdict.notes.append("read as a transformers block (no vLLM mscale or ntk in it); a vLLM overrides file: --runtime vllm")
    if run:
        _run(verdict, kind, target, block, model, gguf_file, exp, run_len or exp.target_len, cache_dir)
    result = {"path": str(target), "runtime": verdict.runtime, "expected": exp.source, "ok": verdict.ok,
              "verdict": verdict.line(), "checks": [vars(c) for c in verdict.checks], "notes": verdict.notes}
    if as_json:
        emit_json(result)
    else:
        _print(verdict, exp, target)
    if not verdict.ok:
        raise typer.Exit(1)


def _run(verdict, kind: str, target: Path, block, model, gguf_file, exp, run_len: int, cache_dir) -> None:
    """The runtime itself, where ropecli can run it; otherwise a note saying why not."""
    from ropecli.export.verify import run_llamacpp, run_skipped, run_transformers

    if kind == "vllm":
        verdict.notes.append("not run: vLLM is not run by ropecli; the checks above follow vLLM's rotary code (cited in "
                             "ropecli/export/vllm.py)")
        return
    if model is None:
        verdict.notes.append("not run: the run compares with the model the export was made from: pass --model")
        return
    consistent = kind == "gguf" or _consistent(target, block)
    why = run_skipped(exp, run_len, consistent)
    if why:
        verdict.notes.append(why)
        return
    if kind == "hf":
        with stderr_console().status("transformers: reloading the export and scoring a window …"):
            verdict.checks.append(run_transformers(target, block, model, exp, run_len, cache_dir, gguf_file))
        return
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        verdict.notes.append("not run: llama-cpp-python is not installed (pip install 'ropecli[llamacpp]')")
        return
    with stderr_console().status("llama.cpp: scoring a window with the export and the source …"):
        verdict.checks.append(run_llamacpp(target, model, exp, run_len, cache_dir, gguf_file))


def _consistent(target: Path, block) -> bool:
    """True when the export's short_factor equals its long_factor (--consistent): scaled at every length."""
    from ropecli.export.readback import read_json, rope_blocks

    cfg = block or read_json(target / "config.json")
    text = cfg.get("text_config") or cfg
    blocks = rope_blocks(text.get("rope_parameters") or {}).values()
    return all(b.get("short_factor") == b.get("long_factor") for b in blocks if b.get("rope_type") == "longrope")


def _model_rope(model: str | None, gguf_file: str | None):
    """The geometry of `model` from its config, or None where it cannot be read (verify then uses advice.json's)."""
    if model is None:
        return None
    from ropecli.models.config import read_rope_config

    try:
        return read_rope_config(model, gguf_file)
    except RopeCliError:
        return None


def _advice_beside(target: Path) -> Path | None:
    folder = target if target.is_dir() else target.parent
    for candidate in (folder / "advice.json", folder.parent / "advice.json"):
        if candidate.is_file():
            return candidate
    return None


def _applied(target: Path, kind: str, exp):
    """(list of Applied, the block for a .json artefact or None); a malformed artefact fails in one line."""
    from ropecli.export.readback import UNREADABLE, unreadable

    try:
        return _read_back(target, kind, exp)
    except UNREADABLE as exc:
        raise unreadable(target, exc) from None


def _read_back(target: Path, kind: str, exp):
    from ropecli.export.readback import gguf_applied, read_json, transformers_applied, vllm_applied

    T = exp.target_len
    if kind == "gguf":
        return gguf_applied(target, T), None
    if target.is_dir():
        return transformers_applied(read_json(target / "config.json"), T, exp.rope.scaled_types), None
    block = read_json(target)
    if "rope_parameters" not in block:
        raise RopeCliError(f"{target}: no rope_parameters in it; pass a block written by `ropecli export`")
    head_dim = int(round(exp.rope.rotary_dim / exp.rope.partial_rotary_factor))
    if kind == "vllm":
        return vllm_applied(block, T, head_dim), block
    return transformers_applied(block, T, exp.rope.scaled_types, head_dim=head_dim), block


def _expected_from_flags(target: Path, kind: str, geometry, schedule, log_n: bool, length: int | None):
    """The schedule from --method/--b/--param at --len on the geometry of --model (or --d/--base/--train-len,
    or, lacking those, what the artefact states)."""
    from ropecli.cli.flags import geometry_from_flags, specs_from_flags
    from ropecli.export.verify import Expected

    if length is None and geometry.target_len is None and geometry.k is None:
        raise RopeCliError("verify needs what was measured: --advice advice.json, or --method … with --len TARGET")
    if not schedule.method:
        raise RopeCliError("verify needs the schedule that was measured: --method (and --b / --param), or --advice advice.json")
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors, default="mixed", log_n_modes=(log_n,))
    if len(specs) != 1:
        raise RopeCliError("verify checks one schedule: one --method, at most one --b")
    d, base, L = geometry.d, geometry.base, geometry.train_len
    if geometry.model is None and None in (d, base, L):  # the artefact's own geometry fills the gaps (said in the output)
        from ropecli.export.readback import UNREADABLE, unreadable

        try:
            d, base, L = _artefact_geometry(target, kind, d, base, L)
        except UNREADABLE as exc:
            raise unreadable(target, exc) from None
    geom, rope = geometry_from_flags(d, base, L, geometry.k, length or geometry.target_len, geometry.model,
                                     geometry.gguf_file, geometry.rope_layers)
    from ropecli.models.config import ModelRope

    rope = rope or ModelRope("", geom.rotary_dim, geom.base, geom.train_len)
    src = f"--model {geometry.model}" if geometry.model else "the flags and the artefact's own d, base, L"
    return Expected(specs[0], rope, geom.factor, geom.target_len, f"{specs[0].label} at k = {geom.factor:g} on {src}")


def _artefact_geometry(target: Path, kind: str, d, base, L):
    from ropecli.export.readback import gguf_applied, read_json

    if kind == "gguf":
        a = gguf_applied(target, 1)[0]
        if a.factors is None and d is None:
            raise RopeCliError(f"{target}: its rotary dim cannot be read from it; pass --d or --model")
        return d or 2 * len(a.factors), base or a.rope_theta, L or a.train_len
    cfg = read_json(target / "config.json" if target.is_dir() else target)
    text = cfg.get("text_config") or cfg
    rp = text.get("rope_parameters") or {}
    rp = rp if "rope_type" in rp else next((v for v in rp.values() if isinstance(v, dict)), {})
    n = len(rp.get("long_factor") or [])
    head = text.get("head_dim") or (text.get("hidden_size", 0) // max(1, text.get("num_attention_heads", 1)))
    found_d = 2 * n or int(head * rp.get("partial_rotary_factor", 1.0)) or None
    if d is None and found_d is None:
        raise RopeCliError(f"{target}: the rotary dim cannot be read from it; pass --d or --model")
    return d or found_d, base or rp.get("rope_theta"), L or rp.get("original_max_position_embeddings")


def _print(verdict, exp, target: Path) -> None:
    from rich.table import Table

    con = console()
    t = Table(title=f"verify {target} for {verdict.runtime} against {exp.source}", title_justify="left")
    for col in ("layer type", "check", "expected", "found", "ok"):
        t.add_column(col)
    from rich.markup import escape

    for c in verdict.checks:
        t.add_row(c.layer_type or "", escape(c.what), escape(c.expected), escape(c.found), "[green]yes[/]" if c.ok else "[red]NO[/]")
    con.print(t)
    for note in verdict.notes:
        con.print(note, highlight=False, markup=False, soft_wrap=True)
    con.print(verdict.line(), highlight=False, markup=False, soft_wrap=True)
