"""llama.cpp / Ollama: a GGUF copy with an F32 `rope_freqs.weight` tensor of the d/2 factors. One writer
for both users: `ropecli export --to gguf` (through `ropecli.export.plan`) and the llama.cpp backend's
temporary scaled copies (`ropecli.backends.llamacpp_backend`); it lives in the models layer so that both can import it.

llama.cpp's kernels divide each pair's angle by rope_freqs at every length and context size (no
short variant; `ggml_rope_ext` with the `freq_factors` tensor, read by `get_rope_factors` in
src/llama-model.cpp for the architectures below). The attention factor goes to
`{arch}.rope.scaling.attn_factor`.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ropecli.deferred import deferred, installed
from ropecli.errors import RopeCliError
from ropecli.files import publish
from ropecli.models.gguf_families import rotating_pairs
from ropecli.models.gguf_header import gguf_metadata

gguf = deferred("gguf")

# GGUF architectures whose llama.cpp loader reads `rope_freqs.weight` and whose graph applies it
# (src/models/*.cpp of llama.cpp: create_tensor(LLM_TENSOR_ROPE_FREQS) and get_rope_factors).
# Mistral and Mixtral GGUFs are "llama"; Qwen 2/3, Gemma 2/3, Phi 3 are not in the list.
# gemma4: its full-attention (p-RoPE) layers only (src/models/gemma4.cpp: `freq_factors = model.layers[il].rope_freqs`
# where !hparams.is_swa(il)), the 1e30 entries past the rotating pairs kept (`GgufInput.rotating_pairs`).
GGUF_ROPE_FREQS_ARCHS = ("llama", "llama4", "mistral3", "deci", "exaone", "exaone4", "granite", "arcee", "apertus", "nanbeige",
                         "gemma4")
P_ROPE_MASK = 1e30  # what llama.cpp's converter divides a non-rotating pair by (conversion/gemma.py)


@dataclass
class GgufInput:
    path: Path
    arch: str
    existing_factors: list[float] | None  # rope_freqs already in the file ([] for a llama.cpp scaling type)
    rotating_pairs: int | None = None  # p-RoPE (Gemma 4): pairs past it hold 1e30 in rope_freqs and keep it

    @property
    def reads_rope_freqs(self) -> bool:
        """Whether llama.cpp's loader for this architecture reads rope_freqs (else: the native scaling keys)."""
        return self.arch in GGUF_ROPE_FREQS_ARCHS


