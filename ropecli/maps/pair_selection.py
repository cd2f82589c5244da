"""Key-pair selection of a per-pair map (DPE's `select_topk_dim`): per layer and attention head, which rotary
pairs the map moves. The rest stay at true positions, so only the pairs that carry a head's scores are remapped.

DPE (LuLuLuyi/DPE) measures each pair's contribution to the attention scores on text the model reads within its
training length: dimension_selection/qk_2_norm_select_dim.py `calculate_2_norm` takes, per token and head, the 2-norm
of the query's and the key's two components of pair m (before rotation: sample_qk_atten_forward.py saves them ahead of
`apply_rotary_pos_emb`), multiplies the two (the key head repeated over its query heads) and averages over the tokens;
dpe_for_llama.py `dimension_selection` keeps the top k pairs per layer and head (k = 48 of Llama 3's 64; 32 in its
RULER script) after averaging over samples and lengths. |q_m| |k_m| bounds pair m's term of q.k at every rotation, so
the pairs with the largest products are those whose rotation angles move the scores most.

Here the share `top` of each head's pairs (k = round(top * pairs), at least 1) is kept, ties to the lower pair index.
The contributions come from `ropecli.maps.pair_contributions` on CALIBRATION: text no evaluation reads.
Numpy only.
"""

from __future__ import annotations

import numpy as np

CALIBRATION_TOKENS = 16384  # tokens of the calibration text per model, in windows of min(Ls, CALIBRATION_WINDOW)
CALIBRATION_WINDOW = 4096
CALIBRATION = f"training-plays:{CALIBRATION_TOKENS}x{CALIBRATION_WINDOW}"  # the recipe, named in cache keys


def kept_pairs(pairs: int, share: float) -> int:
    """How many of a head's `pairs` rotary pairs a share moves: round(share * pairs), at least 1."""
    return max(1, min(pairs, int(round(share * pairs))))


def select_pairs(contributions: dict[int, np.ndarray], share: float) -> dict[int, np.ndarray]:
    """{layer: (heads, pairs) mean |q_m| |k_m|, NaN for a pair that does not rotate} -> {layer: (heads, pairs) bool},
    True on each head's top `kept_pairs(rotating pairs, share)` pairs (ties to the lower pair index: a stable sort)."""
    out = {}
    for layer, c in contributions.items():
        c = np.asarray(c, dtype=np.float64)
        k = kept_pairs(int(np.isfinite(c[0]).sum()), share)  # among the pairs that turn (p-RoPE's others never move)
        order = np.argsort(np.where(np.isfinite(c), -c, np.inf), axis=-1, kind="stable")[..., :k]  # the largest first
        mask = np.zeros(c.shape, dtype=bool)
        np.put_along_axis(mask, order, True, axis=-1)
        out[layer] = mask
    return out


def overlap(a: dict[int, np.ndarray], b: dict[int, np.ndarray]) -> float:
    """The share of selected pairs two selections of the same size agree on, over every layer and head."""
    both = sum(int((a[n] & b[n]).sum()) for n in a)
    return both / max(1, sum(int(a[n].sum()) for n in a))
