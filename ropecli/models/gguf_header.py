"""A GGUF file's header, parsed here without the `gguf` package (whose reader decodes every tokenizer string
and takes seconds): the key/value metadata, the tensors' data offsets and sizes. v2/v3, little-endian; a
malformed file fails in one line (`RopeCliError`), never with a bare exception (tests/test_fuzz_inputs.py)."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from ropecli.errors import RopeCliError

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
    except (OSError, ValueError, struct.error) as exc:
        raise RopeCliError(f"cannot read GGUF metadata of '{path}': {exc}; is it a complete GGUF file?") from None


def _gguf_string(buf, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", buf, pos)
    return bytes(buf[pos + 8:pos + 8 + n]).decode("utf-8", "replace"), pos + 8 + n


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
            return list(struct.unpack_from(f"<{n}{_SCALAR[item]}", buf, pos)), pos + n * size
        if item == 8:  # strings (a tokenizer's vocabulary): skipped, only their lengths are read
            for _ in range(n):
                (m,) = struct.unpack_from("<Q", buf, pos)
                pos += 8 + m
            return None, pos
        raise ValueError(f"nested GGUF array of type {item}")
    raise ValueError(f"unknown GGUF value type {vtype}")
