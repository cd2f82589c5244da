"""A GGUF file's header, parsed here without the `gguf` package (whose reader decodes every tokenizer string
and takes seconds): the key/value metadata, the tensors' data offsets and sizes; and the RoPE schedule a GGUF
ships (`gguf_shipped`: llama.cpp's scaling keys and rope factor tensors). v2/v3, little-endian; a
malformed file fails in one line (`RopeCliError`), never with a bare exception (tests/test_fuzz_inputs.py)."""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.models.gguf_families import P_ROPE_ZERO, gguf_alpha_block
from ropecli.rope.shipped import Shipped, read_shipped

# GGUF value types: fixed-size scalars (struct format), 8 = string, 9 = array
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (v2/v3, little-endian): scalars and strings decoded,
    arrays of strings skipped (the tokenizer's), other arrays kept as lists. Reads the header only."""
    return _gguf_header(path, tensors=False)[0]


def gguf_parameters(path: Path) -> int:
    """The parameter count of a GGUF (the product of every tensor's dims): what transformers dequantizes."""
    return sum(_gguf_header(path, tensors=True)[3])


def gguf_layout(path: Path) -> tuple[int, list[tuple[str, int]]]:
    """(byte offset where tensor data starts, [(tensor name, absolute byte offset)]) of a GGUF file."""
    _, data_start, tensors, _ = _gguf_header(path, tensors=True)
    return data_start, tensors


def _gguf_header(path: Path, tensors: bool) -> tuple[dict[str, Any], int, list[tuple[str, int]], list[int]]:
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if buf[:4] != b"GGUF":
                raise ValueError("no GGUF magic number")
            version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
            if version < 2:
                raise ValueError(f"GGUF version {version} is not supported (2 or 3)")
            if n_kv * 12 > len(buf) or n_tensors * 24 > len(buf):  # each entry takes at least that many bytes
                raise ValueError(f"its header counts {n_kv} keys and {n_tensors} tensors, more than {len(buf)} bytes hold")
            pos, out = 24, {}
            for _ in range(n_kv):
                key, pos = _gguf_string(buf, pos)
                (vtype,), pos = struct.unpack_from("<I", buf, pos), pos + 4
                out[key], pos = _gguf_value(buf, pos, vtype)
            if not tensors:
                return out, 0, [], []
            infos, sizes = [], []
            for _ in range(n_tensors):  # name, n_dims, dims (u64 each), type (u32), offset (u64) within the data
                name, pos = _gguf_string(buf, pos)
                (n_dims,) = struct.unpack_from("<I", buf, pos)
                if n_dims > 8:
                    raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
                size = 1
                for dim in struct.unpack_from(f"<{n_dims}Q", buf, pos + 4):
                    size *= dim
                sizes.append(size)
                pos += 4 + 8 * n_dims + 4
                (offset,) = struct.unpack_from("<Q", buf, pos)
                pos += 8
                infos.append((name, offset))
            align = int(out.get("general.alignment", 32))
            start = (pos + align - 1) // align * align
            return out, start, [(name, start + off) for name, off in infos], sizes
    except (OSError, ValueError, OverflowError, MemoryError, struct.error) as exc:
        raise RopeCliError(f"cannot read GGUF metadata of '{path}': {exc}; is it a complete GGUF file?") from None


def _gguf_string(buf, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    _fits(buf, pos + 8, n, "a string")
    return bytes(buf[pos + 8:pos + 8 + n]).decode("utf-8", "replace"), pos + 8 + n


def _fits(buf, pos: int, n: int, what: str) -> None:
    """A length read from the file must fit in what remains of it (random counts reach here before any read)."""
    if n < 0 or pos + n > len(buf):
        raise ValueError(f"{what} of {n} bytes at offset {pos} runs past the end of the file ({len(buf)} bytes)")


def _gguf_value(buf, pos: int, vtype: int) -> tuple[Any, int]:
    if vtype in _SCALAR:
        fmt = "<" + _SCALAR[vtype]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if vtype == 8:
        return _gguf_string(buf, pos)
    if vtype == 9:
        item, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if item in _SCALAR:
            fmt = "<" + _SCALAR[item]
            size = struct.calcsize(fmt)
            _fits(buf, pos, n * size, "an array")
            return list(struct.unpack_from(f"<{n}{_SCALAR[item]}", buf, pos)), pos + n * size
        if item == 8:  # strings (a tokenizer's vocabulary): skipped, only their lengths are read
            _fits(buf, pos, n * 8, "an array of strings")
            for _ in range(n):
                (m,) = struct.unpack_from("<Q", buf, pos)
                _fits(buf, pos + 8, m, "a string")
                pos += 8 + m
            return None, pos
        raise ValueError(f"nested GGUF array of type {item}")
    raise ValueError(f"unknown GGUF value type {vtype}")


# llama.cpp's names (`src/llama-arch.cpp`, LLM_KV_ROPE_SCALING_*): rope.scaling.type is none|linear|yarn|longrope
_GGUF_TYPES = {"linear": "linear", "yarn": "yarn", "longrope": "longrope"}


def gguf_shipped(path: Path, meta: dict[str, Any], arch: str, rotary_dim: int) -> Shipped | None:
    """The schedule a GGUF ships: `{arch}.rope.scaling.*` keys (type, factor, original_context_length,
    attn_factor, yarn_beta_fast/slow), else a `rope_freqs` tensor (how llama.cpp's converter writes
    Llama 3.1's llama3 factors: per-pair divisors, read as explicit factors; L0 = Ls / k where no
    original length is stated), Phi-3's `rope_factors_long`/`_short` tensors with longrope."""
    def get(key: str):
        return meta.get(f"{arch}.{key}")

    ctx = get("context_length")
    kind = str(get("rope.scaling.type") or "none")
    factor = get("rope.scaling.factor") or (1.0 / get("rope.scale_linear") if get("rope.scale_linear") else None)
    original = get("rope.scaling.original_context_length")
    attn = get("rope.scaling.attn_factor")
    tensors = {}
    names = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
    if any(n.encode() in _head_bytes(path) for n in names):
        data_start, layout = gguf_layout(path)
        tensors = {n: _read_f32(path, off, rotary_dim // 2) for n, off in layout if n in names}
    if (alpha := gguf_alpha_block(meta, arch)) is not None:  # HunYuan-VL: the raw base and its NTK-alpha
        return read_shipped(alpha, max_len=ctx, source="gguf")
    if "rope_freqs.weight" in tensors:  # Gemma 4's p-RoPE: 1e30 on the pairs that do not rotate (frequency 0: factor 1)
        tensors["rope_freqs.weight"] = [1.0 if f >= P_ROPE_ZERO else f for f in tensors["rope_freqs.weight"]]
    if kind == "longrope" or "rope_factors_long.weight" in tensors:
        block = {"rope_type": "longrope", "long_factor": tensors.get("rope_factors_long.weight"),
                 "short_factor": tensors.get("rope_factors_short.weight"), "factor": factor,
                 "original_max_position_embeddings": original, "attention_factor": attn}
        return read_shipped(block, max_len=ctx, source="gguf")
    if kind in _GGUF_TYPES and factor and float(factor) > 1:
        block = {"rope_type": _GGUF_TYPES[kind], "factor": float(factor), "original_max_position_embeddings": original,
                 "beta_fast": get("rope.scaling.yarn_beta_fast"), "beta_slow": get("rope.scaling.yarn_beta_slow")}
        if kind == "yarn" and attn and float(attn) != 1.0:  # llama.cpp: mscale = attn_factor * (1 + 0.1 ln k)
            block["attention_factor"] = float(attn) * (1 + 0.1 * math.log(float(factor)))
        return read_shipped(block, max_len=ctx, source="gguf")
    freqs = tensors.get("rope_freqs.weight")
    if freqs is not None and max(freqs) > 1:
        k = float(max(freqs))
        L0 = int(original or round((ctx or 0) / k))
        block = {"rope_type": "longrope", "long_factor": freqs, "short_factor": freqs, "factor": k,
                 "original_max_position_embeddings": L0, "attention_factor": float(attn or 1.0)}
        source = "gguf rope_freqs" + ("" if original else "; L0 = Ls / k assumed, --train-len sets it")
        return replace(read_shipped(block, max_len=ctx, source=source), rope_type="rope_freqs")
    return None


def gguf_rope_freqs(path: Path, rotary_dim: int) -> list[float] | None:
    """The `rope_freqs` tensor's d/2 divisors, None where the GGUF has none."""
    if b"rope_freqs.weight" not in _head_bytes(path):
        return None
    _, layout = gguf_layout(path)
    return next((_read_f32(path, off, rotary_dim // 2) for n, off in layout if n == "rope_freqs.weight"), None)


def _head_bytes(path: Path, size: int = 1 << 22) -> bytes:
    """The first bytes of a file (where a GGUF's metadata and tensor names are)."""
    with open(path, "rb") as fh:
        return fh.read(size)


def _read_f32(path: Path, offset: int, n: int) -> list[float]:
    with open(path, "rb") as fh:
        fh.seek(offset)
        raw = fh.read(4 * n)
    if len(raw) < 4 * n:
        raise RopeCliError(f"GGUF '{path}' ends inside a rope factor tensor; is it a complete GGUF file?")
    return list(struct.unpack(f"<{n}f", raw))
