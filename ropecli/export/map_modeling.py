"""A transformers model that runs under a position map, written by `ropecli export --to transformers --map MAP` into
the exported folder as `modeling_ropecli_map.py` and loaded with `from_pretrained(folder, trust_remote_code=True)`.

This file imports torch and transformers only (never ropecli): the export copies it verbatim, with the model's own
class named in BASE_CLASS and the map's region function (ropecli's own source) pasted below REGIONS. The map and its
parameters are read from config.json's `ropecli_map`. Each forward pass (the prefill and every decoded token) runs
with the model's rotary modules handing out cos = 1, sin = 0, so keys enter the KV cache unrotated, and one attention
function rotates queries and keys per region at the map's positions (the rotary module's own frequencies, the model's
own `apply_rotary_pos_emb`) and takes one softmax over the regions (each pair belongs to one region), QUERY_BLOCK
queries at a time: on the CPU each region's band of keys in torch's fused kernel, merged by log-sum-exp; elsewhere, and
where the model soft-caps its logits, explicit scores (correct on any device, not fast). Only the layers that attend
globally with RoPE are mapped; sliding, NoPE, linear-attention and convolution layers run the model's own attention.
ropecli's own `ropecli.models.mapped_attention` is what it is tested against."""

from __future__ import annotations

import inspect
import sys
from functools import partial
from typing import Any, Callable, NamedTuple

import numpy as np  # noqa: F401  (a pasted region function may build numpy positions)
import torch
import transformers
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

BASE_CLASS = "LlamaForCausalLM"  # the model's own class (the export writes it)
NAME = "ropecli_map_export"
REGION_FUNCTION = ""  # the pasted region function's name (the export writes it with the function)
QUERY_BLOCK = 256
POSITIONLESS = ("linear_attention", "conv", "mamba", "mamba2")


class RopeCliError(ValueError):
    """A map's parameters out of their domain (the region functions below raise it)."""


class Region(NamedTuple):
    name: str
    where: Callable  # (i as a column, j as a row) -> bool: the region's pairs
    query: Callable  # i -> the query's rotation position
    key: Callable  # j -> the key's rotation position
    scale: float = 1.0  # the region's logits multiplied by it


def _same(p):
    return p


# REGIONS: the map's region function, ropecli's own source, pasted by the export below this line


def map_regions() -> Callable[..., tuple]:
    """The pasted region function (the one module-level function named in REGION_FUNCTION)."""
    return globals()[REGION_FUNCTION]


class LayerPlan(NamedTuple):
    rope: str | None  # the rotary module's layer type ("" for one RoPE), None: no positions
    mapped: bool  # attends globally with RoPE
    window: int | None  # a sliding window


def plan_layers(config) -> list[LayerPlan]:
    """Per layer: which RoPE it uses and whether the map changes it (ropecli's `models.map_layers.plan_layers`)."""
    n = config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not (isinstance(types, (list, tuple)) and len(types) == n):
        sliding = window and getattr(config, "use_sliding_window", True) is not False
        types = ["sliding_attention" if sliding else "full_attention"] * n
    rope_on = getattr(config, "no_rope_layers", None)
    if not (isinstance(rope_on, (list, tuple)) and len(rope_on) == n):
        exaone = getattr(config, "model_type", "") == "exaone4" and window
        rope_on = [int(t == "sliding_attention") for t in types] if exaone else [1] * n
    plans = []
    for t, r in zip(types, rope_on):
        if t in POSITIONLESS or not r:
            plans.append(LayerPlan(None, False, None))
        else:
            plans.append(LayerPlan(t, t == "full_attention", window if t == "sliding_attention" else None))
    return plans


def own_apply(module) -> Callable:
    """The model's own rotation as (x, cos, sin) -> x: its apply_rotary_pos_emb, on the first rotary dims where the
    attention slices them off before calling it (Phi, StableLM)."""
    fn = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb")
    names = list(inspect.signature(fn).parameters)
    one = fn if len(names) > 1 and names[1] == "cos" else (lambda x, cos, sin: fn(x, x, cos, sin)[0])

    def apply(x, cos, sin):
        if cos.shape[-1] == x.shape[-1]:
            return one(x, cos, sin)
        try:
            return one(x, cos, sin)
        except RuntimeError:
            d = cos.shape[-1]
            return torch.cat((one(x[..., :d], cos, sin), x[..., d:]), dim=-1)

    return apply


