"""Which layers a position map changes, and the attention function that dispatches per layer.

A map changes the layers that attend globally with RoPE ("RoPE full", also beside a Mamba; a sliding layer whose
window reaches every key of the call). Every other layer runs the model's own attention with its own arguments
(sliding window, soft-capping, its mask): a sliding layer whose window is below the context never sees a distance it
was not trained on, NoPE, linear-attention, convolution and Mamba layers have no positions. While the map is open the
rotary modules hand every layer cos = 1, sin = 0 (`maps.mapped_attention`), so an unmapped RoPE layer is rotated here
at its true relative positions (keys 0 … T_k - 1, queries the last T_q of them: RoPE scores depend on differences only)
by its own rotary module and layer type, through the model's own `apply_rotary_pos_emb` where the rotary dims are not the
whole head (partial rotary: the model's layout, first dims or interleaved, is the model's code's).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.models.layer_kinds import POSITIONLESS, rope_flags

torch = deferred("torch")


@dataclass(frozen=True)
class LayerPlan:
    """What one layer of a model is under a map: `mapped` (RoPE attending globally), `rope` (its rotary slot index, None:
    no positions), `sliding` (its window, None: global)."""
    kind: str
    mapped: bool
    rope: int | None
    sliding: int | None = None


def plan_layers(text, slots, length: int | None = None) -> list[LayerPlan]:
    """Per layer of a (text) config: its kind and whether a map changes it, decided once for the `length` the map runs
    at (default: the model's L): a sliding layer is mapped where its window reaches `length`, and otherwise runs as
    shipped at every length, so decoding from a prompt inside its window past it is one pass; refused in
    one line where no layer is left to map (sliding windows shorter than L included) or a layer's RoPE is one the map
    cannot rotate (chunked: Llama 4's complex rotation)."""
    config = text.to_dict()
    n = int(getattr(text, "num_hidden_layers", None) or config["num_hidden_layers"])  # an alias (LongCat: num_layers)
    types = config.get("layer_types")
    window = config.get("sliding_window")
    if not (isinstance(types, (list, tuple)) and len(types) == n):  # no layer types: a window, if any, on every layer
        sliding = window and config.get("use_sliding_window", True) is not False  # (Mistral; not Qwen2's unused one)
        types = ["sliding_attention" if sliding else "full_attention"] * n
    types = list(types)
    rope_on = rope_flags(config, types)
    by_type = {s.layer_type: i for i, s in enumerate(slots) if s.layer_type}
    plans = []
    for t, r in zip(types, rope_on):
        if t in POSITIONLESS or not r:
            plans.append(LayerPlan(POSITIONLESS.get(t, f"NoPE {t.removesuffix('_attention')}"), False, None))
            continue
        slot = by_type.get(t, 0) if by_type else 0
        if t == "chunked_attention":
            plans.append(LayerPlan("RoPE chunked", False, slot))
        elif t == "sliding_attention":
            plans.append(LayerPlan("RoPE sliding", bool(window) and window >= (length or trained_len(config)), slot,
                                   window))
        elif t == "full_attention":
            plans.append(LayerPlan("RoPE full", True, slot))
        elif t == "indexed_attention":  # DeepSeek Sparse Attention: its indexer picks the keys by its own RoPE scores
            raise RopeCliError("a position map on DeepSeek Sparse Attention's indexed layers (DeepSeek V3.2, GLM MoE DSA, "
                               "HY V4) is not supported: their lightning indexer chooses each query's keys by scores "
                               "under its own RoPE, which the map would have to move too; not mapped")
        else:
            raise RopeCliError(f"a position map on '{t}' layers is not supported; pass a model whose RoPE layers are "
                               "full or sliding attention")
    trained = trained_len(config)  # a window as long as L: global wherever it reaches every key
    if not any(p.mapped or (p.sliding or 0) >= max(1, trained) for p in plans):
        kinds = sorted({p.kind for p in plans})
        raise RopeCliError(f"no layer to map: this model's layers are {', '.join(kinds)}; a map changes RoPE layers that "
                           "attend past L (chunked and sliding layers attend within their chunk or window, NoPE layers "
                           "have no positions)")
    if any(p.kind == "RoPE chunked" for p in plans):
        raise RopeCliError("a position map beside chunked RoPE layers (Llama 4) is not supported: their rotation is "
                           "complex-valued inside chunks; the long range is the NoPE layers'")
    return plans


def trained_len(config: dict) -> int:
    return int(config.get("max_position_embeddings") or 0)


def model_apply_rotary(module) -> Callable | None:
    """The model's own `apply_rotary_pos_emb(q, k, cos, sin, ...)` from the attention module's modeling file."""
    return getattr(sys.modules.get(type(module).__module__), "apply_rotary_pos_emb", None)


def own_attention(module, implementation: str, functions) -> Callable:
    """The attention function the model runs on `module` unpatched: transformers' registered one, or the modeling
    file's `eager_attention_forward`."""
    if implementation in functions:
        return functions[implementation]
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise RopeCliError(f"{type(module).__name__}: its attention function ({implementation}) was not found; pass "
                           "--attn-implementation sdpa or eager")
    return fn


class LayerDispatch:
    """The attention function registered while a map is open: mapped layers go to their `MappedAttention` (one per
    rotary slot), the others to the model's own attention after their own rotation."""

    def __init__(self, plans: list[LayerPlan], mapped_by_slot: dict, rotaries: list, implementation: str, functions):
        self.plans, self.mapped_by_slot, self.rotaries = plans, mapped_by_slot, rotaries
        self.implementation, self.functions = implementation, functions

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        idx = getattr(module, "layer_idx", None)
        plan = self.plans[idx] if idx is not None and idx < len(self.plans) else LayerPlan("RoPE full", True, 0)
        Tq, Tk = query.shape[2], key.shape[2]
        if plan.rope is not None and plan.mapped:  # decided once for the length (`plan_layers`), never per call
            return self.mapped_by_slot[plan.rope](module, query, key, value, attention_mask, scaling=scaling,
                                                  dropout=dropout, **kwargs)
        if plan.rope is not None:
            query = self.rotaries[plan.rope](module, query, torch.arange(Tk - Tq, Tk, device=query.device))
            key = self.rotaries[plan.rope](module, key, torch.arange(Tk, device=key.device))
        fn = own_attention(module, self.implementation, self.functions)
        return fn(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def rotator(real_forward, layer_type: str | None) -> Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor]:
    """(module, x (B, H, T, D), positions (T,)) -> x rotated at the positions by the rotary module's real forward for
    `layer_type`: rotate-half on the whole head, or the model's own apply function where rotary dims < head dims."""
    forward = partial(real_forward, layer_type=layer_type) if layer_type else real_forward

    def rotate(module, x, positions):
        cos, sin = forward(x, positions.to(torch.float32)[None, :])
        return rotate_with(module, x, cos, sin)

    return rotate


_HALF: dict[type, bool] = {}  # per attention class: its model's apply function is rotate-half (probed once)
_FIRST: dict[type, bool] = {}  # per attention class, partial rotary: the model rotates the first dims itself


def rotate_with(module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D) rotated by cos, sin (1, T, rotary dims) as the model rotates: MLA's last rotary dims rotate-half
    (`latent_rope`); rotate-half where the model's own
    `apply_rotary_pos_emb` is rotate-half over the whole head (probed once per attention class on a slice with a
    non-zero angle), else the model's own function (interleaved pairs: Cohere), on the whole head where it splits off
    the rotary dims itself (GPT-NeoX, Qwen3.5, GLM), on the first rotary dims where the attention slices them before
    calling it (Phi, StableLM)."""
    d = cos.shape[-1]
    if latent_rope(module) == d and d < x.shape[-1]:  # MLA: the rope part is each head's last d dims, rotate-half
        return torch.cat((x[..., :-d], _half(x[..., -d:], cos, sin)), dim=-1)
    apply = own_apply(module)
    if cos.shape[-1] == x.shape[-1]:
        half = _HALF.get(type(module))
        if half is None:
            half = True if apply is None else _same_as_half(apply, x, cos, sin)
            if half is not None:
                _HALF[type(module)] = half
        if half or apply is None:
            return _half(x, cos, sin)
        return apply(x, cos, sin)
    if apply is None:
        raise RopeCliError(f"{type(module).__name__}: partial rotary ({cos.shape[-1]} of {x.shape[-1]} dims) without "
                           "the model's apply_rotary_pos_emb: not mapped")
    if not _FIRST.get(type(module)):
        try:
            return apply(x, cos, sin)
        except RuntimeError:  # its rotary dims are not its head's: the attention slices them off first
            _FIRST[type(module)] = True
    d = cos.shape[-1]
    return torch.cat((apply(x[..., :d], cos, sin), x[..., d:]), dim=-1)


def latent_rope(module) -> int | None:
    """Multi-head latent attention (DeepSeek V2/V3, Kimi K2, Mistral 4): the rope part's width, the last dims of each
    head (the attention concatenates (q_pass, q_rot) and (k_nope, k_rot): modeling_deepseek_v3.py and
    modeling_mistral4.py, `forward` / `expand_kv`); None for any other attention. Under a map the rotary module hands
    cos = 1, sin = 0, so the model's own apply function leaves q_rot and the shared k_rot unrotated (where it
    interleaves, `apply_rotary_pos_emb_interleave` has already put the pairs in rotate-half order, the order its cos
    is in): they are rotated here, rotate-half on those dims, and the latent part is scored as is."""
    d, nope = getattr(module, "qk_rope_head_dim", None), getattr(module, "qk_nope_head_dim", None)
    return int(d) if d and nope is not None else None


def own_apply(module) -> Callable | None:
    """The model's own rotation as (x, cos, sin) -> x rotated: its `apply_rotary_pos_emb(q, k, cos, sin)` (the query
    half of its answer) or, where it takes one tensor, `apply_rotary_pos_emb(x, cos, sin)` (Gemma 4)."""
    fn = model_apply_rotary(module)
    if fn is None:
        return None
    names = list(inspect.signature(fn).parameters)
    if len(names) > 1 and names[1] == "cos":
        return fn
    return lambda x, cos, sin: fn(x, x, cos, sin)[0]


def _half(x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin[:, None]


def _same_as_half(apply, x, cos, sin) -> bool | None:
    """Whether the model's apply function is rotate-half on these cos and sin (8 positions, one head); None (use the
    model's this time) while every angle is still zero (position 0 alone)."""
    x, cos, sin = x[:1, :1, :8].float(), cos[:1, :8].float(), sin[:1, :8].float()
    if not sin.abs().max() > 0:
        return None
    return bool(torch.allclose(apply(x, cos, sin), _half(x, cos, sin), atol=1e-5))


