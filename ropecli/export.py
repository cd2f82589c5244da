"""A chosen schedule, written where each runtime reads it (`ropecli export`, `search-b --export-config`).

- transformers: a `rope_parameters` block, `rope_type: longrope` with `long_factor` = Lambda_m,
  merged into a copy of a model folder's config.json (per layer type for Gemma 3 style configs);
  transformers picks long_factor per forward pass, once the sequence is longer than L.
- vLLM: the same block through `--hf-overrides`; vLLM picks long_factor once at start-up, for
  every request, when `--max-model-len` > L.
- llama.cpp / Ollama: a GGUF copy with an F32 `rope_freqs.weight` tensor of the d/2 factors; the
  kernels divide each pair's angle by it, at every length (no short variant).
So with the default `short_factor` = 1 the three disagree on prompts shorter than L (transformers:
unscaled; vLLM and llama.cpp: scaled); `consistent=True` writes short_factor = long_factor and all
three apply the same schedule at every length.

Every file is written atomically (`ropecli.files`); an existing output is refused unless forced.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.files import atomic_write_text
from ropecli.geometry import Geometry
from ropecli.specs import Spec

# GGUF architectures whose llama.cpp loader reads `rope_freqs.weight` and whose graph applies it
# (src/models/*.cpp of llama.cpp: create_tensor(LLM_TENSOR_ROPE_FREQS) and get_rope_factors).
# Mistral and Mixtral GGUFs are "llama"; Qwen 2/3, Gemma 2/3, Phi 3 are not in the list.
GGUF_ROPE_FREQS_ARCHS = ("llama", "llama4", "mistral3", "deci", "exaone", "exaone4", "granite", "arcee", "apertus", "nanbeige")

RUNTIME_BEHAVIOUR = {
    "transformers": ("per forward pass: long_factor once the sequence is longer than L, the unscaled model (short_factor = 1) up to L",
                     "the schedule at every length"),
    "vllm": ("once at start-up: --max-model-len > L selects long_factor for every request, short prompts included",
             "the schedule at every length"),
    "llama.cpp": ("rope_freqs is applied at every length and every context size (it has no short variant)",
                  "the schedule at every length"),
}


@dataclass(frozen=True)
class RopeTarget:
    """What an export needs of a model: d, L, partial rotary, and the RoPE base of each layer type
    it scales ({None: base} for a model with one RoPE); all layer types for per-type configs."""
    rotary_dim: int
    train_len: int
    scaled_bases: dict  # layer type (None: the only one) -> base
    partial_rotary_factor: float = 1.0
    layer_types: list = field(default_factory=list)  # every RoPE layer type ([] with one RoPE)

    @classmethod
    def of_loaded(cls, lm) -> "RopeTarget":
        return cls(lm.rotary_dim, lm.train_len, {s.layer_type: s.base for s in lm.slots}, lm.partial_rotary_factor,
                   list(lm.layer_types))

    @classmethod
    def of_config(cls, rope, rope_layers: str | None = None) -> "RopeTarget":
        if not rope.layer_bases:
            return cls(rope.rotary_dim, rope.train_len, {None: rope.base}, rope.partial_rotary_factor)
        types = sorted(rope.layer_bases)
        scaled = types if rope_layers == "all" else [t.strip() for t in rope_layers.split(",")] if rope_layers else [rope.layer_type]
        return cls(rope.rotary_dim, rope.train_len, {t: rope.layer_bases[t] for t in scaled}, rope.partial_rotary_factor, types)


def target_of(geom: Geometry, rope, rope_layers: str | None, base_given: bool) -> RopeTarget:
    """The export target from the final geometry (flags applied) and, where a model was read, its
    RopeConfig: per-type bases come from the config unless --base overrides them."""
    if rope is None:
        return RopeTarget(geom.rotary_dim, geom.train_len, {None: geom.base})
    t = RopeTarget.of_config(rope, rope_layers)
    bases = {lt: (geom.base if base_given else b) for lt, b in t.scaled_bases.items()}
    return RopeTarget(geom.rotary_dim, geom.train_len, bases, t.partial_rotary_factor, t.layer_types)


def check_empty_or_forced(out_dir: Path, force: bool) -> None:
    """Refuse to write into a non-empty output folder unless --force."""
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise RopeCliError(f"--out {out_dir} exists and is not empty; pass --force to overwrite, or choose another folder")


def check_writable(path: str, flag: str, force: bool = True) -> None:
    """Refuse, before any work, a path whose folder is missing or not writable, or that exists (unless `force`)."""
    import os

    p = Path(path)
    if not p.resolve().parent.exists():
        raise RopeCliError(f"{flag} {path}: the folder does not exist; create it or write elsewhere")
    if not os.access(p.resolve().parent, os.W_OK):
        raise RopeCliError(f"{flag} {path}: the folder is not writable; write elsewhere")
    if p.exists() and not force:
        raise RopeCliError(f"{flag} {path} exists; pass --force to overwrite it, or choose another path")


def rope_block(target: RopeTarget, spec: Spec, factor: float, consistent: bool = False) -> tuple[dict, str]:
    """(block, note): `{"rope_parameters": …, "max_position_embeddings": k*L}` running `spec` at factor k;
    per layer type (`{type: params or "unchanged"}`) for per-type models. With log-n the attention
    factor is the constant sqrt(log_L(k*L)): log-n's query scale at the target length."""
    from ropecli.factor_files import rope_parameters_block

    if spec.method == "dynamic" and dict(spec.params).get("seq_len") is None and not spec.log_n:
        return dynamic_block(target, factor)
    per_type: dict[Any, dict] = {}
    for layer_type, base in target.scaled_bases.items():
        geom = Geometry(target.rotary_dim, base, target.train_len, factor)
        block = rope_parameters_block(geom, spec.schedule(geom), partial_rotary_factor=target.partial_rotary_factor)
        params = block["rope_parameters"]
        if spec.log_n:
            params["attention_factor"] = math.sqrt(math.log(geom.target_len) / math.log(target.train_len))
        if consistent:
            params["short_factor"] = list(params["long_factor"])
        per_type[layer_type] = params
    first = next(iter(per_type.values()))
    note = f"{spec.but(log_n=False).label} as longrope long_factor; attention_factor {first['attention_factor']:.6g}"
    if spec.log_n:
        note += (" = sqrt(log_L(k*L)) approximates the per-position log-n query scale by its value at the target "
                 "length (transformers applies one constant to q and k)")
    note += "; short_factor = long_factor (--consistent)" if consistent else "; short_factor = 1 (unscaled up to L)"
    max_pos = int(round(factor * target.train_len))
    if not target.layer_types:
        return {"rope_parameters": first, "max_position_embeddings": max_pos}, note
    note += "; per layer type: merge the scaled entries into your config's rope_parameters, keep the others"
    return {"rope_parameters": {lt: per_type.get(lt, "unchanged") for lt in target.layer_types},
            "max_position_embeddings": max_pos}, note