class MapDispatch:
    """The attention function while a forward pass runs: mapped layers through `map_attention`, the others through
    the model's own attention after their own rotation at their true relative positions."""

    def __init__(self, plans, rotaries: dict, regions_for, implementation: str, selection: dict | None = None):
        self.plans, self.rotaries, self.regions_for, self.implementation = plans, rotaries, regions_for, implementation
        self.selection, self._cols = selection or {}, {}  # {layer: per head, the pairs the map moves} (DPE's top < 1)

    def rotate(self, module, plan, x, positions, true=None):
        """x rotated at `positions`; under a key-pair selection only the selected pairs' columns, the others at the
        `true` positions (a pair's rotated columns depend on its own angle alone)."""
        cos, sin = trig_at(self.rotaries[plan.rope], x, positions)
        out = own_apply(module)(x, cos, sin)
        cols = self.columns(module, plan, x) if true is not None else None
        if cols is None:
            return out
        cos, sin = trig_at(self.rotaries[plan.rope], x, true)
        return torch.where(cols, out, own_apply(module)(x, cos, sin))

    def columns(self, module, plan, x):
        """(1, H, 1, D) bool: the columns of the layer's selected pairs per head; None where every pair moves."""
        layer = module.layer_idx
        if layer not in self.selection:
            return None
        if layer not in self._cols:
            pair, P = self.column_pairs(module, plan, x)
            heads = self.selection[layer]
            if len(heads) != x.shape[1] or any(m >= P for h in heads for m in h):
                raise ValueError(f"config.json ropecli_map.pairs, layer {layer}: {len(heads)} heads of pairs below {P} "
                                 f"expected {x.shape[1]}: export the folder again from this model")
            sel = torch.zeros(len(heads), P, dtype=torch.bool, device=x.device)
            for h, pairs in enumerate(heads):
                sel[h, pairs] = True
            cols = torch.zeros(sel.shape[0], x.shape[-1], dtype=torch.bool, device=x.device)
            cols[:, pair >= 0] = sel[:, pair[pair >= 0]]
            self._cols[layer] = cols[None, :, None, :]
        return self._cols[layer]

    def column_pairs(self, module, plan, x):
        """((head dims,) each column's rotary pair as the model rotates it, -1 where it does not rotate; pairs): each
        column alone rotated at position 1 by the model's own apply, the weight it moves matched to the module's sines
        (ropecli's `models.map_layers.column_pairs`)."""
        D = x.shape[-1]
        probe = torch.eye(D, dtype=torch.float32, device=x.device)[None, None]
        cos, sin = self.rotaries[plan.rope](probe, torch.ones(1, D, device=x.device))
        out = own_apply(module)(probe, cos.float(), sin.float())[0, 0]
        moved = (out - torch.diag(torch.diagonal(out))).abs().amax(dim=1)
        s = sin[0, 0].float().abs()
        P = s.shape[-1] // 2
        per_pair = s[:P] if torch.equal(s[:P], s[P:]) else s[0::2]
        gap = (moved.clamp_min(1e-30).log()[:, None] - per_pair.clamp_min(1e-30).log()[None, :]).abs()
        return torch.where(moved > 0, gap.argmin(dim=1), torch.full_like(moved, -1, dtype=torch.long)), P


    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        plan = self.plans[module.layer_idx]
        Tq, Tk = query.shape[2], key.shape[2]
        window = kwargs.get("sliding_window") or plan.window
        pos = kwargs.get("position_ids")  # the sequence so far: a sliding cache hands a step only the window's keys
        seen = int(pos.max()) + 1 if isinstance(pos, torch.Tensor) and pos.numel() else Tk
        if plan.rope is not None and (plan.mapped if window is None else window >= seen):
            return map_attention(self, module, plan, query, key, value, scaling, kwargs.get("softcap"),
                                 kwargs.get("s_aux"))
        if plan.rope is not None:
            query = self.rotate(module, plan, query, torch.arange(Tk - Tq, Tk, device=query.device))
            key = self.rotate(module, plan, key, torch.arange(Tk, device=key.device))
        if self.implementation in ALL_ATTENTION_FUNCTIONS:
            fn = ALL_ATTENTION_FUNCTIONS[self.implementation]
        else:
            fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
        return fn(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def trig_at(rotary, x, positions):
    """cos, sin (1, T, rotary dims) at positions (T,), or at positions (T, groups) that differ per group of rotary
    pairs (group g: the pairs m with floor(m groups / pairs) = g), each group's columns from the rotary module's own
    output at its positions, in its layout (ropecli's `models.map_rotation.trig_at`)."""
    if positions.ndim == 1:
        return rotary(x, positions.to(torch.float32)[None, :])
    per = [rotary(x, positions[:, g].to(torch.float32)[None, :]) for g in range(positions.shape[1])]
    c = rotary(x, torch.ones(1, 1, device=x.device))[0][0, 0]  # at position 1: the layout of the pairs' columns
    D, P = c.shape[-1], c.shape[-1] // 2
    pair = torch.arange(D, device=x.device) % P if torch.equal(c[:P], c[P:]) else torch.arange(D, device=x.device) // 2
    cols = pair * positions.shape[1] // P
    cos, sin = per[0][0].clone(), per[0][1].clone()
    for g in range(1, len(per)):
        cos[..., cols == g], sin[..., cols == g] = per[g][0][..., cols == g], per[g][1][..., cols == g]
    return cos, sin


def _flash_kernel(query, softcap):
    """torch's fused CPU attention that also returns the log-sum-exp (a private op, hence looked up): on the CPU and
    where no soft-capping is needed; None elsewhere (explicit scores then)."""
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return op if query.device.type == "cpu" and not softcap else None


def map_attention(dispatch, module, plan, query, key, value, scaling, softcap, sinks):
    """Queries (B, H, T_q, D), the last T_q of the keys (B, H_kv, T_k, D): per region the rotated scores on its pairs
    (the regions partition the causal pairs) under one softmax, QUERY_BLOCK queries at a time -> (B, T_q, H, D). On the
    CPU each region's band of keys runs in the fused kernel and the regions merge by their log-sum-exp (the same
    softmax, never a score matrix); elsewhere the scores are explicit and combined before one softmax."""
    B, H, Tq, D = query.shape
    Tk, groups = key.shape[2], H // key.shape[1]
    scaling = D ** -0.5 if scaling is None else scaling
    fused = _flash_kernel(query, softcap)
    if fused is None or module.layer_idx in dispatch.selection:  # the fused kernel takes grouped keys as they are;
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # not a per-head choice
    regions, kj = dispatch.regions_for(Tk), torch.arange(Tk, device=query.device)
    keys = [dispatch.rotate(module, plan, key, r.key(kj), kj) for r in regions]
    out = torch.empty(B, Tq, H, D, dtype=value.dtype, device=value.device)
    for s in range(0, Tq, QUERY_BLOCK):
        qi = torch.arange(Tk - Tq + s, Tk - Tq + min(Tq, s + QUERY_BLOCK), device=query.device)
        n = int(qi[-1]) + 1  # the block's keys: none past its last query
        causal = qi[:, None] >= kj[None, :n]
        bands = []  # (region, its rotated key, mask, lo, hi): the band of keys the region reaches from this block
        for r, k in zip(regions, keys):
            mask = r.where(qi[:, None], kj[None, :n]) & causal
            cols = mask.any(dim=0).nonzero()
            if len(cols):
                bands.append((r, k, mask, int(cols[0]), int(cols[-1]) + 1))
        block = query[:, :, s:s + len(qi)]
        if fused is not None:
            merged, lse = fused_block(fused, dispatch, module, plan, block, qi, bands, value, scaling)
            merged = merged if sinks is None else with_sinks(merged, lse, sinks)
        else:
            merged = explicit_block(dispatch, module, plan, block, qi, bands, value[:, :, :n], scaling, softcap, sinks)
        out[:, s:s + len(qi)] = merged.to(value.dtype).transpose(1, 2)
    return out, None


def fused_block(fused, dispatch, module, plan, block, qi, bands, value, scaling):
    """One query block, region by region in the fused kernel, merged by log-sum-exp -> (out (B, H, n, D) float32,
    its log-sum-exp (B, H, n))."""
    B, H, n, D = block.shape
    acc = torch.zeros(B, H, n, D, dtype=torch.float32, device=block.device)
    lse = torch.full((B, H, n), float("-inf"), dtype=torch.float32, device=block.device)
    for r, k, mask, lo, hi in bands:
        band = mask[:, lo:hi]
        rows = band.any(dim=1)  # (n,): the queries with a key in this region
        bias = None if bool(band.all()) else \
            torch.zeros(band.shape, dtype=block.dtype, device=block.device).masked_fill_(~band, float("-inf"))
        q = dispatch.rotate(module, plan, block, r.query(qi), qi).contiguous()
        o, l = fused(q, k[:, :, lo:hi].contiguous(), value[:, :, lo:hi].contiguous(), 0.0, False,
                     attn_mask=None if bias is None else bias[None, None], scale=scaling * r.scale)
        o, l = o.float().masked_fill(~rows[:, None], 0.0), l.float().masked_fill(~rows, float("-inf"))
        total = torch.logaddexp(lse, l)
        keep = torch.exp(lse - total).nan_to_num_(0.0)[..., None]  # -inf - -inf: a row no region has reached yet
        acc = acc * keep + o * torch.exp(l - total).nan_to_num_(0.0)[..., None]
        lse = total
    return acc, lse


def with_sinks(out, lse, sinks):
    """gpt-oss: out over keys of log-sum-exp lse, renormalised as if each head's sink logit (H,) were one more key."""
    total = torch.logaddexp(lse, sinks.float()[None, :, None])
    return out * torch.exp(lse - total)[..., None]


def explicit_block(dispatch, module, plan, block, qi, bands, value, scaling, softcap, sinks):
    """One query block with explicit float32 scores (B, H, n, keys), combined over the regions, one softmax."""
    B, H, n, D = block.shape
    scores = torch.full((B, H, n, value.shape[2]), float("-inf"), device=block.device)
    for r, k, mask, lo, hi in bands:
        q = dispatch.rotate(module, plan, block, r.query(qi), qi)
        part = torch.matmul(q, k[:, :, lo:hi].transpose(-1, -2)).float() * (scaling * r.scale)
        part = torch.tanh(part / softcap) * softcap if softcap else part
        scores[..., lo:hi] = torch.where(mask[:, lo:hi], part, scores[..., lo:hi])
    if sinks is not None:  # gpt-oss: one more logit per head in the softmax, with no value
        sink = sinks.float().reshape(1, H, 1, 1).expand(B, H, n, 1)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights.to(value.dtype), value)


