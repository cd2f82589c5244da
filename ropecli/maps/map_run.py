"""A position map run over a transformers model and its KV cache: the one map attention ropecli's exported folder
serves (`export/map_modeling.py`, generated from this module: `export/folder_source.py`).

How it runs, as the model runs:
- The model's rotary modules rotate queries and keys at their true positions, as shipped, so every layer the map does
  not change (sliding layers whose window is below the exported length, NoPE, linear attention) runs the model's own
  attention untouched, and the KV cache holds the keys the model itself would hold.
- A mapped layer's new key is turned, as it enters the KV cache (`cache.update` is wrapped while a forward pass
  runs), to the key set of the region that reaches the most keys at the exported length (Self-Extend's floor(j/G),
  DCA's j mod c, ReRoPE's 0; STRING's true positions: nothing to turn), so a key is rotated once and the cache keeps the
  model's own size; dynamic, static and sliding caches, beam search and cropping move it as they move any key. At each
  step only the other regions' bands are turned (Self-Extend's window of W keys), and the queries from their true
  positions to each region's (a rotation by the difference, the model's own rotation, its attention scaling divided
  out), cos and sin shared by the layers of the pass, their angles in float64 (`MapRun.turn_trig`). A decoding step's
  one query scores every region in one kernel call (`one_call`).
- Positions are per row: a query's is its `position_ids` (generate's, from the attention mask: left padding counts
  from each row's first token); a key's is its place among the row's valid keys (the attention mask's), so a
  left-padded row is the same prompt alone. The model's mask (padding, causal, a static cache's empty slots) is
  applied inside every region.
- Each row, QUERY_BLOCK queries at a time, runs ropecli's block plan (`maps.map_bands`): per region the band of keys
  it reaches, split into full columns (no mask), the causal square (the kernel's own causal skip) and the rest under a
  bias, in torch's fused CPU kernel (`maps.region_attention.region_attention`), the regions merged by log-sum-exp; the
  plan is made once per forward pass and shared by the layers. A region that is one shifted causal triangle runs as
  one causal call (`whole_triangles`), and blocks start at the map's period where it has one (`block_period`: DCA's
  chunks). Elsewhere, and where the model soft-caps its logits, explicit scores (correct on any device).
Which layers a map covers is ropecli's `maps.map_layers.plan_layers` (its refusals included).
Everything here is torch, numpy and transformers: the folder's file copies these definitions as they are.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from functools import partial
from types import SimpleNamespace
from typing import Any, Callable, NamedTuple

import numpy as np

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.maps.flex_regions import FlexRegions, flex_available
from ropecli.maps.map_bands import CAUSAL, masked, merge_into, split_band, whole_bands, whole_chunks, whole_triangles
from ropecli.maps.map_layers import latent_rope, plan_layers
from ropecli.maps.region_attention import MASK_CACHE_BYTES, band_attention, chunk_attention, region_attention

torch = deferred("torch")
transformers = deferred("transformers")
masking_utils = deferred("transformers.masking_utils")
modeling_utils = deferred("transformers.modeling_utils")

ATTENTION_NAME = "ropecli_map_run"  # the attention function's name in transformers' registry while a pass runs
PLANS_KEPT = 8  # unpadded prefills' block plans kept across passes, by shape (their masks within MASK_CACHE_BYTES)
QUERY_BLOCK = 512  # queries per block: each region's masks are (QUERY_BLOCK, its band of keys)
_ROTATES_HALF: dict = {}  # per attention class: whether its model's rotation is rotate-half over the whole head (probed)
_ROTATION: dict = {}  # per attention class: its rotation as (x, cos, sin) -> x

_ROTATES_HALF: dict = {}  # per attention class: whether its model's rotation is rotate-half over the whole head (probed)
_ROTATION: dict = {}  # per attention class: its rotation as (x, cos, sin) -> x


def rotation_of(module) -> Callable:
    """The model's own rotation as (x, cos, sin) -> x: rotate-half in place where the model's apply_rotary_pos_emb is
    rotate-half over the whole head (probed once per attention class on 8 positions with a non-zero angle: the model's
    own function on a (1, 3, 2048, 64) band takes 25x longer; a class declared rotate-half in _ROTATES_HALF is not
    probed), else
    its apply_rotary_pos_emb, on the first rotary dims where the attention slices them off before calling it (Phi,
    StableLM)."""
    kind = type(module)
    d = latent_rope(module)
    if (kind, d) in _ROTATION:  # per class and rope width: one MLA class (Mistral 4) is built with several
        return _ROTATION[kind, d]
    found: list = []  # the model's apply function, looked up when first needed (a rotate-half class declared as such:
    # vLLM's neox-style families' layers, `maps.vllm_model`, has none)

    def slow(x, cos, sin):
        if not found:
            found.append(model_apply(module))
        return found[0](x, cos, sin)

    if d is not None:  # MLA: the rope part is each head's last d dims, rotate-half
        _ROTATES_HALF[kind] = True  # (a shared k_rot alone, d wide, turns by one matrix in a decoding step: `turned_one`)

        def latent(x, cos, sin):
            if cos.shape[-1] != d:  # a partial rotary inside the rope part: the model's own function
                return slow(x, cos, sin)
            if x.shape[-1] == d:
                return rotate_half_into(x, cos, sin)
            return torch.cat((x[..., :-d], rotate_half_into(x[..., -d:], cos, sin)), dim=-1)

        _ROTATION[kind, d] = latent
        return latent

    def apply(x, cos, sin):
        if cos.shape[-1] != x.shape[-1]:
            return slow(x, cos, sin)
        if kind not in _ROTATES_HALF:
            xs, cs, ss = x[:1, :1, :8].float(), cos[:1, :8].float(), sin[:1, :8].float()
            if not bool(ss.abs().max() > 0):
                return slow(x, cos, sin)
            _ROTATES_HALF[kind] = bool(torch.allclose(slow(xs, cs, ss), rotate_half_into(xs, cs, ss), atol=1e-5))
        return rotate_half_into(x, cos, sin) if _ROTATES_HALF[kind] else slow(x, cos, sin)

    _ROTATION[kind, d] = apply
    return apply


def rotate_half_into(x, cos, sin, out=None):
    """x (B, H, T, D) rotated by cos, sin (B, T, D) in rotate-half layout, in one output tensor (no concatenation):
    a new one, or `out` (x's shape, not x itself: a band of the cache's keys turned in place from its copy x)."""
    h = x.shape[-1] // 2
    c, s = cos[:, None], sin[:, None]
    out = x * c if out is None else torch.mul(x, c, out=out)
    out[..., :h].addcmul_(x[..., h:], s[..., :h], value=-1)
    out[..., h:].addcmul_(x[..., :h], s[..., h:])
    return out


def rotation_matrix(cos, sin):
    """The (…, D, D) float32 matrices R with x @ R = rotate_half_into(x, cos, sin) for cos, sin (…, D), one per
    position: one position's rotation as a matrix, so that a decoding step's one query or one new key turns in one matmul (rotate_half_into makes three
    calls and four views: on the built-in model 31 against 8 us)."""
    c, s = cos.float(), sin.float()
    h = c.shape[-1] // 2
    R = torch.diag_embed(c)
    i = torch.arange(h, device=c.device)
    R[..., i + h, i] = -s[..., :h]
    R[..., i, i + h] = s[..., h:]
    return R


def turned_one(module, x, cos, sin, store, key):
    """x (1, H, 1, D) turned by cos, sin (1, 1, D'): by one matmul where the model's rotation is rotate-half over the
    whole head and x is float32 (the matrix kept in `store` under `key` for the pass's other layers), else as `rotation_of`
    turns it."""
    if x.dtype == torch.float32 and _ROTATES_HALF.get(type(module)) is True and cos.shape[-1] == x.shape[-1]:
        R = store.get(key)
        if R is None:
            R = store[key] = rotation_matrix(cos.reshape(-1), sin.reshape(-1))
        return torch.matmul(x, R)
    return rotation_of(module)(x.float(), cos, sin).to(x.dtype)


def model_apply(module) -> Callable:
    """The model's apply_rotary_pos_emb as (x, cos, sin) -> x, on the first rotary dims where the attention slices them
    off before calling it (Phi, StableLM)."""
    fn = getattr(sys.modules[type(module).__module__], "apply_rotary_pos_emb")
    names = list(inspect.signature(fn).parameters)
    one = fn if len(names) > 1 and names[1] == "cos" else (lambda x, cos, sin: fn(x, x[:, :1], cos, sin)[0])  # the
    # query half of (q, k) -> (q, k): the key half on one head only (it is thrown away)

    def apply(x, cos, sin):
        if cos.shape[-1] == x.shape[-1]:
            return one(x, cos, sin)
        try:
            return one(x, cos, sin)
        except RuntimeError:
            d = cos.shape[-1]
            return torch.cat((one(x[..., :d], cos, sin), x[..., d:]), dim=-1)

    return apply


def row_trig(rotary, x, positions):
    """cos, sin (B, T, rotary dims) at positions (B, T), or at positions (B, T, groups) that differ per group of
    rotary pairs (group g: the pairs m with floor(m groups / pairs) = g), each group's columns from the rotary module's
    own output at its positions, in its layout (rotate-half: the pairs' angles twice; interleaved: each twice in a
    row)."""
    if positions.ndim == 2:
        return rotary(x, positions.to(torch.float32))
    per = [rotary(x, positions[..., g].to(torch.float32)) for g in range(positions.shape[-1])]
    c = rotary(x, torch.ones(1, 1, device=x.device))[0][0, 0]  # at position 1: the layout of the pairs' columns
    D, P = c.shape[-1], c.shape[-1] // 2
    pair = torch.arange(D, device=x.device) % P if torch.equal(c[:P], c[P:]) else torch.arange(D, device=x.device) // 2
    cols = pair * positions.shape[-1] // P
    cos, sin = per[0][0].clone(), per[0][1].clone()
    for g in range(1, len(per)):
        cos[..., cols == g], sin[..., cols == g] = per[g][0][..., cols == g], per[g][1][..., cols == g]
    return cos, sin


def key_sets(regions, probe: int = 1 << 17) -> tuple[list[int], list[Callable]]:
    """(per region: the key set it reads, -1 for the keys at their true positions; the extra sets' key functions):
    regions whose keys sit at the same positions share one set, probed on positions up to `probe` (2^17; a per-length
    map's regions: up to their length)."""
    probe = torch.arange(max(2, probe))
    extra, outs, which = [], [], []
    for r in regions:
        got = torch.as_tensor(r.key(probe))
        if torch.equal(got, probe.to(got.dtype).reshape(-1, *[1] * (got.ndim - 1)).expand_as(got)):
            which.append(-1)
            continue
        found = next((e for e, o in enumerate(outs) if o.shape == got.shape and torch.equal(o, got)), None)
        if found is None:
            extra.append(r.key)
            outs.append(got)
            found = len(extra) - 1
        which.append(found)
    return which, extra


def block_period(regions, length: int, probe: int = 8192) -> int | None:
    """The period of the map's block structure in query positions, or None: where some region's first or last key
    jumps (DCA's chunks of c, DPE's windows of W) at every multiple of one period up to min(length, probe), query blocks
    start there, so every region's part of a block is whole columns or the causal square, with no mask (at 8L on the
    built-in model DCA's prefill took 1.31x the schedule's in blocks of 512 and 1.20x in blocks of its chunk)."""
    n = max(2, min(int(length or 0), probe))
    j = torch.arange(n)
    jumps = torch.zeros(n, dtype=torch.bool)
    for r in regions:
        first, last = torch.empty(n, dtype=torch.long), torch.empty(n, dtype=torch.long)
        for a in range(0, n, 256):
            i = torch.arange(a, min(n, a + 256))
            m = torch.as_tensor(r.where(i[:, None], j[None, :])) & (j[None, :] <= i[:, None])
            first[a:a + len(i)] = torch.where(m.any(1), m.int().argmax(1), -1)
            last[a:a + len(i)] = torch.where(m.any(1), n - 1 - m.flip(1).int().argmax(1), -1)
        for edge in (first, last):
            step = edge[1:] - edge[:-1]
            jumps[1:] |= (step != 0) & (step != 1)
    at = jumps.nonzero().flatten()
    if not len(at):
        return None
    period = int(np.gcd.reduce(at.numpy()))
    if period < 16 or not torch.equal(at, torch.arange(period, n, period)):  # not one period, or too fine to pay
        return None
    return period


def primary_set(regions, which, length: int) -> int:
    """The key set a mapped layer's cache holds: the one of the region that reaches the most keys from the last query
    at the exported length (Self-Extend's grouped keys, DCA's chunked ones, ReRoPE's capped ones; -1: the true keys,
    STRING), so the keys turned at each step are only the other regions' bands (a window of W keys)."""
    if not length or length < 2:
        return which[0] if which else -1
    i, j = torch.tensor([length - 1]), torch.arange(length)
    counts = [int(torch.as_tensor(r.where(i[:, None], j[None, :])).sum()) for r in regions]
    return which[max(range(len(regions)), key=lambda n: counts[n])]


class MapRun:
    """The attention function while a forward pass runs, and what the layers of that pass share: mapped layers through
    `map_attention`, the others through the model's own attention with its own arguments."""

    def __init__(self, plans, rotaries, regions, implementation, selection, attention, length, inv_freq=None,
                 regions_at=None):
        self.plans, self.rotaries, self.regions, self.implementation = plans, rotaries, regions, implementation
        self.inv_freq, self._pairs = inv_freq or {}, {}  # {layer type: (rotary module, its inv_freq's name)}
        self.which, self.extra = key_sets(regions)
        # a per-length map (`regions_at(T)`: LaMPE's far keys squeezed over the whole input) moves every key as the
        # sequence grows: the cache keeps the true keys, each row's regions are made at its length (`at`), nothing is
        # planned ahead
        self.regions_at, self._at = regions_at, {}
        # a per-prompt map (LaMPE's three regions) fixes its regions from the prompt, each row's keys at its first pass
        # through the cache, and keeps them while the row decodes: {row: its prompt's length}
        self.per_prompt = regions_at is not None and "prompt" in inspect.signature(regions_at).parameters
        self._prompts: dict[int, int] = {}
        # a row whose prompt is prefilled in chunks (vLLM's scheduler): {row: the whole prompt's length}, the length
        # its chunks' regions are made at, as one pass over the prompt makes them (decoding past it: the row's own)
        self.prefill_to: dict[int, int] = {}
        self.at_key = None  # the (length, prompt) the regions were last made at (`at`)
        self.fresh = True  # this pass starts its rows (no cache, or an empty one): their prompts are its keys
        self.primary = -1 if regions_at else primary_set(regions, self.which, length)  # the key set the cache holds
        # query blocks start at its multiples (None: every QUERY_BLOCK)
        self.period = None if regions_at else block_period(regions, length)
        self._primary: set = set()  # the storage of the keys the cache returned in the primary set this pass
        self._latent: set = set()  # the MLA layers whose k_rot the cache returned in the primary set this pass
        self._last: dict = {}  # {shape: (block plan, its masks' bytes)} of recent unpadded prefills, latest last
        self.selection, self._cols, self.attention = selection or {}, {}, attention  # {layer: its attention module}
        self.position_ids, self._layout, self._trig, self._scale = None, {}, {}, {}
        self._ahead: dict = {}  # per rotary: (its frequencies, {step: OneCall}, {position: new key's turn}) (`step_plan`)
        self.block = QUERY_BLOCK  # queries per block (a test's smaller one cuts a short prompt into several)
        # "auto": flex attention for a prefill on CUDA (`maps.flex_regions`), the fused blocks elsewhere; "flex": flex
        # attention on any device (eager on the CPU: the GPU path's twin); "blocks": the fused blocks everywhere
        self.kernel = "auto"
        self.observe = None  # observe(module, query, key, pair): each mapped layer's queries and keys, the scaling out
        self._flex: dict = {}

    def begin(self, position_ids, fresh: bool = False):
        """A new forward pass: its queries' positions (B or 1, T_q), and whether it starts its rows (`fresh`: no cache
        before it, so a per-prompt map's prompts are its rows' keys); what the previous pass kept is dropped."""
        self.position_ids, self._layout, self._trig, self._primary = position_ids, {}, {}, set()
        self.fresh = fresh
        if fresh:
            self._prompts = {}
        self._latent = set()  # the MLA layers whose k_rot came through the cache this pass (turned to the primary set)

    def at(self, qpos, b: int = 0):
        """A per-length map's regions (and their key sets) for row b whose last query sits at max(qpos): its length
        max(qpos) + 1 (a prefill's T, a decoding step's T_k with its own key; a static cache's empty slots beyond it
        not counted; while a prompt is prefilled in chunks, the whole prompt's: `prefill_to`), and for a per-prompt map
        the row's prompt (its length at the pass that started it); the last few kept."""
        if self.regions_at is None:
            return
        T = max(int(qpos.max()) + 1, self.prefill_to.get(b, 0))
        if self.per_prompt and (self.fresh or b not in self._prompts):
            self._prompts[b] = T
        at = (T, self._prompts[b]) if self.per_prompt else (T, None)
        self.at_key = at
        if at not in self._at:
            if len(self._at) > 64:
                self._at.clear()
            regions = self.regions_at(length=T, prompt=at[1]) if self.per_prompt else self.regions_at(length=T)
            self._at[at] = (regions, *key_sets(regions, T))
        self.regions, self.which, self.extra = self._at[at]

    def unit(self, plan, x):
        """The rotary module's attention scaling (its cos at position 0): divided out of a rotation by a difference."""
        if plan.rope not in self._scale:
            cos, _ = self.rotaries[plan.rope](x.float(), torch.zeros(1, 1, device=x.device))  # not rounded to bf16
            self._scale[plan.rope] = float(cos.flatten()[0])
        return self._scale[plan.rope]

    def turn(self, module, plan, x, delta, key=None):
        """x (B, H, T, D), rotated at its true positions, turned by `delta` (B or 1, T[, groups]) more: R(p + delta)
        as the model rotates (R(delta) R(p) = R(p + delta) pair by pair); cos and sin kept under `key` for the next
        layers of this forward pass. In float32, back in x's dtype."""
        got = self._trig.get(key) if key is not None else None
        if got is None:
            got = self.turn_trig(plan, x, delta)
            if key is not None:
                self._trig[key] = got
        if key is not None and x.shape[0] == 1 and x.shape[2] == 1 and got[0].shape[:2] == (1, 1):
            return turned_one(module, x, *got, self._trig, ("R",) + key)  # a decoding step's new key
        return rotation_of(module)(x.float(), *got).to(x.dtype)

    def turn_trig(self, plan, x, delta):
        """cos, sin (B, T, rotary dims) float32 of a rotation by delta (B, T[, groups]), the attention scaling out.
        Where the rotary module's rotation is cos(p f), sin(p f) of its inv_freq f (probed once per module: `pairs`)
        the angle is taken in float64: turns compose (a key turned to the primary set and back, a query and a key each
        turned by the same shift) as exactly as the model's own one rotation, where float32 angles of a few thousand
        radians would each be off by ~1e-4. Elsewhere (a rotary that rescales per position) the module's own output."""
        pair = self.pairs(plan, x)
        if pair is None:
            a = self.unit(plan, x)
            cos, sin = row_trig(self.rotaries[plan.rope], x.float(), torch.as_tensor(delta, device=x.device))
            return cos.float() / a, sin.float() / a
        f = self.frequencies(plan, x)
        delta = torch.from_numpy(delta) if isinstance(delta, np.ndarray) else delta  # numpy from a step's plan
        d = delta.to(device=f.device, dtype=torch.float64)
        if d.ndim == 3:  # a position per group of pairs: each column its group's
            d = d[..., pair * d.shape[-1] // (len(f) // 2)]
            angle = d * f
        else:
            angle = d[..., None] * f
        return angle.cos().float(), angle.sin().float()

    def frequencies(self, plan, x):
        """(rotary dims,) float64: each rotary column's frequency, read from the rotary module's inv_freq once per pass
        (dynamic NTK updates it in the model's own call of the pass, before its first layer); None where the module's
        rotation is not cos(p f) of it (`pairs`)."""
        pair = self.pairs(plan, x)
        if pair is None:
            return None
        f = self._trig.get(("f", plan.rope))
        if f is None:
            module, attr = self.inv_freq[plan.rope]
            f = self._trig[("f", plan.rope)] = getattr(module, attr).to(torch.float64)[pair]
        return f

    def pairs(self, plan, x):
        """(rotary dims,) each cos column's pair (rotate-half: m mod P; interleaved: m // 2), or None where the rotary
        module's output is not cos(p f) scaled by its attention scaling at positions up to 4,097 (probed once)."""
        if plan.rope not in self._pairs:
            self._pairs[plan.rope] = None
            found = self.inv_freq.get(plan.rope)
            f = getattr(found[0], found[1], None) if found else None
            if isinstance(f, torch.Tensor):
                p = torch.tensor([[0.0, 1.0, 2.0, 3.0, 17.0, 255.0, 1000.0, 4097.0]], device=x.device)
                cos, sin = (t[0].double() for t in self.rotaries[plan.rope](x.float(), p))
                D, P = cos.shape[-1], cos.shape[-1] // 2
                pair = (torch.arange(D, device=x.device) % P if torch.equal(cos[1, :P], cos[1, P:]) else
                        torch.arange(D, device=x.device) // 2)
                if f.numel() == P:
                    a, angle = self.unit(plan, x), p[0, :, None].double() * f.double()[pair]
                    if (torch.allclose(angle.cos() * a, cos, atol=2e-3) and
                            torch.allclose(angle.sin() * a, sin, atol=2e-3)):
                        self._pairs[plan.rope] = pair
        return self._pairs[plan.rope]

    def key_at(self, e, kpos):
        """The rotation positions of key set e (-1: the true ones) for keys at kpos (…, T), numpy or torch as kpos is:
        (…, T) or (…, T, groups)."""
        if e < 0:
            return kpos
        return np.asarray(self.extra[e](kpos)) if isinstance(kpos, np.ndarray) else torch.as_tensor(self.extra[e](kpos))

    def keys_in(self, module, plan, key, kpos, want, have, tag=None):
        """key (B, H_kv, T, D) rotated as key set `have` for keys at kpos (T,) -> as key set `want` (a turn by the
        difference of their positions; the same tensor where the two are one set)."""
        if want == have:
            return key
        if tag is not None and tag in self._trig:  # turned in an earlier layer of this pass: its cos and sin
            return self.turn(module, plan, key, None, key=tag)
        to, frm = self.key_at(want, kpos), self.key_at(have, kpos)
        if to.ndim != frm.ndim:
            to, frm = (to, frm[..., None]) if to.ndim > frm.ndim else (to[..., None], frm)
        return self.turn(module, plan, key, (to - frm)[None], key=tag)

    def columns(self, module, plan, x):
        """(1, H, 1, D) bool: the columns of the layer's selected pairs per head; None where every pair moves."""
        layer = module.layer_idx
        if layer not in self.selection:
            return None
        if layer not in self._cols:
            pair, P = self.column_pairs(module, plan, x)
            heads = self.selection[layer]
            if len(heads) != x.shape[1] or any(m >= P for h in heads for m in h):
                raise RopeCliError(f"config.json ropecli_map.pairs, layer {layer}: {len(heads)} heads of pairs below {P} "
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
        (ropecli's `maps.map_layers.column_pairs`)."""
        D = x.shape[-1]
        probe = torch.eye(D, dtype=torch.float32, device=x.device)[None, None]
        cos, sin = self.rotaries[plan.rope](probe, torch.ones(1, D, device=x.device))
        out = rotation_of(module)(probe, cos.float(), sin.float())[0, 0]
        moved = (out - torch.diag(torch.diagonal(out))).abs().amax(dim=1)
        s = sin[0, 0].float().abs()
        P = s.shape[-1] // 2
        per_pair = s[:P] if torch.equal(s[:P], s[P:]) else s[0::2]
        gap = (moved.clamp_min(1e-30).log()[:, None] - per_pair.clamp_min(1e-30).log()[None, :]).abs()
        pair = torch.where(moved > 0, gap.argmin(dim=1), torch.full_like(moved, -1, dtype=torch.long))
        if (torch.bincount(pair[pair >= 0], minlength=P) > 2).any():
            raise RopeCliError(f"{type(module).__name__}: two rotary pairs turn at the same frequency; their columns "
                               "cannot be told apart for a per-pair choice")
        return pair, P

    def update(self, real_update):
        """The cache's `update` while this pass runs: a mapped layer's new keys enter it turned to the primary key set
        (rotated once, when they arrive; at their true positions where the primary set is the true one)."""
        def update(key_states, value_states, layer_idx, *args, **kwargs):
            plan = self.plans[layer_idx] if layer_idx < len(self.plans) else None
            if plan is not None and plan.mapped and latent_rope(self.attention.get(layer_idx)) is not None:
                # MLA caches (the latent, the shared k_rot (B, 1, T, d)): the k_rot enters turned, the latent as is
                latents, k_rot = real_update(key_states, self.primary_keys(layer_idx, plan, value_states), layer_idx,
                                             *args, **kwargs)
                self._latent.add(layer_idx)  # its attention's keys are expanded from these: in the primary set
                return latents, k_rot
            if plan is not None and plan.mapped and layer_idx in self.attention:
                keys, values = real_update(self.primary_keys(layer_idx, plan, key_states), value_states, layer_idx,
                                           *args, **kwargs)
                self._primary.add(keys.data_ptr())  # a KV-shared layer (Gemma 3n, Gemma 4) reads these keys too
                return keys, values
            return real_update(key_states, value_states, layer_idx, *args, **kwargs)

        return update

    def primary_keys(self, layer_idx, plan, key_states):
        """A mapped layer's new keys (B, H_kv, T, D) at their true positions, turned to the primary key set."""
        if self.primary < 0:
            return key_states
        tag = ("u", plan.rope, key_states.shape[2])  # the same turn in every layer of the pass
        ahead = self._ahead.get(plan.rope)
        if ahead is not None and tag not in self._trig and key_states.shape[0] == 1 and key_states.shape[2] == 1:
            got = ahead[2].get(int(self.position_ids.reshape(-1)[-1]))  # a decoding step planned ahead (`step_plan`)
            if got is not None and torch.equal(ahead[0], self.frequencies(plan, key_states)):
                self._trig[tag] = got[:2]
                if got[2] is not None:
                    self._trig[("R",) + tag] = got[2]
        delta = None
        if tag not in self._trig:
            pos = self.position_ids
            pos = pos if pos.shape[-1] == key_states.shape[2] else pos[..., -key_states.shape[2]:]
            to = self.key_at(self.primary, pos)
            delta = to - _expand(pos, to)
        return self.turn(self.attention[layer_idx], plan, key_states, delta, key=tag)

    def layout(self, mask, B, Tq, Tk, device, window):
        """Per row: (its queries' positions (T_q,), its keys' positions (T_k,), its valid keys (T_k,) bool or None for
        every key, the pairs the model's mask allows (T_q, T_k) bool or None: causal by position). A key's position is
        its place among the row's valid keys (any query reaches it), offset where the cache has dropped the oldest (a
        sliding cache past its window); kept for the other layers of the pass."""
        cache_key = (id(mask) if mask is not None else None, B, Tq, Tk, window)
        if cache_key in self._layout:
            return self._layout[cache_key]
        pos = self.position_ids.to(device)
        pos = pos if pos.shape[-1] == Tq else pos[..., -Tq:]
        pos = pos.reshape(-1, Tq).expand(B, Tq)
        rows = []
        for b in range(B):
            qpos = pos[b]
            base = max(0, int(qpos.max()) + 1 - Tk)
            allowed = None if mask is None else _allowed(mask, b)
            if allowed is None:  # no padding: the keys in order up to the last query
                valid = None
                kpos = torch.arange(Tk, device=device) + base
            else:
                valid = allowed.any(dim=0)
                kpos = valid.cumsum(0) - 1 + base
                if allowed.shape[0] == 1 and bool(valid.all()):  # no padding: as with no mask (a step's query is
                    valid = allowed = None  # the last: it reaches every key)
                elif allowed.shape[0] == 1 and Tq > 1:  # a padding mask over the keys alone: causal by position
                    allowed = None
            rows.append((qpos, kpos, valid, allowed))
        self._layout[cache_key] = rows
        return rows

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        plan = self.plans[module.layer_idx]
        if plan.mapped and self.observe is not None:  # each pair's norms: a rotation keeps them (its scaling out)
            a = self.unit(plan, query)
            pair = self.column_pairs(module, plan, query)[0]
            self.observe(module, query if a == 1.0 else query / a, key if a == 1.0 else key / a, pair)
        if plan.mapped:
            return map_attention(self, module, plan, query, key, value, attention_mask, scaling,
                                 kwargs.get("softcap"), kwargs.get("s_aux"))
        if self.implementation in modeling_utils.ALL_ATTENTION_FUNCTIONS:
            fn = modeling_utils.ALL_ATTENTION_FUNCTIONS[self.implementation]
        else:
            fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward")
        return fn(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def _expand(positions, like):
    """positions (…, T) against a key function's output (…, T) or (…, T, groups), numpy or torch as positions are."""
    p = positions if isinstance(positions, np.ndarray) else torch.as_tensor(positions)
    return p if np.ndim(like) == p.ndim else p[..., None]


def _unpadded(mask, pos) -> bool:
    """Whether every row is the same unpadded sequence: one row of positions (B or 1, T_q), and a mask (None: sdpa's
    causal skip) whose last query reaches every key in every row."""
    if pos.shape[0] > 1 and not bool((pos == pos[:1]).all()):
        return False
    if mask is None:
        return True
    if not isinstance(mask, torch.Tensor):
        return False
    last = mask[..., -1, :] if mask.ndim == 4 else mask
    return bool(last.all() if last.dtype == torch.bool else (last > torch.finfo(last.dtype).min / 2).all())


def _allowed(mask, b):
    """Row b of the model's attention mask as (T_q, T_k) bool: sdpa's bool mask, eager's float one (0 where allowed),
    a 2D padding mask (flash attention: keys only, causal added by position later)."""
    if not isinstance(mask, torch.Tensor):
        raise RopeCliError(f"attention mask of type {type(mask).__name__}: load the folder with "
                           "attn_implementation='sdpa' or 'eager'")
    m = mask[b if mask.shape[0] > 1 else 0]
    if m.ndim == 1:  # (T_k,): which keys are valid
        return (m != 0)[None, :]
    m = m[0]  # (T_q, T_k)
    return m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2


def positions_from_mask(mask):
    """(B, T_q) each query's position from a 4D mask (B, 1, T_q, T_k): the number of valid keys (any query reaches
    them) before its own slot, its own slot the last key it reaches (a query that reaches none: 0)."""
    allowed = mask[:, 0] if mask.dtype == torch.bool else mask[:, 0] > torch.finfo(mask.dtype).min / 2
    before = allowed.any(dim=1).long().cumsum(-1) - 1  # (B, T_k)
    Tk = allowed.shape[-1]
    slot = Tk - 1 - allowed.flip(-1).int().argmax(dim=-1)  # (B, T_q): the last key each query reaches
    return torch.where(allowed.any(-1), before.gather(1, slot), 0)


def _flash_kernel(query, softcap):
    """torch's fused CPU attention that also returns the log-sum-exp (a private op, hence looked up): on the CPU and
    where no soft-capping is needed; None elsewhere (explicit scores then)."""
    return _FUSED if query.device.type == "cpu" and not softcap else None


_FUSED = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)  # looked up once (30 us a call)


def row_plan(run, qpos, kpos, valid, allowed, window, dtype):
    """(([(start, stop, [(region, r0, r1, lo, hi, mask, bias, rows with a key)])], {whole region: (first row, shift)},
    {batched region: ("band", its width) | ("chunk", the key chunk's distance)}), the masks' bytes) for one row: per
    block of queries and region the band of keys the region reaches (the pairs in its region, allowed by the model's
    mask, causal by position) split by ropecli's `split_band` into full columns, the causal square and the rest under
    a bias; a region that is one shifted causal triangle, one diagonal band or one chunk-diagonal over the whole row
    not split at all (told first: its split is most of a plan's cost)."""
    Tq, Tk = len(qpos), len(kpos)
    # an unpadded row whose queries are the last T_q of keys 0 … T_k - 1: a region whose pairs are one shifted causal
    # triangle (Self-Extend's grouped one, ReRoPE's capped one) runs as one causal call, as ropecli's forward runs it
    plain = (allowed is None and valid is None and 1 < Tq <= 4 * run.block and not window and int(kpos[0]) == 0
             and torch.equal(qpos, torch.arange(Tk - Tq, Tk, device=qpos.device)))
    # per region and row: the keys reached, 0 where key 0 is one of them (else 1), the last; and the first reached
    shape = torch.zeros(3, len(run.regions), Tq, dtype=torch.long) if plain else None
    first = torch.zeros(len(run.regions), Tq, dtype=torch.long) if plain else None
    masks = []  # per block: (start, stop, [each region's mask (rows, T_k)], or its parts where split at once)
    # the masks kept until the whole regions are told (their split skipped) where they fit MASK_CACHE_BYTES; else
    # each block split at once, as the masks of one block are all a plan holds at a time
    defer = plain and len(run.regions) * Tq * Tk <= MASK_CACHE_BYTES
    for start, stop in query_blocks(qpos, run.period, run.block):
        qi = qpos[start:stop]
        if allowed is None:
            ok = kpos[None, :] <= qi[:, None]
            ok = ok if valid is None else ok & valid[None, :]
            if window:
                ok &= kpos[None, :] > qi[:, None] - window
        else:
            ok = allowed[start:start + len(qi)]
        masks.append((start, start + len(qi), []))
        for n, r in enumerate(run.regions):
            m = torch.as_tensor(r.where(qi[:, None], kpos[None, :])) & ok
            masks[-1][2].append(m if defer else split_parts(m, n, dtype))
            if shape is not None:
                rows = slice(start, start + len(qi))
                count, u = m.sum(dim=1), m.view(torch.uint8)  # argmax on bytes: the first True (the flip's: the last)
                shape[0, n, rows] = count.cpu()
                shape[1, n, rows] = (~m[:, 0]).long().cpu()
                shape[2, n, rows] = torch.where(count > 0, Tk - 1 - u.flip(1).argmax(dim=1), 0).cpu()
                first[n, rows] = torch.where(count > 0, u.argmax(dim=1), Tk).cpu()
    whole = whole_triangles(shape, Tq, Tk) if shape is not None else {}
    bands = {n: ("band", w) for n, w in whole_bands(shape, first, Tq, Tk, whole).items()} if shape is not None else {}
    if shape is not None:
        bands.update({n: ("chunk", d) for n, d in whole_chunks(shape, first, Tq, Tk, run.period,
                                                                set(whole) | set(bands)).items()})
    out = [(start, stop, [p for n, m in enumerate(ms) if n not in whole and n not in bands
                          for p in (split_parts(m, n, dtype) if defer else m)]) for start, stop, ms in masks]
    size = sum(p[6].numel() * p[6].element_size() for _, _, parts in out for p in parts if p[6] is not None)
    return (out, whole, bands), size


def split_parts(m, n: int, dtype) -> list:
    """Region n's mask over a block of queries (rows, T_k) as its parts [(n, r0, r1, lo, hi, mask, bias, rows with a
    key)] (`split_band`; a decoding step's one query: `one_query`)."""
    out = []
    for r0, r1, lo, hi, part in (split_band(m) if m.shape[0] > 1 else one_query(m)):
        part, bias, has = masked(part, dtype)
        out.append((n, r0, r1, lo, hi, part, bias, has))
    return out


def query_blocks(qpos, period, block: int = QUERY_BLOCK):
    """[(start, stop)] blocks of at most `block` queries, each starting anew where a query's position is a multiple
    of `period` (the map's block structure, `block_period`)."""
    T = len(qpos)
    cuts = [0, T]
    if period and T > 1:
        cuts += [int(c) for c in ((qpos % period) == 0).nonzero().flatten()]
    cuts = sorted(set(cuts))
    out = []
    for a, z in zip(cuts, cuts[1:]):
        out += [(s, min(z, s + block)) for s in range(a, z, block)]
    return out


def one_query(mask):
    """A decoding step's one query (mask (1, T_k)): its band of keys in one part, no mask where it reaches each key of
    the band (`split_band` would cut the last key off as a 1 x 1 causal square: a second kernel call per region)."""
    reach = mask[0].nonzero()
    if not len(reach):
        return []
    lo, hi = int(reach[0]), int(reach[-1]) + 1
    band = mask[:, lo:hi]
    return [(0, 1, lo, hi, None if bool(band.all()) else band.clone())]


def flex_for(run, module, plan, query, key, value, mask, scaling, softcap, sinks, base):
    """A prefill's attention (B, T_q, H, D) in flex attention (`maps.flex_regions`: on CUDA at run.kernel "auto", on
    any device at "flex"), or None where the fused blocks run: the keys at their true positions, no padding (every
    row's positions the same), not a per-prompt map's decoding. Each region's queries and keys are turned from their
    true positions to the region's (under a key-pair selection only its columns). A failed compile falls back to the
    fused blocks once, said."""
    wanted = run.kernel == "flex" or (run.kernel == "auto" and query.device.type == "cuda")
    if not wanted or base >= 0 or not flex_available() or run.position_ids is None:
        return None
    B, H, Tq, D = query.shape
    Tk = key.shape[2]
    pos = run.position_ids.reshape(-1, run.position_ids.shape[-1])
    if not _unpadded(mask, pos) or int(pos[0, -1]) != Tk - 1 or value.shape[-1] != D:
        return None
    run.at(pos[0, -Tq:], 0)
    if run.per_prompt and Tq < Tk:
        return None
    cols = run.columns(module, plan, query)
    if cols is not None and key.shape[1] != H:  # a selection per query head: each its own keys' turn
        key, value = key.repeat_interleave(H // key.shape[1], dim=1), value.repeat_interleave(H // key.shape[1], dim=1)
    regions = run.regions
    kind = (query.device.type, softcap, id(regions))
    if kind not in run._flex:
        run._flex[kind] = FlexRegions(lambda n: regions, compiled=query.device.type == "cuda", softcap=softcap)

    def turned(x, p, t):  # x (B, H, n, D) at true positions t (n,) -> at p (n,) or (n, groups)
        p = torch.as_tensor(p, device=x.device)
        delta = p - _expand(t, p).to(p.dtype)
        if not bool(delta.any()):
            return x.clone()  # a new tensor: flex scales it in place
        moved = run.turn(module, plan, x, delta[None])
        return moved if cols is None else torch.where(cols, moved, x)

    try:
        out = run._flex[kind](query, key, value, scaling, turned, sinks)
    except Exception as exc:  # noqa: BLE001  a compile that fails here must not cost the user the run
        if run.kernel == "flex":
            raise
        warnings.warn(f"position map: flex attention failed on {query.device} ({type(exc).__name__}: "
                      f"{str(exc)[:200]}); running the fused blocks instead (slower)", stacklevel=2)
        run.kernel = "blocks"
        return None
    return out.transpose(1, 2).contiguous()


def map_attention(run, module, plan, query, key, value, mask, scaling, softcap, sinks, base=None):
    """Queries (B, H, T_q, D) and the keys (B, H_kv, T_k, D), in the primary set where they came through the cache -> (B, T_q, H, D): per row and
    block of queries, each region's rotated queries against the band of its key set it reaches, one softmax over the
    regions (merged by log-sum-exp)."""
    B, H, Tq, D = query.shape
    Tk, Hkv = key.shape[2], key.shape[1]
    scaling = D ** -0.5 if scaling is None else scaling
    fused = _flash_kernel(query, softcap)
    # the set the keys arrive in (no cache: true; MLA: expanded from the cache's turned k_rot; `base` where the caller
    # knows it: vLLM's paged cache, read per request)
    if base is None:
        base = run.primary if key.data_ptr() in run._primary or module.layer_idx in run._latent else -1
    groups = H // Hkv
    Dv = value.shape[-1]
    if Tq > 1 and (flex := flex_for(run, module, plan, query, key, value, mask, scaling, softcap, sinks, base)) is not None:
        return flex, None
    if Tq == 1 and B == 1 and isinstance(one := run._trig.get(one_call_tag(plan, mask, 0, base, Tk)), OneCall):
        # a decoding step of one row whose one-call plan an earlier layer of this pass made: straight to it
        acc, lse = one_call(run, module, one, query, key, value, 0, scaling, fused, softcap, groups)
        return sunk(acc, lse, sinks).transpose(1, 2).to(value.dtype), None
    rows = run.layout(mask, B, Tq, Tk, query.device, plan.sliding)
    # rows of one unpadded sequence (a batch of windows of one length) run together: one kernel call for the batch
    shared = Tq > 1 and B > 1 and _unpadded(mask, run.position_ids.reshape(-1, run.position_ids.shape[-1]))
    rows = rows[:1] if shared else rows
    cols = run.columns(module, plan, query)
    out = torch.empty(B, Tq, H, Dv, dtype=value.dtype, device=value.device)
    plans = run._layout.setdefault(("plans", plan.sliding, id(mask), Tq, Tk, query.dtype), {})
    for b, (qpos, kpos, valid, allowed) in enumerate(rows):
        rs, nb = (slice(0, B), B) if shared else (slice(b, b + 1), 1)  # the batch rows this row's plan serves
        run.at(qpos, b)  # a per-length map's regions at this row's length (a per-prompt map's: its prompt's too)
        tag = one_call_tag(plan, mask, b, base, Tk)
        if Tq == 1 and cols is None and valid is None and allowed is None and tag not in run._trig:
            # an unpadded row's decoding step: its bands straight from the map, in numpy (no block plan), planned
            # STEPS_AHEAD steps at a time where it is the batch's one row
            i, k0 = int(qpos[0]), int(kpos[0])
            one = step_plan(run, plan, query, key, i, k0, Tk, base) if B == 1 else False
            if one is False:
                parts = decode_parts(run, i, k0, Tk, plan.sliding)[0]
                one = None if parts is None else one_call_plan(run, plan, query, key, b, qpos, kpos, parts, base)
            run._trig[tag] = one
        if Tq == 1 and run._trig.get(tag) is not None:
            acc, lse = one_call(run, module, run._trig[tag], query, key, value, b, scaling, fused, softcap, groups)
            out[b] = sunk(acc, lse, sinks)[0].transpose(0, 1).to(value.dtype)
            continue
        # an unpadded row whose positions run on one by one: its plan is kept across forward passes with the last
        # PLANS_KEPT shapes' (the next prompt of a recent length reuses it: a served batch's lengths come back)
        plain = allowed is None and valid is None and Tq > 1 and int(qpos[-1] - qpos[0]) == Tq - 1
        shape = (Tq, Tk, int(qpos[0]), int(kpos[0]), plan.sliding, query.dtype, query.device, run.at_key) if plain else None
        if b in plans:
            blocks = plans[b]
        elif shape is not None and shape in run._last:
            run._last[shape] = run._last.pop(shape)  # the latest last
            blocks = plans[b] = run._last[shape][0]
        else:
            blocks, size = row_plan(run, qpos, kpos, valid, allowed, plan.sliding, query.dtype)
            if size <= MASK_CACHE_BYTES:
                plans[b] = blocks
                if shape is not None:
                    run._last[shape] = (blocks, size)
                    while len(run._last) > PLANS_KEPT or sum(n for _, n in run._last.values()) > MASK_CACHE_BYTES:
                        run._last.pop(next(iter(run._last)))
        blocks, whole, bands = blocks
        if Tq == 1 and cols is None and tag not in run._trig:
            run._trig[tag] = one_call_plan(run, plan, query, key, b, qpos, kpos, blocks[0][2] if blocks else [], base)
        if Tq == 1 and cols is None and run._trig[tag] is not None:
            acc, lse = one_call(run, module, run._trig[tag], query, key, value, b, scaling, fused, softcap, groups)
            out[b] = sunk(acc, lse, sinks)[0].transpose(0, 1).to(value.dtype)
            continue
        held = None  # the whole regions' rows: (out (1, H, T_q, Dv) float32, log-sum-exp (1, H, T_q), first row)
        for n, (kind, size) in sorted(bands.items(), key=lambda x: x[1]):  # a diagonal band over every row
            # (Self-Extend's neighbours) or a chunk-diagonal (DCA's intra- and successive-chunk): one batched call
            qn = region_query(run, module, plan, query[rs], qpos, n, b, -1, cols)
            k = region_keys(run, module, plan, key[rs, :, :Tk], kpos, n, b, 0, base, cols)
            v = value[rs, :, :Tk]
            if fused is not None and qn.shape[-1] != v.shape[-1]:
                v = torch.nn.functional.pad(v, (0, qn.shape[-1] - v.shape[-1]))
            scale = scaling * run.regions[n].scale
            o, l = (band_attention(qn, k, v, size, scale, fused, softcap, run._layout) if kind == "band" else
                    chunk_attention(qn, k, v, run.period, size, scale, fused, softcap))
            o = o[..., :Dv] if o.shape[-1] != Dv else o
            r0 = 0 if kind == "band" else size * run.period  # its first row with a key
            if held is None and r0 == 0:  # every row has keys of it: the running softmax itself
                held = (o.contiguous(), l.contiguous(), 0)
                continue
            if held is None:
                held = (torch.zeros(nb, H, Tq, Dv, dtype=torch.float32, device=query.device),
                        torch.full((nb, H, Tq), float("-inf"), dtype=torch.float32, device=query.device), r0)
            merge_into(held[0], held[1], r0, Tq, o[:, :, r0:], l[:, :, r0:])
            held = (held[0], held[1], min(held[2], r0))
        for n, (r0, shift) in whole.items():
            qn = region_query(run, module, plan, query[rs, :, r0:], qpos[r0:], n, b, -1 - r0, cols)
            k = region_keys(run, module, plan, key[rs, :, :Tk - shift], kpos[:Tk - shift], n, b, 0, base, cols)
            v = value[rs, :, :Tk - shift]
            k, v = kernel_operands(qn, k, v, fused, groups)
            o, l = region_attention(qn.contiguous(), k, v, CAUSAL, scaling * run.regions[n].scale, fused,
                                    softcap=softcap)
            o = o[..., :Dv] if o.shape[-1] != Dv else o
            if held is None:
                held = (torch.zeros(nb, H, Tq, Dv, dtype=torch.float32, device=query.device),
                        torch.full((nb, H, Tq), float("-inf"), dtype=torch.float32, device=query.device), r0)
            merge_into(held[0], held[1], r0, Tq, o, l)
            held = (held[0], held[1], min(held[2], r0))
        for start, stop, parts in blocks:
            n_q = stop - start
            q = query[rs, :, start:stop]
            acc = lse = None
            every = False  # acc and lse hold finite values on every row (no row without a key so far)
            if held is not None:
                acc, lse, every = held[0][:, :, start:stop], held[1][:, :, start:stop], held[2] <= start
            turned = {}
            for n, r0, r1, lo, hi, part, bias, has in parts:
                region = run.regions[n]
                if n not in turned:
                    turned[n] = region_query(run, module, plan, q, qpos[start:stop], n, b, start, cols)
                qn = turned[n]
                k = region_keys(run, module, plan, key[rs, :, lo:hi], kpos[lo:hi], n, b, lo, base, cols)
                v = value[rs, :, lo:hi]
                k, v = kernel_operands(qn, k, v, fused, groups)
                o, l = region_attention(qn[:, :, r0:r1].contiguous(), k, v, part,
                                        scaling * region.scale, fused, bias, has, softcap)
                o = o[..., :Dv] if o.shape[-1] != Dv else o
                whole = (r0, r1) == (0, n_q) and has is None  # every row of the block reaches a key of this part
                if acc is None and whole:  # the first part over every row: the running softmax itself
                    acc, lse, every = o, l, True
                    continue
                if acc is not None and every and whole:  # both over every row, finite: the softmax over their union
                    total = torch.logaddexp(lse, l)  # in three steps (out = acc + (o - acc) sigmoid(l - lse))
                    acc = torch.lerp(acc, o, torch.exp(l - total)[..., None])
                    lse = total
                    continue
                every = False
                if acc is None:
                    acc = torch.zeros(nb, H, n_q, Dv, dtype=torch.float32, device=query.device)
                    lse = torch.full((nb, H, n_q), float("-inf"), dtype=torch.float32, device=query.device)
                merge_into(acc, lse, r0, r1, o, l)
            if acc is None:  # no query of the block reaches a key (padding): nothing to attend to
                acc = torch.zeros(nb, H, n_q, Dv, dtype=torch.float32, device=query.device)
                lse = torch.full((nb, H, n_q), float("-inf"), dtype=torch.float32, device=query.device)
            out[rs, start:stop] = sunk(acc, lse, sinks).transpose(1, 2).to(value.dtype)
    return out, None


class OneCall(NamedTuple):
    """A decoding step's plan for one row, made by the pass's first mapped layer and run by each (`one_call`)."""
    lo: int  # the band of keys [lo, hi) the query reaches, in one kernel call
    hi: int
    ref: int  # the region whose query rotation all of them take
    query: tuple  # cos, sin (1, 1, D') float32 turning the query from its true position to the reference's
    runs: list  # [(start, stop, cos, sin (1, m, D'))]: the other regions' keys turned by their shift
    matrix: Any = None  # the query's turn as a (D, D) matrix (`rotation_matrix`), made with plans made ahead


def one_call_tag(plan, mask, b, base, Tk) -> tuple:
    """The key of row b's OneCall in a pass: the layers of one rotary, window, mask, key set and number of keys share
    it."""
    return ("one", plan.rope, plan.sliding, id(mask), b, base, Tk)


STEPS_AHEAD = 32  # decoding steps planned at once (`step_plan`): a step's own plan cost the built-in model ~0.3 ms of 6
AHEAD_BYTES = 8 << 20  # at most this many bytes of their turns' cos and sin


def decode_parts(run, i: int, k0: int, Tk: int, window, steps: int = 1) -> list:
    """An unpadded row's decoding steps s = 0 … steps - 1, each one query at position i + s against the keys at
    k0 … k0 + T_k - 1 + s: per step, per region the band of keys it reaches, as `row_plan` gives them [(region, 0, 1,
    lo, hi, None, None, None)], or None where a region's keys are not one band (`row_plan` then). In numpy, every step
    at once: a few numpy calls, not the ~40 small torch calls of `row_plan` per step."""
    I = np.arange(i, i + steps)[:, None]  # (steps, 1)
    kpos = np.arange(k0, k0 + Tk + steps - 1)[None, :]  # (1, M): step s has the first T_k + s of them
    M = kpos.shape[1]
    ok = (kpos <= I) & (np.arange(M)[None, :] < Tk + np.arange(steps)[:, None])
    if window:
        ok &= kpos > I - window
    out: list = [[] for _ in range(steps)]
    for n, r in enumerate(run.regions):
        m = np.broadcast_to(np.asarray(r.where(I, kpos)), (steps, M)) & ok
        count = m.sum(axis=1)
        lo, hi = m.argmax(axis=1), M - m[:, ::-1].argmax(axis=1)
        for t in range(steps):
            if out[t] is None or not count[t]:
                continue
            if hi[t] - lo[t] != count[t]:
                out[t] = None
                continue
            out[t].append((n, 0, 1, int(lo[t]), int(hi[t]), None, None, None))
    return out


def one_call_turns(run, parts, qpos, kpos, base):
    """A decoding step's one call in positions (numpy): (lo, hi, the reference region, the query's turn (1[, groups])
    float64, [(lo, hi, the band's turn (m[, groups]) float64)]), or None where one call cannot serve the step (one
    region, a part under a mask, parts that do not tile one band of keys, regions of different scales).

    A region n scores query and key at (Q_n(i), K_n(j)), a function of K_n(j) - Q_n(i); with one query that is the
    same score as the query at a reference region r's Q_r(i) and the key at K_n(j) - Q_n(i) + Q_r(i). So the query is
    turned once, to the region whose keys the cache holds and which reaches the most of them (Self-Extend's grouped
    one, DCA's inter-chunk one), and the other regions' keys (Self-Extend's window of W keys, DCA's last two chunks)
    are turned by the difference, each run of adjacent bands in one turn. Positions in numpy (int64, float64 where a
    map divides): the map's functions take either, and numpy's small calls cost a fraction of torch's."""
    if parts is None or len(parts) < 2 or any(p[5] is not None for p in parts):
        return None
    if len({run.regions[p[0]].scale for p in parts}) > 1:
        return None
    spans = sorted((p[3], p[4], p[0]) for p in parts)
    if any(x[1] != y[0] for x, y in zip(spans, spans[1:])):
        return None
    ref = max(parts, key=lambda p: (run.which[p[0]] == base, p[4] - p[3]))[0]
    q_ref, runs = np.asarray(run.regions[ref].query(qpos)), []
    for lo, hi, n in spans:
        if n == ref:
            continue
        to, frm = run.key_at(run.which[n], kpos[lo:hi]), run.key_at(base, kpos[lo:hi])
        to, frm, shift = _aligned(to, frm, q_ref - np.asarray(run.regions[n].query(qpos)))
        delta = (to - frm + shift).astype(np.float64)
        if runs and runs[-1][1] == lo and runs[-1][2].ndim == delta.ndim:
            runs[-1] = (runs[-1][0], hi, np.concatenate([runs[-1][2], delta]))
        else:
            runs.append((lo, hi, delta))
    return spans[0][0], spans[-1][1], ref, (q_ref - _expand(qpos, q_ref)).astype(np.float64), runs


def one_call_plan(run, plan, query, key, b, qpos, kpos, parts, base):
    """The OneCall of row b's decoding step (`one_call_turns`, its turns' cos and sin), or None where one call cannot
    serve it (there, or keys that need gradients)."""
    if (torch.is_grad_enabled() and key.requires_grad) or 0 in key.stride():
        return None
    qpos = qpos.cpu().numpy() if isinstance(qpos, torch.Tensor) else np.asarray(qpos)
    kpos = kpos.cpu().numpy() if isinstance(kpos, torch.Tensor) else np.asarray(kpos)
    got = one_call_turns(run, parts, qpos, kpos, base)
    if got is None:
        return None
    lo, hi, ref, q_delta, runs = got
    x = query[b:b + 1]
    if all(d.ndim == q_delta.ndim for _, _, d in runs):  # the query's turn and the bands' in one turn_trig
        cos, sin = run.turn_trig(plan, x, np.concatenate([q_delta] + [d for _, _, d in runs])[None])
        return one_call_from(lo, hi, ref, runs, cos, sin, 0)
    return OneCall(lo, hi, ref, run.turn_trig(plan, x, q_delta[None]),
                   [(a, z, *run.turn_trig(plan, x, delta[None])) for a, z, delta in runs])


def one_call_from(lo, hi, ref, runs, cos, sin, at):
    """The OneCall whose turns are rows at, at + 1, … of cos, sin (1, n, D'): the query's, then each band's keys."""
    ends = at + np.cumsum([1] + [z - a for a, z, _ in runs])
    return OneCall(lo, hi, ref, (cos[:, at:at + 1], sin[:, at:at + 1]),
                   [(a, z, cos[:, p:q], sin[:, p:q]) for (a, z, _), p, q in zip(runs, ends, ends[1:])])


def step_plan(run, plan, query, key, i: int, k0: int, Tk: int, base):
    """The OneCall of an unpadded row's decoding step at position i (its keys at k0 … i), or None where one call
    cannot serve it: planned STEPS_AHEAD steps at a time (`decode_parts` over the steps, every turn of them in one
    `turn_trig`), with the new keys' turns to the primary set (`MapRun.primary_keys`), and kept until the rotary's
    frequencies change (dynamic NTK) or a step falls outside them (a new prompt, beam search)."""
    if (torch.is_grad_enabled() and key.requires_grad) or 0 in key.stride() or k0 + Tk - 1 != i or run.regions_at:
        return False  # not planned ahead (a per-length map's next steps have other regions): the step plans itself
    f = run.frequencies(plan, query)
    if f is None:
        return False
    tag = (plan.rope, plan.sliding, base, i, k0, Tk)
    ahead = run._ahead.get(plan.rope)
    if ahead is None or tag not in ahead[1] or not torch.equal(ahead[0], f):
        steps = decode_parts(run, i, k0, Tk, plan.sliding, STEPS_AHEAD)
        turns = (one_call_turns(run, p, np.array([i + s]), np.arange(k0, k0 + Tk + s), base)  # made as the loop
                 for s, p in enumerate(steps))  # below takes them: none past the room for their turns
        deltas, plans, at = [], {}, 0
        keys = run.key_at(run.primary, np.arange(i, i + STEPS_AHEAD)) if run.primary >= 0 else None
        if keys is not None:  # the new key of each step, from its true position to the primary set's
            deltas.append((keys - _expand(np.arange(i, i + STEPS_AHEAD), keys)).astype(np.float64))
            at = STEPS_AHEAD
        ndim = deltas[0].ndim if deltas else None
        rows = max(1, AHEAD_BYTES // (8 * query.shape[-1]))  # the turns kept: a long band (SmolLM2's Self-Extend
        for s, got in enumerate(turns):  # window of 2,048 keys) is planned fewer steps ahead
            if s and at + (0 if got is None else 1 + sum(len(d) for _, _, d in got[4])) > rows:
                break
            if got is None:
                plans[(plan.rope, plan.sliding, base, i + s, k0, Tk + s)] = (None, 0)
                continue
            chunk = [got[3]] + [d for _, _, d in got[4]]
            if any(d.ndim != (ndim or chunk[0].ndim) for d in chunk):
                return False
            ndim = chunk[0].ndim
            plans[(plan.rope, plan.sliding, base, i + s, k0, Tk + s)] = (got, at)
            deltas += chunk
            at += sum(len(d) for d in chunk)
        if not deltas:
            return False
        cos, sin = run.turn_trig(plan, query[:1], np.concatenate(deltas)[None])
        ones = [a for got, a in plans.values() if got is not None] + (list(range(STEPS_AHEAD)) if keys is not None
                                                                       else [])
        R = {}  # each step's query and new key turned by one matmul (`turned_one`): their matrices at once
        if cos.shape[-1] == query.shape[-1] and ones:
            R = dict(zip(ones, rotation_matrix(cos[0, ones], sin[0, ones])))
        made = {t: (None if got is None else
                    one_call_from(got[0], got[1], got[2], got[4], cos, sin, a)._replace(matrix=R.get(a)))
                for t, (got, a) in plans.items()}
        new_keys = ({i + s: (cos[:, s:s + 1], sin[:, s:s + 1], R.get(s)) for s in range(STEPS_AHEAD)}
                    if keys is not None else {})
        ahead = run._ahead[plan.rope] = (f, made, new_keys)
    return ahead[1][tag]


def one_call(run, module, one, query, key, value, b, scaling, fused, softcap, groups):
    """A decoding step's one query (row b) against every region in one kernel call (its OneCall `one`) -> (out (1, H,
    1, Dv) float32, log-sum-exp (1, H, 1)). The other regions' bands are turned in place in the cache's keys for the
    call and put back after it, bit for bit: one softmax over the whole band replaces a call per region and their
    merge."""
    apply = rotation_of(module)
    fast = key.dtype == torch.float32 and _ROTATES_HALF.get(type(module)) is True  # rotate-half in place, in float32
    if one.matrix is not None and ("R", id(one)) not in run._trig:
        run._trig[("R", id(one))] = one.matrix
    q = turned_one(module, query[b:b + 1], *one.query, run._trig, ("R", id(one)))
    saved = []
    try:
        for lo, hi, cos, sin in one.runs:
            band = key[b:b + 1, :, lo:hi]
            old = band.clone()
            saved.append((band, old))
            if fast and cos.shape[-1] == band.shape[-1]:
                rotate_half_into(old, cos, sin, out=band)
            else:
                band.copy_(apply(old.float(), cos, sin).to(band.dtype))
        k, v = key[b:b + 1, :, one.lo:one.hi], value[b:b + 1, :, one.lo:one.hi]
        k, v = kernel_operands(q, k, v, fused, groups)
        o, l = region_attention(q.contiguous(), k, v, None, scaling * run.regions[one.ref].scale, fused, None, None,
                                softcap)
    finally:
        for band, old in saved:
            band.copy_(old)
    Dv = value.shape[-1]
    return (o[..., :Dv] if o.shape[-1] != Dv else o), l


def _aligned(*xs):
    """Position arrays (…, T) or (…, T, groups), numpy or torch, given one number of dimensions (a groups axis added
    where missing)."""
    xs = [x if isinstance(x, (np.ndarray, torch.Tensor)) else np.asarray(x) for x in xs]
    if len({x.ndim for x in xs}) == 1:
        return xs
    return [x if x.ndim == max(y.ndim for y in xs) else x[..., None] for x in xs]


def kernel_operands(q, k, v, fused, groups):
    """k, v as the attention call takes them against q: the fused kernel wants one head size (v padded with zeros
    after), the explicit scores every query head against its own key head (GQA's key heads repeated)."""
    if fused is not None and q.shape[-1] != v.shape[-1]:
        v = torch.nn.functional.pad(v, (0, q.shape[-1] - v.shape[-1]))
    if fused is None and groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    return k, v


def sunk(acc, lse, sinks):
    """acc (1, H, n, Dv) over keys whose log-sum-exp is lse (1, H, n), renormalised with gpt-oss's sink logit per head
    (H,) as one more key with no value in the softmax; acc itself where the model has none."""
    if sinks is None:
        return acc
    return acc * torch.exp(lse - torch.logaddexp(lse, sinks.float()[None, :, None]))[..., None]


def region_query(run, module, plan, q, qpos, n, b, start, cols):
    """Region n's queries for a block of row b (1, H, n_q, D'), turned from their true positions to the region's.
    Under a key-pair selection (DPE's top < 1) only the selected pairs move: where the region's keys are another set,
    query and key are two halves side by side ([moved query on the selected columns, true query on the others] against
    [the set's key, the true key], `region_keys`), so each query head scores its own choice against the shared key
    heads."""
    region = run.regions[n]
    key = ("q", plan.rope, n, b, start, q.shape[2])  # this block's turn, made by the pass's first mapped layer
    delta = None
    if key not in run._trig:
        delta = torch.as_tensor(region.query(qpos)) - _expand(qpos, region.query(qpos))
        if not bool(delta.any()):
            run._trig[key] = None  # the region's queries at their true positions: nothing to turn
    moved = q if run._trig.get(key, 0) is None else run.turn(module, plan, q, None if delta is None else delta[None],
                                                              key=key)
    if cols is None:
        return moved
    if run.which[n] < 0:
        return torch.where(cols, moved, q)
    return torch.cat([moved * cols, q * ~cols], dim=-1)


def region_keys(run, module, plan, k, kpos, n, b, lo, base, cols):
    """Region n's keys of a band (1, H_kv, m, D) that arrive in key set `base`, at positions kpos (m,): in the region's
    set (turned where it is another: the band alone, its cos and sin kept for the pass's other layers); under a key-pair
    selection where the region's set is not the true one, [the set's key, the true key] side by side."""
    e = run.which[n]
    tag = ("k", plan.rope, n, b, lo, k.shape[2], base)
    out = run.keys_in(module, plan, k, kpos, e, base, tag)
    if cols is None or e < 0:
        return out
    return torch.cat([out, run.keys_in(module, plan, k, kpos, -1, base, tag + ("true",))], dim=-1)


def rotary_modules(model) -> dict[str, Any]:
    """{layer type or "": (the rotary module, its layer type or None)}."""
    found = {}
    for mod in model.modules():
        if isinstance(getattr(mod, "inv_freq", None), torch.Tensor):
            found[""] = (mod, None)
        for lt in getattr(mod, "layer_types", None) or []:
            if isinstance(getattr(mod, f"{lt}_inv_freq", None), torch.Tensor):
                found[lt] = (mod, lt)
    return found



def model_map_run(model, regions_fn, params: dict, length: int, selection: dict | None = None) -> MapRun:
    """The MapRun of a transformers `model` under the map whose region function is `regions_fn(**params)` (a
    per-length map's: `regions_fn(**params, length=T)`), exported for `length` tokens: its rotary modules and attention
    modules found in it (`map_run_for`). `selection`: {layer: [each head's pair indices]} (DPE's key pairs)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    found = sorted(rotary_modules(model).values(), key=lambda s: s[1] or "")
    attention = {m.layer_idx: m for m in model.modules()
                 if isinstance(getattr(m, "layer_idx", None), int) and "Attention" in type(m).__name__}
    return map_run_for(config, found, attention, regions_fn, params, length, selection)


def map_run_for(config, rotaries: list, attention: dict, regions_fn, params: dict, length: int,
                selection: dict | None = None) -> MapRun:
    """The MapRun of a model of (text) `config` whose rotary modules are `rotaries` [(module, its layer type or
    None)] and attention modules `attention` {layer: module}: its layers planned (`plan_layers`), each rotary module's
    forward without transformers' dynamic_rope_update (called at the differences a turn needs, it must not re-pick
    longrope's factors or reset dynamic NTK's base from them; the model's own call at the pass's positions set them)."""
    slots = [SimpleNamespace(layer_type=lt, module=m) for m, lt in rotaries]
    plans = plan_layers(config, slots, length)
    forwards, inv_freq = {}, {}
    for plan in plans:
        if plan.rope is not None and plan.rope not in forwards:
            module, lt = slots[plan.rope].module, slots[plan.rope].layer_type
            inv_freq[plan.rope] = (module, f"{lt}_inv_freq" if lt else "inv_freq")
            own = partial(inspect.unwrap(type(module).forward), module)
            forwards[plan.rope] = partial(own, layer_type=lt) if lt else own
    per_length = "length" in inspect.signature(regions_fn).parameters  # its regions depend on the input's length
    regions = regions_fn(**params, length=max(2, length)) if per_length else regions_fn(**params)
    return MapRun(plans, forwards, regions, getattr(config, "_attn_implementation", None),
                  {int(layer): heads for layer, heads in (selection or {}).items()}, attention, length, inv_freq,
                  partial(regions_fn, **params) if per_length else None)


def map_forward(model, run: MapRun, forward, names: list[str], kwargs: dict):
    """`forward(**kwargs)` (the model's own forward, its parameters `names`) as one pass under `run`: each row's
    positions from its attention mask where it is padded (generate's own rule: left padding counts from each row's
    first token) or after the cache, the cache's `update` wrapped (`MapRun.update`) and the attention function
    swapped for the run while it lasts; all put back after, whatever happens."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    cache_name = "cache" if "cache" in names else "past_key_values"
    cache = kwargs.get(cache_name)
    if cache is None and "past_key_values" in kwargs and cache_name != "past_key_values":
        cache = kwargs.pop("past_key_values")
    use_cache = kwargs.get("use_cache")
    use_cache = config.use_cache if use_cache is None else use_cache
    if cache is None and use_cache and run.primary >= 0 and not model.training:
        cache = transformers.DynamicCache(config=model.config)
    if cache is not None:
        kwargs[cache_name] = cache
    ids, embeds = kwargs.get("input_ids"), kwargs.get("inputs_embeds")
    T = (ids if ids is not None else embeds).shape[1]
    position_ids = kwargs.get("position_ids")
    mask = kwargs.get("attention_mask")
    if isinstance(mask, dict):  # generate's static path on a config with layer types: a mask per layer type
        mask = mask.get("full_attention", next((m for m in mask.values() if isinstance(m, torch.Tensor)), None))
    padded = isinstance(mask, torch.Tensor) and mask.ndim == 2 and not bool(mask.all())
    if position_ids is None or padded:  # each row from its first valid token (generate's own rule; its static
        if isinstance(mask, torch.Tensor) and mask.ndim == 2:  # cache path hands every row arange), else after
            position_ids = (mask.long().cumsum(-1) - 1).clamp_min(0)[:, -T:]  # the cache
        elif isinstance(mask, torch.Tensor) and mask.ndim == 4:  # generate's static path: the mask made already
            position_ids = positions_from_mask(mask)
        else:
            seen = cache.get_seq_length() if cache is not None else 0
            position_ids = (torch.arange(T, device=(ids if ids is not None else embeds).device) + seen)[None]
        kwargs["position_ids"] = position_ids
    run.begin(position_ids, cache is None or cache.get_seq_length() == 0)
    before = config._attn_implementation
    run.implementation = before
    modeling_utils.ALL_ATTENTION_FUNCTIONS[ATTENTION_NAME] = run
    masks = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS._global_mapping
    if before in masks:
        masks[ATTENTION_NAME] = masks[before]
    if cache is not None:
        cache.update = run.update(type(cache).update.__get__(cache))
    configs = {id(model.config): model.config, id(config): config}.values()
    for c in configs:
        c._attn_implementation = ATTENTION_NAME
    try:
        return forward(**kwargs)
    finally:
        if cache is not None:
            cache.__dict__.pop("update", None)
        for c in configs:
            c._attn_implementation = before
        masks.pop(ATTENTION_NAME, None)
        run.begin(None)