def dynamic_block(target: RopeTarget, factor: float) -> tuple[dict, str]:
    """Dynamic NTK as transformers' own `dynamic` type: its factor depends on the current length, which a
    static long_factor cannot express. transformers reads L from max_position_embeddings (kept at L)."""
    per_type = {}
    for layer_type, base in target.scaled_bases.items():
        params = {"rope_type": "dynamic", "rope_theta": base, "factor": factor}
        if target.partial_rotary_factor != 1.0:
            params["partial_rotary_factor"] = target.partial_rotary_factor
        per_type[layer_type] = params
    note = (f"dynamic NTK as transformers' rope_type 'dynamic', factor {factor:g}: base scaled by the current length "
            "past L (max_position_embeddings stays L; transformers keeps the largest length seen until a prompt "
            "shorter than L resets it; vLLM computes it once for k*L)")
    if not target.layer_types:
        return {"rope_parameters": per_type[None], "max_position_embeddings": target.train_len}, note
    return {"rope_parameters": {lt: per_type.get(lt, "unchanged") for lt in target.layer_types},
            "max_position_embeddings": target.train_len}, note


def write_json(path: str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def write_hf_block(path: str, lm, spec: Spec, factor: float) -> dict:
    """`search-b --export-config`: the block for a loaded model, to a JSON file."""
    block, note = rope_block(RopeTarget.of_loaded(lm), spec, factor)
    write_json(path, block)
    return {"path": path, "note": note}


# --- transformers: a model folder whose config.json carries the block ---------------------------

def merged_config(config: dict, block: dict) -> dict:
    """A copy of a model's config.json with the block merged (into text_config where the model has
    one); per layer type, only the scaled types are replaced. Old `rope_scaling` keys are dropped."""
    out = json.loads(json.dumps(config))
    text = out["text_config"] if isinstance(out.get("text_config"), dict) else out
    new = block["rope_parameters"]
    if "rope_type" not in new:  # per layer type: {type: params or "unchanged"}
        old = dict(text.get("rope_parameters") or {})
        if "rope_local_base_freq" in text and not old:  # transformers 4 Gemma 3: both bases at the top level
            old = {"full_attention": {"rope_type": "default", "rope_theta": text.get("rope_theta", 1e6)},
                   "sliding_attention": {"rope_type": "default", "rope_theta": text["rope_local_base_freq"]}}
        text["rope_parameters"] = {lt: (old.get(lt) if params == "unchanged" else params) for lt, params in new.items()}
    else:
        text["rope_parameters"] = new
    for stale in ("rope_scaling", "rope_theta", "rope_local_base_freq"):
        text.pop(stale, None)
    text["max_position_embeddings"] = block["max_position_embeddings"]
    return out


def export_hf_folder(model_dir: Path, out_dir: Path, block: dict, force: bool) -> list[str]:
    """Write out_dir/config.json (the model's, merged) and link every other file of model_dir beside
    it, so `from_pretrained(out_dir)` needs no keyword arguments. Returns the linked file names."""
    config = json.loads((model_dir / "config.json").read_text())
    check_empty_or_forced(out_dir, force)
    out_dir.mkdir(parents=True, exist_ok=True)
    linked = []
    for src in sorted(model_dir.iterdir()):
        if src.name == "config.json" or src.name.startswith("."):
            continue
        dst = out_dir / src.name
        if dst.is_symlink() or dst.exists():
            if dst.is_dir() and not dst.is_symlink():
                continue
            dst.unlink()
        dst.symlink_to(src.resolve())
        linked.append(src.name)
    write_json(str(out_dir / "config.json"), merged_config(config, block))
    return linked


def for_vllm(block: dict) -> dict:
    """The block as vLLM must get it: vLLM's longrope ignores `attention_factor` and scales cos/sin by
    `short_mscale` / `long_mscale`, defaulting to sqrt(1 + ln(max_len/L) / ln L); both are set to the
    schedule's attention factor so vLLM applies what transformers applies."""
    out = json.loads(json.dumps(block))
    params = out["rope_parameters"]
    for p in ([params] if "rope_type" in params else [v for v in params.values() if isinstance(v, dict)]):
        if p.get("rope_type") == "longrope":  # dynamic NTK goes as vLLM's own 'dynamic' type, unchanged
            p["short_mscale"] = p["long_mscale"] = p["attention_factor"]
    return out


def export_hf_from_gguf(gguf_path: Path, out_dir: Path, block: dict, force: bool) -> None:
    """A transformers folder from a GGUF: transformers dequantizes it (float32 safetensors, its
    tokenizer), then the block is merged into the saved config.json. Minutes for a large model."""
    import shutil
    import tempfile

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    check_empty_or_forced(out_dir, force)
    work = Path(tempfile.mkdtemp(dir=out_dir.resolve().parent, prefix=f".{out_dir.name}."))
    try:
        kw = {"gguf_file": gguf_path.name}
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), **kw)
        model.hf_quantizer = None  # the weights are dequantized already; transformers refuses to save "gguf-quantized" models
        if getattr(model.config, "quantization_config", None) is not None:
            del model.config.quantization_config
        model.save_pretrained(work)
        AutoTokenizer.from_pretrained(str(gguf_path.parent), **kw).save_pretrained(work)
        config = json.loads((work / "config.json").read_text())
        write_json(str(work / "config.json"), merged_config(config, block))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        work.rename(out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def export_hf_config(model: str, out_dir: Path, block: dict, force: bool) -> None:
    """For a hub id: out_dir/config.json, the repo's config.json (one small cached download) with the
    block merged; the weights are the user's to place beside it."""
    from ropecli.model_config import locate_file

    config = json.loads(locate_file(model, Path(model), "config.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / "config.json").exists() and not force:
        raise RopeCliError(f"--out {out_dir}/config.json exists; pass --force to overwrite it")
    write_json(str(out_dir / "config.json"), merged_config(config, block))


def vllm_command(model: str, block: dict) -> str:
    overrides = json.dumps(block, separators=(",", ":"))
    return (f"vllm serve {shlex.quote(model)} --hf-overrides {shlex.quote(overrides)} "
            f"--max-model-len {block['max_position_embeddings']}")


# --- llama.cpp / Ollama: a GGUF copy with rope_freqs ------------------------------------------

@dataclass
class GgufInput:
    path: Path
    arch: str
    existing_factors: list[float] | None  # rope_freqs already in the file ([] for a llama.cpp scaling type)


def read_gguf_input(path: Path):
    """(GgufInput, gguf.GGUFReader) of a GGUF to export into; refuses architectures llama.cpp does not scale by rope_freqs."""
    from ropecli.model_config import gguf_metadata

    meta = gguf_metadata(path)
    arch = meta.get("general.architecture", "")
    if arch not in GGUF_ROPE_FREQS_ARCHS:
        raise RopeCliError(f"GGUF architecture '{arch}': llama.cpp's loader for it does not read rope_freqs; "
                           f"--to gguf supports {', '.join(GGUF_ROPE_FREQS_ARCHS)}. Use --to hf or --to vllm instead")
    scaling = meta.get(f"{arch}.rope.scaling.type")
    existing = None
    try:
        import gguf
    except ImportError:
        raise RopeCliError("--to gguf needs the 'gguf' package; pip install 'ropecli[gguf]'") from None
    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            existing = [float(x) for x in t.data.reshape(-1)]
    if scaling not in (None, "none") and existing is None:
        existing = []  # a built-in llama.cpp scaling (linear/yarn) that ropecli would stack on
    return GgufInput(path, arch, existing), reader


def export_gguf(reader, src: GgufInput, out: Path, factors, attention_factor: float, train_len: int, target_len: int) -> dict:
    """Copy every key and tensor of the input GGUF to `out`, plus rope_freqs.weight (d/2 float32
    factors), context_length = target, the original length kept in rope.scaling.original_context_length,
    rope.scaling.type none, and the attention factor in rope.scaling.attn_factor where it is not 1."""
    import os
    import tempfile

    import gguf
    import numpy as np

    arch = src.arch
    new = {
        f"{arch}.context_length": (gguf.GGUFValueType.UINT32, int(target_len)),
        f"{arch}.rope.scaling.original_context_length": (gguf.GGUFValueType.UINT32, int(train_len)),
        f"{arch}.rope.scaling.type": (gguf.GGUFValueType.STRING, "none"),
    }
    drop = {f"{arch}.rope.scaling.factor", f"{arch}.rope.scaling.attn_factor"}
    if abs(attention_factor - 1.0) > 1e-12:
        new[f"{arch}.rope.scaling.attn_factor"] = (gguf.GGUFValueType.FLOAT32, float(attention_factor))
    freqs = np.asarray(factors, dtype=np.float32)
    fd, tmp = tempfile.mkstemp(dir=out.resolve().parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        writer = gguf.GGUFWriter(tmp, arch, endianess=reader.endianess)
        for fld in reader.fields.values():
            if fld.name == gguf.Keys.General.ARCHITECTURE or fld.name.startswith("GGUF.") or fld.name in new or fld.name in drop:
                continue
            vtype = fld.types[0]
            sub = fld.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(fld.name, fld.contents(), vtype, sub_type=sub)
        for key, (vtype, value) in new.items():
            writer.add_key_value(key, value, vtype)
        tensors = [t for t in reader.tensors if t.name != "rope_freqs.weight"]
        for t in tensors:
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        writer.add_tensor_info("rope_freqs.weight", freqs.shape, freqs.dtype, freqs.nbytes, gguf.GGMLQuantizationType.F32)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in tensors:
            writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
        writer.write_tensor_data(freqs)
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"path": str(out), "arch": arch, "tensors": len(tensors) + 1, "context_length": int(target_len)}
