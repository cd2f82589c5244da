"""A position map (`ropecli.rope.position_maps`) inside a transformers model: queries and keys rotated per region.

While `mapped(model, name, params)` is open, the model's rotary module hands the attention layers cos = 1, sin = 0, so
queries and keys arrive unrotated (and the KV cache keeps its keys unrotated: cached decoding follows the same map),
and one attention function, registered through transformers' attention interface, rotates them itself: for each
region the queries at the region's query positions and the keys at its key positions, with the rotary module's own
frequencies and attention scaling (whatever schedule `models.patch` wrote there). Query block by query block, each
region attends to the band of keys it reaches under its mask in one fused call (torch's CPU flash kernel, which returns
the log-sum-exp; explicit scores elsewhere), and the regions merge exactly by log-sum-exp: memory per layer is the
block's (block, band) masks, never a T x T matrix per head for the whole window. Queries are the last T_q of the
T_k keys (a prefill, or decoding with a cache; one sequence, no padding).

Refused in one line: a model with more than one rotary module (per-layer-type RoPE: Gemma 3), partial rotary (the map
would rotate dims the model leaves alone), and models whose attention does not take the rotary cos/sin (MLA).
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager

import torch

from ropecli.errors import RopeCliError
from ropecli.models.flex_regions import FlexRegions, flex_available
from ropecli.models.patch import find_rotary_slots, text_config
from ropecli.models.layer_kinds import read_layer_kinds
from ropecli.rope.position_maps import map_params, map_regions

NAME = "ropecli_mapped"
BLOCK = 512  # queries per block: each region's mask is (BLOCK, its band of keys)
MASK_CACHE_BYTES = 256 * 2 ** 20  # one shape's masks, kept across the layers of a forward (bool: a byte a pair)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotated(x: torch.Tensor, positions: torch.Tensor, rotary) -> torch.Tensor:
    """x (B, H, T, D) rotated at `positions` (T,) by the rotary module's own forward (its frequencies and scaling)."""
    cos, sin = rotary(x, positions.to(torch.float32)[None, :])  # (1, T, D)
    return x * cos[:, None] + rotate_half(x) * sin[:, None]


def _fused_for(device: torch.device):
    """torch's CPU flash kernel returning the log-sum-exp (private, hence looked up, not assumed); None elsewhere."""
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return op if device.type == "cpu" else None