def llamacpp_yarn(rotary_dim: int, base: float, factor: float, original_len: int, beta_fast: float = 32.0,
                  beta_slow: float = 1.0) -> tuple:
    """(Lambda_m, m = 1 .. d/2, the cos/sin scale) llama.cpp computes for rope.scaling.type yarn with factor k:
    ggml's `ggml_rope_yarn_corr_dims` (ggml/src/ggml.c: low = floor(corr(beta_fast)), high = ceil(corr(beta_slow)),
    clamped to [0, d-1], corr(r) = d ln(L / (2 pi r)) / (2 ln base)) and `rope_yarn` (ggml-cpu/ops.cpp: theta =
    theta_interp (1 - ramp) + theta_extrap ramp, ramp = 1 - clamp((i - low) / max(0.001, high - low)), theta_interp =
    theta_extrap / k); the scale (1 + 0.1 ln k) times rope.scaling.attn_factor (llama-context.cpp cancels ggml's own
    boost, PR #17945, so the net is this)."""
    d = rotary_dim
    corr = lambda r: d * math.log(original_len / (r * 2 * math.pi)) / (2 * math.log(base))  # noqa: E731
    low, high = max(0.0, math.floor(corr(beta_fast))), min(d - 1.0, math.ceil(corr(beta_slow)))
    i = np.arange(d // 2, dtype=np.float64)
    extrap = base ** (-2 * i / d)
    ramp = 1 - np.clip((i - low) / max(0.001, high - low), 0, 1)
    theta = extrap / factor * (1 - ramp) + extrap * ramp
    return extrap / theta, (1 + 0.1 * math.log(factor)) if factor > 1 else 1.0


def native_scaling(spec, geom) -> dict:
    """The llama.cpp scaling keys that give `spec` at geom's k exactly, for an architecture that ignores rope_freqs:
    {"type": "yarn"|"linear", "factor", "attn_factor"}; one line where llama.cpp has no such form."""
    params = dict(spec.params)
    if spec.log_n or spec.composed:
        raise RopeCliError(f"{spec.label} has no llama.cpp scaling key for this architecture (it ignores rope_freqs); "
                           "export yarn or pi, or --to transformers / --to vllm")
    sched = spec.schedule(geom)
    if spec.method == "pi":
        return {"type": "linear", "factor": geom.factor, "attn_factor": sched.attention_factor}
    if spec.method == "yarn":
        factors, scale = llamacpp_yarn(geom.rotary_dim, geom.base, geom.factor, geom.train_len)
        if np.allclose(factors, sched.factors, rtol=1e-6):
            return {"type": "yarn", "factor": geom.factor, "attn_factor": sched.attention_factor / scale}
        shown = ", ".join(f"{k}={v:g}" for k, v in params.items() if isinstance(v, (int, float)) and v is not None)
        raise RopeCliError(f"yarn ({shown}) differs from llama.cpp's yarn for this architecture, which reads only its "
                           "factor and original length (beta_fast 32, beta_slow 1): export default yarn, or --to transformers")
    raise RopeCliError(f"llama.cpp's loader for this architecture ignores rope_freqs, and {spec.method} has no llama.cpp "
                       "scaling type (none, linear, yarn): export yarn or pi here, or --to transformers / --to vllm")


def read_gguf_input(path: Path):
    """(GgufInput, gguf.GGUFReader) of a GGUF to export into; refuses architectures llama.cpp does not scale by rope_freqs."""
    meta = gguf_metadata(path)
    arch = meta.get("general.architecture", "")
    scaling = meta.get(f"{arch}.rope.scaling.type")
    existing = None
    if not installed("gguf"):
        raise RopeCliError("--to gguf needs the 'gguf' package; pip install 'ropecli[gguf]'") from None
    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            existing = [float(x) for x in t.data.reshape(-1)]
    if scaling not in (None, "none") and existing is None:
        existing = []  # a built-in llama.cpp scaling (linear/yarn) that ropecli would stack on
    rotating = rotating_pairs(existing)
    if rotating is not None:  # p-RoPE's mask: a schedule only where the rotating pairs are not all 1
        existing = existing[:rotating] if any(abs(f - 1.0) > 1e-7 for f in existing[:rotating]) else None
    return GgufInput(path, arch, existing, rotating), reader


def export_gguf(reader, src: GgufInput, out: Path, factors, attention_factor: float, train_len: int, target_len: int,
                native: dict | None = None) -> dict:
    """Copy every key and tensor of the input GGUF to `out`, plus rope_freqs.weight (d/2 float32
    factors), context_length = target, the original length kept in rope.scaling.original_context_length,
    rope.scaling.type none, and the attention factor in rope.scaling.attn_factor where it is not 1. With `native`
    (`native_scaling`: an architecture that ignores rope_freqs) no tensor: rope.scaling.type/factor/attn_factor."""
    arch = src.arch
    new = {
        f"{arch}.context_length": (gguf.GGUFValueType.UINT32, int(target_len)),
        f"{arch}.rope.scaling.original_context_length": (gguf.GGUFValueType.UINT32, int(train_len)),
        f"{arch}.rope.scaling.type": (gguf.GGUFValueType.STRING, "none"),
    }
    drop = {f"{arch}.rope.scaling.factor", f"{arch}.rope.scaling.attn_factor"}
    if native is not None:
        new[f"{arch}.rope.scaling.type"] = (gguf.GGUFValueType.STRING, native["type"])
        new[f"{arch}.rope.scaling.factor"] = (gguf.GGUFValueType.FLOAT32, float(native["factor"]))
        attention_factor = native["attn_factor"]
    if abs(attention_factor - 1.0) > 1e-12:
        new[f"{arch}.rope.scaling.attn_factor"] = (gguf.GGUFValueType.FLOAT32, float(attention_factor))
    freqs = np.array(factors, dtype=np.float32)
    if src.rotating_pairs is not None:  # p-RoPE: the pairs that do not rotate stay at frequency 0
        if abs(attention_factor - 1.0) > 1e-12 or native is not None:
            raise RopeCliError(f"llama.cpp's {arch} takes one rope_freqs for its p-RoPE layers and applies an attention "
                               "factor to every layer, the sliding ones too: export a schedule without one (pi, ntk, "
                               "llama3, mixed …), or --to transformers")
        freqs[src.rotating_pairs:] = P_ROPE_MASK
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
        if native is None:
            writer.add_tensor_info("rope_freqs.weight", freqs.shape, freqs.dtype, freqs.nbytes, gguf.GGMLQuantizationType.F32)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in tensors:
            writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
        if native is None:
            writer.write_tensor_data(freqs)
        writer.close()
        publish(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"path": str(out), "arch": arch, "tensors": len(tensors) + (native is None), "context_length": int(target_len),
            "scaling": native}