def _identity(forward):
    def identity(x, position_ids, *args, **kwargs):  # the real output's shapes and dtypes, no rotation
        cos, sin = forward(x, position_ids, *args, **kwargs)
        return torch.ones_like(cos), torch.zeros_like(sin)

    return identity


def rotary_modules(model) -> dict[str, Any]:
    """{layer type or "": the rotary module's real forward for it}."""
    found = {}
    for mod in model.modules():
        if isinstance(getattr(mod, "inv_freq", None), torch.Tensor):
            found[""] = (mod, None)
        for lt in getattr(mod, "layer_types", None) or []:
            if isinstance(getattr(mod, f"{lt}_inv_freq", None), torch.Tensor):
                found[lt] = (mod, lt)
    return found


Base = getattr(transformers, BASE_CLASS)


class RopecliMapForCausalLM(Base):
    """The model under config.ropecli_map (its name and parameters) in every forward pass, generation included."""

    def forward(self, *args, **kwargs):
        config = self.config.get_text_config() if hasattr(self.config, "get_text_config") else self.config
        spec = self.config.ropecli_map
        params = spec["params"]
        plans = plan_layers(config)
        found = rotary_modules(self)
        modules = {id(m): m for m, _ in found.values()}
        real = {key: m.forward for key, m in modules.items()}
        rotaries = {}
        for plan in plans:
            if plan.rope is not None and plan.rope not in rotaries:
                module, lt = found.get(plan.rope) or found[""]
                rotaries[plan.rope] = partial(real[id(module)], layer_type=lt) if lt else real[id(module)]
        before = config._attn_implementation
        regions_for = lambda n: map_regions()(**params)  # noqa: E731  (every map's regions are the same at any length)
        selection = {int(layer): heads for layer, heads in (spec.get("pairs") or {}).items()}
        ALL_ATTENTION_FUNCTIONS[NAME] = MapDispatch(plans, rotaries, regions_for, before, selection)
        masks = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping
        if before in masks:
            masks[NAME] = masks[before]
        for key, m in modules.items():
            m.forward = _identity(real[key])
        for c in {id(self.config): self.config, id(config): config}.values():
            c._attn_implementation = NAME
        try:
            return super().forward(*args, **kwargs)
        finally:
            for key, m in modules.items():
                m.forward = real[key]
            for c in {id(self.config): self.config, id(config): config}.values():
                c._attn_implementation = before
            masks.pop(NAME, None)
