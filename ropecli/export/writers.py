"""The writers the runtime modules share (each runtime's `write` calls them; they sit below those modules, which import
them, never the other way): a transformers rope block as a JSON file or a model folder (`hf_result`, `write_block`;
transformers, vLLM, SGLang), the checkpoint vLLM serves for a GGUF, and a GGUF copy carrying the schedule (`to_gguf`;
llama.cpp, Ollama)."""

from __future__ import annotations

import math
from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.export.hf import rope_block, write_json
from ropecli.export.hf_folder import export_hf_config, export_hf_folder, export_hf_from_gguf
from ropecli.export.readback import UNREADABLE, unreadable
from ropecli.export.served_temperature import hf_temperature_keys
from ropecli.models.config import BUILTIN, BUILTIN_DIR, gguf_metadata, locate_file
from ropecli.models.gguf_rope import export_gguf, native_scaling, read_gguf_input
from ropecli.models.packaged import resolve_model


def is_gguf(model: str | None, gguf_file: str | None) -> bool:
    model = resolve_model(model)  # `smollm2` is a GGUF
    return bool(model and (model.endswith(".gguf") or gguf_file))



def gguf_origin(path: Path) -> str:
    """The transformers checkpoint a GGUF says it was converted from (llama.cpp's convert_hf_to_gguf writes
    general.source.huggingface.repository / general.base_model.0.repo_url), else a placeholder naming it."""
    meta = gguf_metadata(path)
    for key in ("general.source.huggingface.repository", "general.base_model.0.repo_url", "general.source.url"):
        if isinstance(meta.get(key), str) and meta[key]:
            return meta[key].removeprefix("https://huggingface.co/")
    name = meta.get("general.name") or path.stem
    return f"HF-CHECKPOINT-OF-{str(name).replace(' ', '-')}"


def model_folder(model: str) -> str:
    """Where a model's files are: the built-in model's folder for `builtin`, a packaged short name's, else `model`."""
    return str(BUILTIN_DIR) if model == BUILTIN else resolve_model(model)


def source_path(model: str, gguf_file: str | None) -> Path:
    """The model's file: a packaged short name resolved, a folder joined with --gguf-file."""
    model = resolve_model(model)
    return Path(model) if gguf_file is None else locate_file(model, Path(model), gguf_file)


def hf_result(spec, geom, rope, runtime: str, model, consistent) -> tuple[dict, dict]:
    """(the transformers rope_parameters block of `spec` at geom's k, the export's result so far) for a runtime that
    reads such a block (transformers, vLLM, SGLang; each runtime's writer adds its own part)."""
    block, note = rope_block(rope, spec, geom.factor, consistent)
    block = hf_temperature_keys(block, spec, rope)  # a changed position temperature's keys (Llama 4, Mistral 4)
    return block, {"runtime": runtime, "model": model, "factor": geom.factor, "target_len": geom.target_len, "note": note,
                   "block": block, "lines": [note]}


def write_block(result: dict, block: dict, out: str, model, gguf_file, force: bool, folder: bool) -> dict:
    """`block` written to `out`: a JSON file, or (`folder`, --out DIR) a transformers model folder: a local model's
    files beside its merged config.json, a GGUF dequantized by transformers, or a hub model's merged config.json."""
    result["path"] = out
    if not folder or out.endswith(".json"):
        write_json(out, block)
        result["lines"].append(f"wrote {out}")
    elif is_gguf(model, gguf_file):
        path = source_path(model, gguf_file)
        export_hf_from_gguf(path, Path(out), block, force)
        result["lines"].append(f"wrote {out}: {path.name} dequantized by transformers (safetensors, tokenizer) with the "
                               "block in its config.json")
        result["load"] = load_line(out)
    elif Path(model_folder(model)).is_dir():  # a folder, or a short name of ropecli's own (builtin, builtin-llama3)
        linked = export_hf_folder(Path(model_folder(model)), Path(out), block, force)
        result["lines"].append(f"wrote {out}/config.json and placed {len(linked)} file(s) of {model} beside it "
                               f"({', '.join(linked)}; links, hard links or copies: a line below says which)")
        result["linked"], result["load"] = linked, load_line(out)
    else:  # a hub id: its config.json merged; the weights are the user's to place
        export_hf_config(model, Path(out), block, force)
        result["lines"].append(f"wrote {out}/config.json; place {model}'s other files beside it, e.g. "
                               f"huggingface-cli download {model} --exclude config.json --local-dir {out}, then "
                               f"{load_line(out)}")
    return result