def column_pairs(module, rotary, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """((head dims,) the rotary pair, i.e. the frequency index m, of each column of a head as this model rotates it, -1
    for a column that does not rotate; the module's number of pairs). Probed, not assumed from the module's cos: each
    column alone is rotated at position 1 (`rotate_with`, the model's own apply function where it has one), and the
    weight it moves to its partner, |a sin θ_m|, is matched to the module's own sines, so a model whose cos is
    rotate-half but whose apply rotates interleaved pairs (GLM, ERNIE 4.5, Helium) is read as it rotates. A frequency
    of 0 (p-RoPE's unrotated pairs) moves nothing: -1."""
    D = x.shape[-1]
    probe = torch.eye(D, dtype=torch.float32, device=x.device)[None, None]  # token c: the unit vector of column c
    cos, sin = rotary(probe, torch.ones(1, D, device=x.device))
    out = rotate_with(module, probe, cos.float(), sin.float())[0, 0]
    moved = (out - torch.diag(torch.diagonal(out))).abs().amax(dim=1)  # (D,): |a sin θ| of the column's pair
    s = sin[0, 0].float().abs()  # (rotary dims,) in the module's layout
    P = s.shape[-1] // 2
    per_pair = s[:P] if torch.equal(s[:P], s[P:]) else s[0::2]  # (P,) |a sin θ_m|, rotate-half or interleaved cos
    gap = (moved.clamp_min(1e-30).log()[:, None] - per_pair.clamp_min(1e-30).log()[None, :]).abs()
    pair = torch.where(moved > 0, gap.argmin(dim=1), torch.full_like(moved, -1, dtype=torch.long))
    if (torch.bincount(pair[pair >= 0], minlength=P) > 2).any():
        raise RopeCliError(f"{type(module).__name__}: two rotary pairs turn at the same frequency; their columns cannot "
                           "be told apart for a per-pair choice")
    return pair, P
