"""DeepSeek V4's compressed attention cache beside its sliding window, as transformers 5.24 holds it
(modeling_deepseek_v4.py: `DeepseekV4HCACache`, `DeepseekV4CSACache`), for a sequence of N tokens:

- HCA (heavily compressed, rate r): one compressed entry per r tokens (head_dim wide), and the N mod r tokens not yet
  compressed buffered with their gates (2 x head_dim each);
- CSA (compressed sparse, rate r): the same for its compressor, whose projections are 2 x head_dim wide (two
  overlapping series) and for its indexer (index_head_dim), plus each one's overlap state (r x width, values and
  gates) once a first window has closed.
Checked against the allocation on the matrix's DeepSeek V4 row (tests/test_memory.py).
"""

from __future__ import annotations

from typing import Any

COMPRESSED = ("compressed_sparse_attention", "heavily_compressed_attention")


def compressed_state_bytes(text: dict[str, Any], kind: str, length: int, dtype_bytes: int) -> int:
    """Bytes of a DeepSeek V4 layer's compressed state at `length` tokens; 0 for any other layer."""
    rate = (text.get("compress_rates") or {}).get(kind)
    if kind not in COMPRESSED or not rate:
        return 0
    entries, left = divmod(length, int(rate))
    series = [(int(text["head_dim"]), 1)] if kind == "heavily_compressed_attention" else \
        [(int(text["head_dim"]), 2), (int(text.get("index_head_dim") or 0), 2)]  # (entry width, series overlapped)
    total = 0
    for width, overlap in series:
        total += entries * width + 2 * left * width * overlap  # entries; buffered values and gates
        if overlap > 1 and entries:
            total += 2 * int(rate) * width  # the last window's first series, values and gates
    return total * dtype_bytes
