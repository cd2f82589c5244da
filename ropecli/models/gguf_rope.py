"""llama.cpp / Ollama: a GGUF copy with an F32 `rope_freqs.weight` tensor of the d/2 factors. One writer
for both users: `ropecli export --to gguf` (through `ropecli.export.plan`) and the llama.cpp backend's
temporary scaled copies (`ropecli.models.llamacpp`); it lives in the models layer so that both can import it.

llama.cpp's kernels divide each pair's angle by rope_freqs at every length and context size (no
short variant; `ggml_rope_ext` with the `freq_factors` tensor, read by `get_rope_factors` in
src/llama-model.cpp for the architectures below). The attention factor goes to
`{arch}.rope.scaling.attn_factor`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.files import publish

# GGUF architectures whose llama.cpp loader reads `rope_freqs.weight` and whose graph applies it
# (src/models/*.cpp of llama.cpp: create_tensor(LLM_TENSOR_ROPE_FREQS) and get_rope_factors).
# Mistral and Mixtral GGUFs are "llama"; Qwen 2/3, Gemma 2/3, Phi 3 are not in the list.
GGUF_ROPE_FREQS_ARCHS = ("llama", "llama4", "mistral3", "deci", "exaone", "exaone4", "granite", "arcee", "apertus", "nanbeige")


@dataclass
class GgufInput:
    path: Path
    arch: str
    existing_factors: list[float] | None  # rope_freqs already in the file ([] for a llama.cpp scaling type)


def read_gguf_input(path: Path):
    """(GgufInput, gguf.GGUFReader) of a GGUF to export into; refuses architectures llama.cpp does not scale by rope_freqs."""
    from ropecli.models.config import gguf_metadata

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
        publish(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"path": str(out), "arch": arch, "tensors": len(tensors) + 1, "context_length": int(target_len)}
