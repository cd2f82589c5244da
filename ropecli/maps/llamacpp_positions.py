"""Self-Extend as llama.cpp serves it: the positions its KV cache holds, batch by batch (numpy; the map built on it is
`selfextend-llamacpp` in `ropecli.maps.position_maps`).

llama.cpp's completion tool (tools/completion/completion.cpp, the main loop; examples/main/main.cpp before 2025) groups
positions in the cache itself, before each batch it decodes:

    while (n_past >= ga_i + ga_w) {
        ib = (ga_n*ga_i)/ga_w;  bd = (ga_w/ga_n)*(ga_n - 1);  dd = (ga_w/ga_n) - ib*bd - ga_w;
        seq_add(ga_i, n_past, ib*bd);  seq_div(ga_i + ib*bd, ga_i + ib*bd + ga_w, ga_n);
        seq_add(ga_i + ib*bd + ga_w, n_past + ib*bd, dd);
        n_past -= bd;  ga_i += ga_w/ga_n;
    }

(`llama_memory_seq_add` / `llama_memory_seq_div` move the cells' positions, integer division; the K-shift re-rotates
the cached keys to them), then decodes the batch's tokens at n_past, n_past + 1, … against every cached key. So the
relative position of a query and a key is fixed per batch, not per pair as in Jin et al.'s formula: the two agree
on a few percent of the pairs, differ by less than W - W/G, and stay within the paper's farthest distance only while
a batch is no longer than W (ropecli's export passes -b W). Decoding feeds one token per batch.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=16)
def batch_positions(G: int, W: int, B: int, batches: int) -> tuple[tuple[int, np.ndarray], ...]:
    """For each of the first `batches` batches of B tokens: (its first query's position, the positions the keys
    0 … (b + 1) B - 1 have while it is decoded), int64: the cache's keys after grouping, then the batch's own."""
    pos = np.zeros(0, dtype=np.int64)
    n_past = ga_i = 0
    out = []
    for _ in range(batches):
        while n_past >= ga_i + W:
            ib, bd = (G * ga_i) // W, (W // G) * (G - 1)
            dd = (W // G) - ib * bd - W
            pos[(pos >= ga_i) & (pos < n_past)] += ib * bd
            div = (pos >= ga_i + ib * bd) & (pos < ga_i + ib * bd + W)
            pos[div] //= G
            pos[(pos >= ga_i + ib * bd + W) & (pos < n_past + ib * bd)] += dd
            n_past -= bd
            ga_i += W // G
        pos = np.concatenate([pos, n_past + np.arange(B, dtype=np.int64)])
        out.append((n_past, pos.copy()))
        n_past += B
    return tuple(out)


def take(table: np.ndarray, j):
    """table[j] for numpy or torch index arrays alike (keys past the table are never reached: clipped)."""
    if isinstance(j, np.ndarray) or np.isscalar(j):
        return table[np.minimum(j, len(table) - 1)]
    return j.new_tensor(table)[j.clamp(max=len(table) - 1)]
