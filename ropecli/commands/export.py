"""`ropecli export`: a chosen schedule, ready for transformers, vLLM or llama.cpp / Ollama.
The writing is `ropecli.export`; this parses, checks every path first, and says what each runtime will do."""

from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from ropecli.cli_common import console, emit_json, geometry_of, handle_errors
from ropecli.errors import RopeCliError
from ropecli.options import (OUTPUT, SCHEDULE, GeometryOptions, JsonOpt, LogNOpt, ScheduleOptions,
                             with_option_groups)


class Runtime(str, Enum):
    hf = "hf"
    vllm = "vllm"
    gguf = "gguf"


@handle_errors
@with_option_groups
def export(
    geometry: GeometryOptions,
    schedule: ScheduleOptions,
    log_n: LogNOpt = False,
    length: Annotated[Optional[int], typer.Option("--len", min=2, rich_help_panel=SCHEDULE,
                                                  help="Target context length (the same as --target-len).")] = None,
    to: Annotated[Runtime, typer.Option("--to", rich_help_panel=OUTPUT, help="hf (transformers), vllm, or gguf (llama.cpp / Ollama).")] = Runtime.hf,
    out: Annotated[Optional[str], typer.Option("--out", "-o", rich_help_panel=OUTPUT,
                                               help="hf: a folder (with a local --model) or a .json file; vllm: the overrides .json; gguf: the new .gguf.")] = None,
    consistent: Annotated[bool, typer.Option("--consistent", rich_help_panel=OUTPUT,
                                             help="short_factor = long_factor: every runtime applies the schedule at every length.")] = False,
    force: Annotated[bool, typer.Option("--force", rich_help_panel=OUTPUT, help="Overwrite an existing --out.")] = False,
    replace: Annotated[bool, typer.Option("--replace", rich_help_panel=OUTPUT, help="gguf: replace the rope_freqs / scaling the input already has.")] = False,
    as_json: JsonOpt = False,
):
    """Write a schedule where a runtime reads it: transformers config, vLLM overrides, or a GGUF with rope_freqs.

    Examples: ropecli export --model path/to/llama --method mixed --b 0.75 --len 32768 --to hf --out llama-32k
              ropecli export --model meta-llama/Llama-2-7b-hf --method yarn --len 32768 --to vllm --out overrides.json
              ropecli export --model model.gguf --method mixed --b 0.75 --len 32768 --to gguf --out model-32k.gguf
    """
    from ropecli.export import RUNTIME_BEHAVIOUR
    from ropecli.specs import specs_from_flags

    if length is not None:
        if geometry.target_len is not None and geometry.target_len != length:
            raise RopeCliError("--len and --target-len both give the target length; pass only one")
        geometry.target_len = length
    if geometry.k is None and geometry.target_len is None:
        raise RopeCliError("export needs the target: pass --len N (or --k); at k = 1 every schedule is the unscaled model")
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors, default="mixed",
                             log_n_modes=(log_n,))
    if len(specs) != 1:
        raise RopeCliError("export writes one schedule: one --method, at most one --b")
    spec = specs[0]
    runtime = Runtime(to).value
    if runtime == "gguf":
        result = _to_gguf(geometry, spec, out, force, replace)
    else:
        result = _to_hf_or_vllm(geometry, spec, runtime, out, force, consistent)
    short = 1 if consistent else 0
    result["runtimes"] = {name: both[short] for name, both in RUNTIME_BEHAVIOUR.items()}
    result["consistent"] = consistent
    if as_json:
        return emit_json(result)
    con = console()
    for line in result["lines"]:
        con.print(line, highlight=False, soft_wrap=True)
    con.print("What each runtime does with it:", highlight=False)
    for name, what in result["runtimes"].items():
        con.print(f"  {name}: {what}", highlight=False, soft_wrap=True)
    if not consistent:
        con.print("  (--consistent writes short_factor = long_factor, so that all three apply the schedule at every length)",
                  highlight=False, soft_wrap=True)