def load_line(out: str, remote_code: bool = False) -> str:
    """What to type to load an exported transformers folder: the block is in its config.json, so no keyword argument
    but trust_remote_code where the folder's own modeling file runs (a position map)."""
    return (f"AutoModelForCausalLM.from_pretrained({str(out)!r}"
            + (", trust_remote_code=True)" if remote_code else ")"))


def vllm_checkpoint(result: dict, model, gguf_file) -> str:
    """The checkpoint vLLM serves for `model`: a GGUF's transformers origin (its overrides hold only geometry)."""
    if not is_gguf(model, gguf_file):
        return model or "MODEL"
    checkpoint = gguf_origin(source_path(model, gguf_file))
    result["lines"].append(f"vLLM serves the transformers checkpoint this GGUF was made from ({checkpoint}); "
                           "the overrides depend only on the geometry its header states (d, base, L)")
    return checkpoint


def to_gguf(runtime: str, spec, geom, out, model, gguf_file, force, replace) -> dict:
    """llama.cpp: a GGUF copy carrying the schedule (`ropecli.models.gguf_rope.export_gguf`), for the runtime named
    `runtime` (the calling module's record's: llama.cpp, Ollama)."""
    path = source_path(model, gguf_file)
    if path.resolve() == Path(out).resolve():
        raise RopeCliError("--out is the input GGUF; write a new file")
    try:
        src, reader = read_gguf_input(path)
    except UNREADABLE as exc:  # a truncated or corrupt GGUF
        raise unreadable(path, exc) from None
    if src.existing_factors is not None and not replace:
        shown = ", ".join(f"{x:.4g}" for x in src.existing_factors[:8]) + (" …" if len(src.existing_factors) > 8 else "")
        what = f"rope_freqs ({shown})" if src.existing_factors else "a llama.cpp rope scaling"
        raise RopeCliError(f"{path.name} already carries {what}; pass --replace to put ropecli's schedule in its place")
    sched = spec.schedule(geom)
    attention = sched.attention_factor
    if spec.log_n:  # llama.cpp scales cos/sin by one constant: log-n's query scale at the target length
        attention = math.sqrt(math.log(geom.target_len) / math.log(geom.train_len))
    native = None if src.reads_rope_freqs else native_scaling(spec, geom)  # qwen2/3, gemma …: the scaling keys
    written = export_gguf(reader, src, Path(out), sched.factors, attention, geom.train_len, geom.target_len, native)
    how = (f"rope_freqs.weight ({geom.n_pairs} factors)" if native is None else
           f"{src.arch}.rope.scaling.type {native['type']}, factor {native['factor']:g} (llama.cpp's loader for "
           f"'{src.arch}' ignores rope_freqs)")
    lines = [f"{spec.label} at k={geom.factor:g}: {how} and context length {geom.target_len} written to {out} "
             f"({written['tensors']} tensors)",
             f"llama.cpp: llama-server -m {out} -c {geom.target_len}" + (
                 f"  (the same from the source GGUF with flags: llama-server -m {src.path.name} -c {geom.target_len} "
                 f"--rope-scaling {native['type']} --rope-scale {native['factor']:g} --yarn-orig-ctx {geom.train_len})"
                 if native else "")]  # the other runtimes that serve a GGUF: `export.plan` adds their lines
    if abs(attention - 1) > 1e-12 and native is None:
        lines.append(f"attention factor {attention:.6g} written to {src.arch}.rope.scaling.attn_factor"
                     + (" (sqrt(log_L(k*L)): log-n's query scale at the target length, as one constant)" if spec.log_n else ""))
    return {"runtime": runtime, "model": model, "factor": geom.factor, "target_len": geom.target_len,
            "factors": sched.factors, "attention_factor": attention, "lines": lines, "arch": src.arch, **written}