def region_attention(q, k, v, mask, scaling: float, fused=None):
    """One region's attention: q (B, H, n, D) against keys k, v (B, H, m, D) under mask (n, m) (None: every pair) ->
    out (B, H, n, D) float32 and log-sum-exp (B, H, n), -inf (and out 0) on rows where the region has no key."""
    if fused is not None:  # scores never materialised: the kernel adds the mask block by block
        bias = None if mask is None else \
            torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))[None, None]
        out, lse = fused(q, k, v, 0.0, False, attn_mask=bias, scale=scaling)
        out, lse = out.float(), lse.float()
    else:  # the twin: explicit scores (B, H, n, m) in float32
        s = torch.matmul(q, k.transpose(-1, -2)).float().mul_(scaling)
        s = s if mask is None else s.masked_fill_(~mask, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        out = torch.matmul(torch.exp(s - lse[..., None]).nan_to_num_(0.0), v.float())
    if mask is None:
        return out, lse
    has = mask.any(-1)  # (n,)
    return out.masked_fill(~has[:, None], 0.0), lse.masked_fill(~has, float("-inf"))


class MappedAttention:
    """The attention function of one map: `__call__(module, query, key, value, attention_mask, scaling, ...)`.
    Per query block and region: the region's rotated queries against the band of keys it reaches, in one fused
    attention call that also returns its log-sum-exp; the regions merge exactly by log-sum-exp weights (a softmax over
    the union of their keys). Memory per layer: one (block, band) mask, never a T x T score matrix per head."""

    def __init__(self, regions, rotary, block: int = BLOCK, fused: bool = True, kernel: str = "auto"):
        """`regions(n)`: the map's regions for n keys. `kernel`: "auto" (flex attention on CUDA where torch has it,
        the fused blocks elsewhere), "flex" (flex attention on any device: eager on the CPU, the twin the tests run) or
        "blocks" (the fused blocks everywhere)."""
        self.regions_for, self.rotary, self.block, self.fused = regions, rotary, block, fused
        self._shape, self._blocks, self.regions = None, [], ()
        self.kernel, self._flex = kernel, {}

    def flex_for(self, device: torch.device):
        """The flex path for `device`, or None where the fused blocks run (a failed compile falls back once, said)."""
        wanted = self.kernel == "flex" or (self.kernel == "auto" and device.type == "cuda")
        if not wanted or not flex_available():
            return None
        if device.type not in self._flex:
            self._flex[device.type] = FlexRegions(self.regions_for, compiled=device.type == "cuda")
        return self._flex[device.type]

    def blocks(self, Tq: int, Tk: int, device) -> list:
        """[(start, query positions, [(region index, lo, hi, mask (block, hi - lo) or None: every pair)])] for T_q queries
        ending at T_k keys. Each region's band of keys splits where its columns stop being reached by every query of the
        block: the full columns (most of Self-Extend's grouped keys, DCA's inter-chunk ones) run unmasked, the rest
        under their mask. The same in every layer, so built once per shape and kept for the next layer while the masks
        fit in MASK_CACHE_BYTES."""
        if self._shape != (Tq, Tk, device):
            self.regions = self.regions_for(Tk)
            kj, out = torch.arange(Tk, device=device), []
            for start in range(0, Tq, self.block):
                qi = torch.arange(Tk - Tq + start, Tk - Tq + min(Tq, start + self.block), device=device)
                causal = qi[:, None] >= kj[None, :]  # (block, T_k)
                bands = []
                for n, r in enumerate(self.regions):
                    mask = r.where(qi[:, None], kj[None, :]) & causal
                    reach = mask.any(dim=0).nonzero()  # only the keys this region reaches from this block: a band
                    if not len(reach):
                        continue
                    lo, hi = int(reach[0]), int(reach[-1]) + 1
                    partial = (~mask[:, lo:hi].all(dim=0)).nonzero()
                    mid = lo + int(partial[0]) if len(partial) else hi  # [lo, mid): every query reaches every key
                    bands += [(n, lo, mid, None)] if mid > lo else []
                    bands += [(n, mid, hi, mask[:, mid:hi].clone())] if hi > mid else []
                out.append((start, qi, bands))
            if sum(b[3].numel() for _, _, bands in out for b in bands if b[3] is not None) > MASK_CACHE_BYTES:
                return out  # too big to keep for the next layer: rebuilt there (time, not memory)
            self._shape, self._blocks = (Tq, Tk, device), out
        return self._blocks

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        if kwargs.get("sliding_window") or kwargs.get("softcap"):  # the map would silently attend past the window
            raise RopeCliError("a position map on a layer with a sliding window or logit soft-capping is not supported "
                               "yet (Mistral's sliding window, Gemma 2's soft-capping); pass a model without them")
        B, H, Tq, D = query.shape
        Tk = key.shape[2]
        scaling = D ** -0.5 if scaling is None else scaling
        if (flex := self.flex_for(query.device)) is not None:
            try:
                out = flex(query, key, value, scaling, lambda x, p: rotated(x, p, self.rotary))
                return out.transpose(1, 2).contiguous(), None
            except Exception as exc:  # noqa: BLE001  a compile that fails here must not cost the user the run
                if self.kernel == "flex":
                    raise
                warnings.warn(f"position map: flex attention failed on {query.device} ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); running the fused blocks instead (slower)", stacklevel=2)
                self.kernel = "blocks"
        groups = H // key.shape[1]  # GQA / MQA: each key head serves `groups` query heads
        value = value.repeat_interleave(groups, dim=1)
        fused = _fused_for(query.device) if self.fused else None
        kj, blocks = torch.arange(Tk, device=query.device), self.blocks(Tq, Tk, query.device)  # blocks: the regions at T_k
        reach = [max((hi for _, _, bands in blocks for m, _, hi, _ in bands if m == n), default=0)
                 for n in range(len(self.regions))]  # each region's keys up to the farthest one it reaches, rotated once
        keys = [rotated(key[:, :, :h], r.key(kj[:h]), self.rotary).repeat_interleave(groups, dim=1)
                for r, h in zip(self.regions, reach)]
        out = torch.empty(B, H, Tq, D, dtype=value.dtype, device=value.device)
        for start, qi, bands in blocks:
            q = query[:, :, start:start + len(qi)]
            rq = {n: rotated(q, self.regions[n].query(qi), self.rotary).contiguous() for n in {b[0] for b in bands}}
            parts = [region_attention(rq[n], keys[n][:, :, lo:hi], value[:, :, lo:hi], mask,
                                      scaling * self.regions[n].scale, fused) for n, lo, hi, mask in bands]
            lse = torch.logsumexp(torch.stack([p[1] for p in parts]), dim=0)  # (B, H, block): every row has d = 0
            merged = sum(torch.exp(p[1] - lse)[..., None] * p[0] for p in parts)
            out[:, :, start:start + len(qi)] = merged.to(value.dtype)
        return out.transpose(1, 2).contiguous(), None


def _identity_rotary(rotary):
    real = rotary.forward

    def forward(x, position_ids, *args, **kwargs):  # the shapes and dtypes of the real output, no rotation
        cos, sin = real(x, position_ids, *args, **kwargs)
        return torch.ones_like(cos), torch.zeros_like(sin)

    return real, forward


@contextmanager
def mapped(model, name: str, params: dict[str, float] | None = None, block: int = BLOCK, kernel: str | None = None):
    """Run `model` under the position map `name` (its parameters checked first) until the block ends; the attention
    implementation and the rotary module are put back after, whatever happens. `kernel`: `MappedAttention`'s (default:
    $ROPECLI_MAP_KERNEL, else "auto")."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    checked = map_params(name, params or {})
    map_regions(name, checked, 1)  # its parameters' own rules, before the model is touched
    regions = lambda n: map_regions(name, checked, n)  # noqa: E731  (a per-length map's regions depend on T_k)
    slots = find_rotary_slots(model)
    if len(slots) != 1 or slots[0].layer_type is not None:
        raise RopeCliError(f"{name}: a model with RoPE per layer type ({len(slots)} rotary modules) is not mapped yet; "
                           "pass a model with one rotary module (LLaMA, Mistral, Qwen)")
    cfg = text_config(model)
    if (kinds := read_layer_kinds(cfg.to_dict())) is not None:
        raise RopeCliError(f"{name}: this model's layers differ ({kinds.summary()}); a map assumes one RoPE attention on "
                           "every layer: not mapped yet")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if slots[0].rotary_dim != head_dim:
        raise RopeCliError(f"{name}: partial rotary (rotary dim {slots[0].rotary_dim} of head dim {head_dim}) is not "
                           "mapped yet; the map would rotate dimensions the model leaves alone")
    if getattr(cfg, "kv_lora_rank", None):
        raise RopeCliError(f"{name}: multi-head latent attention (MLA) rotates a separate rope part of each head; "
                           "position maps need the query and key split it keeps apart: not supported")
    rotary = slots[0].module
    real, identity = _identity_rotary(rotary)
    kernel = kernel or os.environ.get("ROPECLI_MAP_KERNEL", "auto")
    if kernel not in ("auto", "flex", "blocks"):
        raise RopeCliError(f"ROPECLI_MAP_KERNEL={kernel}: choose auto, flex or blocks")
    ALL_ATTENTION_FUNCTIONS[NAME] = MappedAttention(regions, real, block, kernel=kernel)  # the mapping the layers read
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
