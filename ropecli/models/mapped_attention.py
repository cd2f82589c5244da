"""A position map (`ropecli.rope.position_maps`) inside a transformers model: queries and keys rotated per region.

While `mapped(model, name, params)` is open, the model's rotary module hands the attention layers cos = 1, sin = 0, so
queries and keys arrive unrotated (and the KV cache keeps its keys unrotated: cached decoding follows the same map),
and one attention function, registered through transformers' attention interface, rotates them itself: for each
region the queries at the region's query positions and the keys at its key positions, with the rotary module's own
frequencies and attention scaling (whatever schedule `models.patch` wrote there). The regions' scores are merged under
their masks before one softmax, query block by query block: memory per layer is one (B, H, block, T_k) score tensor,
never a T x T matrix per head for the whole window. Queries are the last T_q of the T_k keys (a prefill, or decoding
with a cache; one sequence, no padding).

Refused in one line: a model with more than one rotary module (per-layer-type RoPE: Gemma 3), partial rotary (the map
would rotate dims the model leaves alone), and models whose attention does not take the rotary cos/sin (MLA).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from ropecli.errors import RopeCliError
from ropecli.models.patch import find_rotary_slots, text_config
from ropecli.rope.position_maps import map_params, resolve_map

NAME = "ropecli_mapped"
BLOCK = 256  # queries per block: the score tensor is (B, H, BLOCK, T_k)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotated(x: torch.Tensor, positions: torch.Tensor, rotary) -> torch.Tensor:
    """x (B, H, T, D) rotated at `positions` (T,) by the rotary module's own forward (its frequencies and scaling)."""
    cos, sin = rotary(x, positions.to(torch.float32)[None, :])  # (1, T, D)
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


class MappedAttention:
    """The attention function of one map: `__call__(module, query, key, value, attention_mask, scaling, ...)`."""

    def __init__(self, regions, rotary, block: int = BLOCK):
        self.regions, self.rotary, self.block = regions, rotary, block

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        if kwargs.get("sliding_window") or kwargs.get("softcap"):  # the map would silently attend past the window
            raise RopeCliError("a position map on a layer with a sliding window or logit soft-capping is not supported "
                               "yet (Mistral's sliding window, Gemma 2's soft-capping); pass a model without them")
        B, H, Tq, D = query.shape
        Tk = key.shape[2]
        groups = H // key.shape[1]  # GQA / MQA: each key head serves `groups` query heads
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        scaling = D ** -0.5 if scaling is None else scaling
        kj = torch.arange(Tk, device=query.device)
        keys = [rotated(key, r.key(kj), self.rotary) for r in self.regions]  # each region's keys, rotated once
        out = torch.empty(B, H, Tq, D, dtype=value.dtype, device=value.device)
        for start in range(0, Tq, self.block):
            qi = torch.arange(Tk - Tq + start, Tk - Tq + min(Tq, start + self.block), device=query.device)
            q = query[:, :, start:start + len(qi)]
            d = qi[:, None] - kj[None, :]  # (block, T_k)
            scores = torch.full((B, H, len(qi), Tk), float("-inf"), dtype=torch.float32, device=query.device)
            for r, k in zip(self.regions, keys):
                mask = r.where(qi[:, None], kj[None, :]) & (d >= 0)
                reach = mask.any(dim=0).nonzero()
                if len(reach):  # only the keys this region reaches from this block: a band, not every key
                    lo, hi = int(reach[0]), int(reach[-1]) + 1
                    s = torch.matmul(rotated(q, r.query(qi), self.rotary), k[:, :, lo:hi].transpose(-1, -2)).float() * scaling
                    scores[..., lo:hi] = torch.where(mask[:, lo:hi], s, scores[..., lo:hi])
            probs = torch.softmax(scores, dim=-1).to(value.dtype)
            out[:, :, start:start + len(qi)] = torch.matmul(probs, value)
        return out.transpose(1, 2).contiguous(), None


def _identity_rotary(rotary):
    real = rotary.forward

    def forward(x, position_ids, *args, **kwargs):  # the shapes and dtypes of the real output, no rotation
        cos, sin = real(x, position_ids, *args, **kwargs)
        return torch.ones_like(cos), torch.zeros_like(sin)

    return real, forward


@contextmanager
def mapped(model, name: str, params: dict[str, float] | None = None, block: int = BLOCK):
    """Run `model` under the position map `name` (its parameters checked first) until the block ends; the attention
    implementation and the rotary module are put back after, whatever happens."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    regions = resolve_map(name).regions(**map_params(name, params or {}))
    slots = find_rotary_slots(model)
    if len(slots) != 1 or slots[0].layer_type is not None:
        raise RopeCliError(f"{name}: a model with RoPE per layer type ({len(slots)} rotary modules) is not mapped yet; "
                           "pass a model with one rotary module (LLaMA, Mistral, Qwen)")
    cfg = text_config(model)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if slots[0].rotary_dim != head_dim:
        raise RopeCliError(f"{name}: partial rotary (rotary dim {slots[0].rotary_dim} of head dim {head_dim}) is not "
                           "mapped yet; the map would rotate dimensions the model leaves alone")
    if getattr(cfg, "kv_lora_rank", None):
        raise RopeCliError(f"{name}: multi-head latent attention (MLA) rotates a separate rope part of each head; "
                           "position maps need the query and key split it keeps apart: not supported")
    rotary = slots[0].module
    real, identity = _identity_rotary(rotary)
    ALL_ATTENTION_FUNCTIONS[NAME] = MappedAttention(regions, real, block)  # the mapping the layers read
    before = model.config._attn_implementation
    model.config._attn_implementation = NAME
    if cfg is not model.config:
        cfg._attn_implementation = NAME
    rotary.forward = identity
    try:
        yield model
    finally:
        del ALL_ATTENTION_FUNCTIONS[NAME]
        rotary.forward = real
        model.config._attn_implementation = before
        if cfg is not model.config:
            cfg._attn_implementation = before
