"""Each rotary pair's contribution to a model's attention scores, per layer and head (DPE's key-pair selection, issue
61; the selection itself is `ropecli.maps.pair_selection`).

The model reads the calibration text (ropecli's training plays, handed in with the map by the evaluator and the export:
`scaled(..., calibration=)`, `pair_selection(bound, calibration)`; never an evaluation's text: `maps.pair_selection`'s CALIBRATION) in windows of min(Ls, 4096) tokens, under the identity map, whose attention sees the queries and keys
before rotation and otherwise runs the model as shipped (`maps.mapped_attention`). Per layer, head h and pair m:
the mean over tokens of |q_{t,h,m}| |k_{t,h',m}| (h' the key head of h), as DPE's qk_2_norm_select_dim.py computes it.
"""

from __future__ import annotations

import numpy as np

from ropecli.deferred import deferred
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.pair_selection import CALIBRATION_TOKENS, CALIBRATION_WINDOW
from ropecli.maps.position_maps import bind

torch = deferred("torch")

_MEMO: dict = {}  # (model id, its fingerprint) -> contributions: one calibration per model and process


def pair_norms(x: torch.Tensor, pair: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D) -> (B, H, T, pairs): the 2-norm of each rotary pair's two components (`pair` (D,): each column's
    pair as the model rotates it, -1 for a column that does not rotate: `map_layers.column_pairs`)."""
    on = pair >= 0
    out = torch.zeros(*x.shape[:-1], int(pair.max()) + 1, dtype=torch.float32, device=x.device)
    return out.index_add_(-1, pair[on], x[..., :pair.numel()][..., on].float().pow(2)).sqrt_()


def calibration_windows(tokenizer, Ls: int, texts: dict[str, str]) -> list[np.ndarray]:
    """CALIBRATION_TOKENS of `texts` (ropecli's training plays: `evaluation.corpus.training_plays`) in windows of
    min(Ls, CALIBRATION_WINDOW) tokens, from the first text on."""
    n = min(Ls, CALIBRATION_WINDOW)
    ids = []
    for name in texts:
        ids.extend(tokenizer(texts[name], add_special_tokens=False)["input_ids"])
        if len(ids) >= CALIBRATION_TOKENS:
            break
    ids = np.asarray(ids[:CALIBRATION_TOKENS], dtype=np.int64)
    return [ids[s:s + n] for s in range(0, len(ids) - n + 1, n)]


def pair_contributions(model, windows: list[np.ndarray]) -> dict[int, np.ndarray]:
    """{layer index: (heads, pairs) mean over the windows' tokens of |q_m| |k_m|} for every layer a map moves."""
    sums: dict[int, torch.Tensor] = {}
    tokens: dict[int, int] = {}
    rotating: dict[int, np.ndarray] = {}

    def observe(module, query, key, pair):
        qn, kn = pair_norms(query, pair), pair_norms(key, pair)  # (B, H, T, P), (B, H_kv, T, P)
        kn = kn.repeat_interleave(qn.shape[1] // kn.shape[1], dim=1)
        layer = module.layer_idx
        sums[layer] = sums.get(layer, 0) + (qn * kn).sum(dim=(0, 2)).double().cpu()
        tokens[layer] = tokens.get(layer, 0) + qn.shape[0] * qn.shape[2]
        rotating[layer] = torch.bincount(pair[pair >= 0].cpu(), minlength=qn.shape[-1]).numpy() > 0

    device = next(model.parameters()).device
    # windows shorter than CALIBRATION_WINDOW go together, CALIBRATION_WINDOW tokens a pass (a model with Ls = 32 reads
    # its 16,384 tokens in 4 passes, not 512); at Ls >= CALIBRATION_WINDOW each window is its own pass, as before
    per_pass = max(1, CALIBRATION_WINDOW // max(1, len(windows[0]))) if windows else 1
    with torch.no_grad(), mapped(model, bind("none", {}), observe=observe):
        for s in range(0, len(windows), per_pass):
            model(torch.from_numpy(np.stack(windows[s:s + per_pass])).to(device))
    # a pair index no column turns at (a frequency of 0 inside p-RoPE's rotated part): NaN, never selected
    return {layer: np.where(rotating[layer], (sums[layer] / tokens[layer]).numpy(), np.nan) for layer in sorted(sums)}


def model_contributions(backend, texts: dict[str, str]) -> dict[int, np.ndarray]:
    """The backend's model's contributions on the calibration `texts`, computed once per model and process."""
    key = (id(backend.model), backend.fingerprint)
    if key not in _MEMO:
        _MEMO[key] = pair_contributions(backend.model, calibration_windows(backend.tokenizer, backend.rope.shipped_len,
                                                                           texts))
    return _MEMO[key]