def _to_hf_or_vllm(geometry: GeometryOptions, spec, runtime: str, out: str | None, force: bool, consistent: bool) -> dict:
    from ropecli.export import (check_writable, export_hf_config, export_hf_folder, for_vllm, rope_block, target_of,
                                vllm_command, write_json)

    model = geometry.model
    folder = Path(model) if model and Path(model).is_dir() and not geometry.gguf_file else None
    gguf_in = bool(model and (model.endswith(".gguf") or geometry.gguf_file))
    to_folder = runtime == "hf" and out is not None and not out.endswith(".json")
    if gguf_in and not to_folder:
        raise RopeCliError(f"a GGUF model goes to llama.cpp with --to gguf, or to a transformers folder with --to hf --out DIR "
                           f"(then --to {runtime} from that folder)")
    if to_folder and folder is None and model is None:
        raise RopeCliError("--to hf --out DIR writes a model folder and needs --model (a local folder or hub id); "
                           "without a model pass --out FILE.json")
    if out is not None and not to_folder:
        if not out.endswith(".json"):
            raise RopeCliError(f"--out {out}: the overrides are JSON; write e.g. --out overrides.json")
        check_writable(out, "--out", force)
    if to_folder:
        check_writable(out.rstrip("/"), "--out", force=True)
    geom, rope = geometry_of(geometry)
    target = target_of(geom, rope, geometry.rope_layers, base_given=geometry.base is not None)
    block, note = rope_block(target, spec, geom.factor, consistent)
    if runtime == "vllm":
        block = for_vllm(block)
        note += "; short_mscale = long_mscale = attention_factor (vLLM's longrope reads those)"
        if target.partial_rotary_factor != 1.0:
            note += "; note: vLLM's longrope needs rotary_dim = head_dim, this model has partial rotary"
    result = {"runtime": runtime, "model": model, "factor": geom.factor, "target_len": geom.target_len, "note": note,
              "block": block, "lines": [note]}
    if runtime == "vllm":
        cmd = vllm_command(model or "MODEL", block)
        result["command"] = cmd
        result["lines"].append(cmd)
    if out is None:
        if runtime == "hf":
            result["lines"].insert(0, json.dumps(block, indent=2))
        return result
    if to_folder:
        if gguf_in:
            from ropecli.export import export_hf_from_gguf
            from ropecli.model_config import locate_file

            path = Path(model) if geometry.gguf_file is None else locate_file(model, Path(model), geometry.gguf_file)
            export_hf_from_gguf(path, Path(out), block, force)
            result["lines"].append(f"wrote {out}: {path.name} dequantized by transformers (safetensors, tokenizer) with the "
                                   f"block in its config.json: from_pretrained('{out}') needs no keyword arguments")
        elif folder is not None:
            linked = export_hf_folder(folder, Path(out), block, force)
            result["lines"].append(f"wrote {out}/config.json; linked {len(linked)} file(s) of {model} beside it "
                                   f"({', '.join(linked)}): from_pretrained('{out}') needs no keyword arguments")
            result["linked"] = linked
        else:  # a hub id: its config.json merged; the weights are the user's to place
            export_hf_config(model, Path(out), block, force)
            result["lines"].append(f"wrote {out}/config.json; place {model}'s other files beside it, e.g. "
                                   f"huggingface-cli download {model} --exclude config.json --local-dir {out}")
        result["path"] = out
        return result
    write_json(out, block)
    result["path"] = out
    result["lines"].append(f"wrote {out}")
    return result


def _to_gguf(geometry: GeometryOptions, spec, out: str | None, force: bool, replace: bool) -> dict:
    from ropecli.export import check_writable, export_gguf, read_gguf_input
    from ropecli.model_config import locate_file

    model = geometry.model
    if model is None or not (model.endswith(".gguf") or geometry.gguf_file):
        raise RopeCliError("--to gguf needs --model FILE.gguf (or --model DIR --gguf-file NAME), the GGUF to export into")
    if not out or not out.endswith(".gguf"):
        raise RopeCliError("--to gguf needs --out NEW.gguf")
    check_writable(out, "--out", force)
    path = Path(model) if geometry.gguf_file is None else locate_file(model, Path(model), geometry.gguf_file)
    if path.resolve() == Path(out).resolve():
        raise RopeCliError("--out is the input GGUF; write a new file")
    src, reader = read_gguf_input(path)
    if src.existing_factors is not None and not replace:
        shown = ", ".join(f"{x:.4g}" for x in src.existing_factors[:8]) + (" …" if len(src.existing_factors) > 8 else "")
        what = f"rope_freqs ({shown})" if src.existing_factors else "a llama.cpp rope scaling"
        raise RopeCliError(f"{path.name} already carries {what}; pass --replace to put ropecli's schedule in its place")
    geom, _ = geometry_of(geometry)
    sched = spec.schedule(geom)
    attention = sched.attention_factor
    if spec.log_n:  # llama.cpp scales cos/sin by one constant: log-n's query scale at the target length
        attention = math.sqrt(math.log(geom.target_len) / math.log(geom.train_len))
    written = export_gguf(reader, src, Path(out), sched.factors, attention, geom.train_len, geom.target_len)
    lines = [f"{spec.label} at k={geom.factor:g}: rope_freqs.weight ({geom.n_pairs} factors) and context length "
             f"{geom.target_len} written to {out} ({written['tensors']} tensors)",
             f"Ollama: a Modelfile with the lines `FROM ./{Path(out).name}` and `PARAMETER num_ctx {geom.target_len}`; "
             f"llama.cpp: llama-cli -m {out} -c {geom.target_len}"]
    if abs(attention - 1) > 1e-12:
        lines.append(f"attention factor {attention:.6g} written to {src.arch}.rope.scaling.attn_factor"
                     + (" (sqrt(log_L(k*L)): log-n's query scale at the target length, as one constant)" if spec.log_n else ""))
    return {"runtime": "gguf", "model": model, "factor": geom.factor, "target_len": geom.target_len,
            "factors": sched.factors, "attention_factor": attention, "lines": lines, **written}
