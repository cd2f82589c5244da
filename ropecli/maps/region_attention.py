"""The attention of a position map's regions (`ropecli.maps.mapped_attention` registers it per layer): queries and
keys rotated per region, the regions merged by log-sum-exp.

For each region the queries at the region's query positions and the keys at its key positions, with the rotary
module's own frequencies and attention scaling (whatever schedule `models.patch` wrote there). Query block by query
block, each region attends to the band of keys it reaches under its mask in one fused call (torch's CPU flash kernel,
which returns the log-sum-exp; explicit scores elsewhere, and where the model soft-caps its logits), and the regions
merge exactly by log-sum-exp: memory per layer is the block's (block, band) masks, never a T x T matrix per head for
the whole window. On CUDA the regions run in flex attention instead (`maps.flex_regions`). Queries are the last T_q
of the T_k keys (a prefill, or decoding with a cache; one sequence, no padding).
"""

from __future__ import annotations

import warnings

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.maps.flex_regions import FlexRegions, flex_available
from ropecli.maps.map_bands import CAUSAL, masked, merge_into, split_band, whole_triangles
from ropecli.maps.map_layers import column_pairs
from ropecli.maps.map_rotation import rotated

torch = deferred("torch")
F = deferred("torch.nn.functional")

BLOCK = 512  # queries per block: each region's mask is (BLOCK, its band of keys)
MASK_CACHE_BYTES = 256 * 2 ** 20  # one shape's masks, kept across the layers of a forward (bool: a byte a pair)
_LAST: dict = {}  # the last shape's blocks, by map and shape: the next window of that length reuses them


def _fused_for(device: torch.device):
    """torch's CPU flash kernel returning the log-sum-exp (private, hence looked up, not assumed); None elsewhere."""
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    return op if device.type == "cpu" else None


def region_attention(q, k, v, mask, scaling: float, fused=None, bias=None, has=None, softcap=None):
    """One region's attention: q (B, H, n, D) against keys k, v (B, H, m, D) under mask (n, m) (None: every pair;
    CAUSAL: the causal square) -> out (B, H, n, D) float32 and log-sum-exp (B, H, n), -inf (and out 0) on rows where
    the region has no key. `bias` (the mask as 0 / -inf in q's dtype) and `has` (rows with a key; None: every row) are
    the mask's, made once per shape by `MappedAttention.blocks`. `softcap`: the scores capped as the model caps them
    (Gemma 2: cap tanh(s / cap)), in the explicit scores only."""
    causal = isinstance(mask, str)
    if fused is not None:  # scores never materialised: the kernel adds the mask block by block (skips it if causal)
        if mask is not None and not causal and bias is None:
            bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))
        out, lse = fused(q, k, v, 0.0, causal, attn_mask=None if bias is None else bias[None, None], scale=scaling)
        out, lse = out.float(), lse.float()
    else:  # the twin: explicit scores (B, H, n, m) in float32
        if causal:
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril_()
        s = torch.matmul(q, k.transpose(-1, -2)).float().mul_(scaling)
        s = s if not softcap else torch.tanh(s / softcap).mul_(softcap)
        s = s if mask is None else s.masked_fill_(~mask, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)
        out = torch.matmul(torch.exp(s - lse[..., None]).nan_to_num_(0.0), v.float())
    if mask is None or causal:
        return out, lse
    has = mask.any(-1) if has is None and bias is None else has  # (n,); None: every row has a key
    if has is None:
        return out, lse
    return out.masked_fill(~has[:, None], 0.0), lse.masked_fill(~has, float("-inf"))


class MappedAttention:
    """The attention function of one map: `__call__(module, query, key, value, attention_mask, scaling, ...)`.
    Per query block and region: the region's rotated queries against the band of keys it reaches, in one fused
    attention call that also returns its log-sum-exp; the regions merge exactly by log-sum-exp weights (a softmax over
    the union of their keys). Memory per layer: one (block, band) mask, never a T x T score matrix per head."""

    def __init__(self, regions, rotary, block: int = BLOCK, fused: bool = True, kernel: str = "auto", name=None,
                 first_layer: int = 0, selection: dict | None = None, observe=None, per_prompt: bool = False):
        """`regions(n)`: the map's regions for n keys. `kernel`: "auto" (flex attention on CUDA where torch has it,
        the fused blocks elsewhere), "flex" (flex attention on any device: eager on the CPU, the twin the tests run) or
        "blocks" (the fused blocks everywhere). `name`: the map with its parameters, under which the blocks of a shape
        outlive this object (`_LAST`: the next window of the same length, under the same map, finds them built).
        `first_layer`: the first layer this function serves (a forward pass begins there: cos and sin afresh).
        `selection`: {layer: (heads, pairs) bool} the pairs the map moves per head (DPE's key pairs,
        `maps.pair_selection`), the rest at true positions; None: every pair. `observe(module, query, key, pair)`:
        called with each layer's unrotated queries and keys and the pair of each rotary column (`pair_contributions`).
        `per_prompt`: the map's regions are fixed by the prompt (`PositionMap.per_prompt`: LaMPE's three regions),
        `regions(n, prompt)`; the prompt is the keys of the last pass that had no cache (T_q = T_k)."""
        self.name, self.first_layer = name, first_layer
        self.regions_for, self.rotary, self.block, self.fused = regions, rotary, block, fused
        self._shape, self._blocks, self.regions = None, [], ()
        self.whole: dict[int, tuple[int, int]] = {}  # region -> (first row, shift): one causal call (`whole_triangles`)
        self.kernel, self._flex = kernel, {}
        self._trig: dict | None = None  # cos and sin of this forward pass, by (queries or keys, region, block or reach)
        self.selection, self.observe, self._columns = selection, observe, {}
        self._pair: dict = {}
        self.per_prompt, self.prompt = per_prompt, None  # the last prefill's length: a per-prompt map's decoding

    def pair(self, module, x) -> torch.Tensor:
        """(head dims,) the rotary pair of each column of x's heads as the model rotates it, -1 where it does not
        rotate (`map_layers.column_pairs`: probed once per attention class and device)."""
        key = (type(module), x.device)
        if key not in self._pair:
            self._pair[key] = column_pairs(module, self.rotary, x)[0]
        return self._pair[key]

    def columns(self, module, query) -> torch.Tensor | None:
        """(1, H, 1, D) bool: the columns of each head the map moves in this layer (its selected pairs' columns); None
        where every pair moves."""
        if self.selection is None:
            return None
        layer = getattr(module, "layer_idx", None)
        if layer not in self._columns:
            if layer not in self.selection:
                raise RopeCliError(f"the key-pair selection has no layer {layer}: select on this model")
            pair, sel = self.pair(module, query), torch.as_tensor(self.selection[layer], device=query.device)
            H = query.shape[1]
            if sel.ndim != 2 or sel.shape[0] != H or sel.shape[1] <= int(pair.max()):
                raise RopeCliError(f"layer {layer}: the key-pair selection is {tuple(sel.shape)} (heads, pairs), the "
                                   f"model's ({H}, {int(pair.max()) + 1}): select on this model")
            cols = torch.zeros(H, query.shape[-1], dtype=torch.bool, device=query.device)
            cols[:, pair >= 0] = sel[:, pair[pair >= 0]]
            self._columns[layer] = cols[None, :, None, :]
        return self._columns[layer]

    def flex_for(self, device: torch.device, softcap=None):
        """The flex path for `device`, or None where the fused blocks run (a failed compile falls back once, said)."""
        wanted = self.kernel == "flex" or (self.kernel == "auto" and device.type == "cuda")
        if not wanted or not flex_available():
            return None
        if (device.type, softcap) not in self._flex:
            self._flex[device.type, softcap] = FlexRegions(self.regions_for, compiled=device.type == "cuda",
                                                           name=self.name, softcap=softcap)
        return self._flex[device.type, softcap]

    def blocks(self, Tq: int, Tk: int, device, dtype=None) -> list:
        """[(start, query positions, [(region index, r0, r1, lo, hi, mask, bias, rows with a key)])] for T_q queries
        ending at T_k keys (`split_band`, `masked`): each region's rows [r0, r1) of a block of queries (the rows it
        reaches any key from) and its band of keys from them in up to three parts, the
        full columns unmasked, a causal square under the kernel's own causal skip, the rest under its mask as a bias in
        the queries' dtype. The same in every layer, so built once per shape and kept for the next layer while the
        biases fit in MASK_CACHE_BYTES."""
        dtype = torch.float32 if dtype is None else dtype
        prompt = self.prompt if self.per_prompt else None
        key = (self.name, self.block, Tq, Tk, device, dtype, prompt)
        if self._shape != (Tq, Tk, device, dtype, prompt) and self.name is not None and _LAST.get("key") == key:
            self.regions, self._blocks, self.whole = _LAST["built"]
            self._shape = (Tq, Tk, device, dtype, prompt)
        if self._shape != (Tq, Tk, device, dtype, prompt):
            self.regions = self.regions_for(Tk, prompt) if self.per_prompt else self.regions_for(Tk)
            kj, out = torch.arange(Tk, device=device), []
            shape = torch.zeros(3, len(self.regions), Tq, dtype=torch.long)  # per region and row: keys, first, last
            for start in range(0, Tq, self.block):
                qi = torch.arange(Tk - Tq + start, Tk - Tq + min(Tq, start + self.block), device=device)
                causal = qi[:, None] >= kj[None, :]  # (block, T_k)
                bands = []
                for n, r in enumerate(self.regions):
                    mask = r.where(qi[:, None], kj[None, :]) & causal
                    rows = slice(start, start + len(qi))
                    shape[0, n, rows] = mask.sum(dim=1).cpu()
                    shape[1, n, rows] = (~mask[:, 0]).long().cpu()  # 0 where the row reaches key 0
                    shape[2, n, rows] = (mask * kj).amax(dim=1).cpu()
                    bands += [(n, r0, r1, lo, hi, *masked(m, dtype)) for r0, r1, lo, hi, m in split_band(mask)]
                out.append((start, qi, bands))
            self.whole = whole_triangles(shape, Tq, Tk)
            out = [(start, qi, [b for b in bands if b[0] not in self.whole]) for start, qi, bands in out]
            if sum(b[6].numel() * b[6].element_size() for _, _, bands in out for b in bands
                   if b[6] is not None) > MASK_CACHE_BYTES:
                return out  # too big to keep for the next layer: rebuilt there (time, not memory)
            self._shape, self._blocks = (Tq, Tk, device, dtype, prompt), out
            _LAST.clear()
            _LAST.update(key=key, built=(self.regions, out, self.whole))
        return self._blocks

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        B, H, Tq, D = query.shape
        if value.shape[-1] < D:  # MLA: values narrower than queries and keys (v_head_dim < qk_head_dim); zero columns
            Dv = value.shape[-1]  # change no score and no log-sum-exp (transformers pads them so for FlashAttention)
            out, weights = self(module, query, key, F.pad(value, (0, D - Dv)), attention_mask, scaling, dropout, **kwargs)
            return out[..., :Dv].contiguous(), weights
        softcap = kwargs.get("softcap")  # Gemma 2's logit soft-capping, inside each region before the merge
        sinks = kwargs.get("s_aux")  # gpt-oss: a logit per head in every softmax's denominator, no value (H,)
        Tk = key.shape[2]
        if Tq == Tk or self.prompt is None:  # a prefill (or a cache filled elsewhere: its keys before these queries)
            self.prompt = Tk if Tq == Tk else Tk - Tq
        scaling = D ** -0.5 if scaling is None else scaling
        if padded(attention_mask):
            raise RopeCliError("ropecli's mapped attention runs unpadded sequences of one length (as its evaluations "
                               "do); a padded batch runs in the exported folder (ropecli export --to transformers --map "
                               "MAP --out DIR), which reads each row's positions from its mask")
        if self.observe is not None:
            self.observe(module, query, key, self.pair(module, query))
        cols = self.columns(module, query)
        if cols is not None and key.shape[1] != H:  # a selection per query head: each its own keys' rotation
            key, value = key.repeat_interleave(H // key.shape[1], dim=1), value.repeat_interleave(H // key.shape[1], dim=1)
        if (flex := None if self.per_prompt and Tq < Tk else self.flex_for(query.device, softcap)) is not None:
            try:
                out = flex(query, key, value, scaling,
                           lambda x, p, t: rotated(x, p, self.rotary, module=module, true=t, columns=cols), sinks)
                return out.transpose(1, 2).contiguous(), None
            except Exception as exc:  # noqa: BLE001  a compile that fails here must not cost the user the run
                if self.kernel == "flex":
                    raise
                warnings.warn(f"position map: flex attention failed on {query.device} ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); running the fused blocks instead (slower)", stacklevel=2)
                self.kernel = "blocks"
        fused = _fused_for(query.device) if self.fused and not softcap else None
        groups = 1 if fused is not None else H // key.shape[1]  # GQA: the fused kernel takes it as is; the twin repeats
        value = value.repeat_interleave(groups, dim=1) if groups > 1 else value
        kj, blocks = torch.arange(Tk, device=query.device), self.blocks(Tq, Tk, query.device, query.dtype)  # at T_k
        if getattr(module, "layer_idx", None) in (None, self.first_layer):  # a new forward pass (or a module that does
            self._trig = {} if getattr(module, "layer_idx", None) is not None else None  # not say): cos, sin afresh
        trig = self._trig
        reach = [max((b[4] for _, _, bands in blocks for b in bands if b[0] == n),
                     default=Tk - self.whole[n][1] if n in self.whole else 0) for n in range(len(self.regions))]  # each region's keys up to the farthest one it reaches, rotated once
        # ... and from the nearest one: a decoding step's local region (Self-Extend's W keys) rotates its band alone
        nearest = [0 if n in self.whole else min((b[3] for _, _, bands in blocks for b in bands if b[0] == n), default=0)
                 for n in range(len(self.regions))]
        keys = [rotated(key[:, :, f:h], r.key(kj[f:h]), self.rotary, trig, ("k", n, f, h), module, kj[f:h], cols)
                if h > f else key[:, :, :0] for n, (r, f, h) in enumerate(zip(self.regions, nearest, reach))]  # a region
        # no query reaches yet (a decoding step below its first key): nothing to rotate (longrope's update fails on none)
        keys = [k.repeat_interleave(groups, dim=1) for k in keys] if groups > 1 else keys
        out = torch.empty(B, Tq, H, D, dtype=value.dtype, device=value.device)  # the layout the layer reads
        acc = acc_lse = None
        for n, (r0, shift) in self.whole.items():  # a whole region in one causal call, as the unpatched model runs
            qi = torch.arange(Tk - Tq + r0, Tk, device=query.device)
            q = rotated(query[:, :, r0:], self.regions[n].query(qi), self.rotary, trig, ("w", n), module, qi,
                        cols).contiguous()
            o, l = region_attention(q, keys[n][:, :, :Tk - shift], value[:, :, :Tk - shift], CAUSAL,
                                    scaling * self.regions[n].scale, fused, softcap=softcap)
            if acc is None:
                acc = torch.zeros(B, H, Tq, D, dtype=torch.float32, device=query.device)
                acc_lse = torch.full((B, H, Tq), float("-inf"), dtype=torch.float32, device=query.device)
            merge_into(acc, acc_lse, r0, Tq, o, l)
        for start, qi, bands in blocks:
            q = query[:, :, start:start + len(qi)]
            rq = {n: rotated(q, self.regions[n].query(qi), self.rotary, trig, ("q", n, start), module, qi,
                             cols).contiguous() for n in {b[0] for b in bands}}
            merged = lse = None
            if acc is not None:  # the whole regions' rows of this block, merged into below
                merged, lse = acc[:, :, start:start + len(qi)], acc_lse[:, :, start:start + len(qi)]
            for n, r0, r1, lo, hi, mask, bias, has in bands:
                o, l = region_attention(rq[n][:, :, r0:r1], keys[n][:, :, lo - nearest[n]:hi - nearest[n]],
                                        value[:, :, lo:hi], mask,
                                        scaling * self.regions[n].scale, fused, bias, has, softcap)
                if merged is None and (r0, r1) == (0, len(qi)):
                    merged, lse = o, l
                    continue
                if merged is None:
                    merged = torch.zeros(B, H, len(qi), D, dtype=torch.float32, device=query.device)
                    lse = torch.full((B, H, len(qi)), float("-inf"), dtype=torch.float32, device=query.device)
                merge_into(merged, lse, r0, r1, o, l)
            merged = merged if sinks is None else with_sinks(merged, lse, sinks)
            out[:, start:start + len(qi)] = merged.transpose(1, 2)
        return out, None


def padded(mask) -> bool:
    """Whether the model's attention mask leaves a key out of the last query's reach (padding, or an empty slot of a
    static cache): the last query of an unpadded causal sequence reaches every key. None (sdpa's causal skip): no."""
    if not isinstance(mask, torch.Tensor):
        return False
    last = mask[..., -1, :] if mask.ndim == 4 else mask
    return not bool(last.all() if last.dtype == torch.bool else (last > torch.finfo(last.dtype).min / 2).all())


def with_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """out (B, H, n, D) over keys whose log-sum-exp is lse (B, H, n), renormalised as if each head's sink logit (H,)
    were one more key with no value in the softmax (gpt-oss's `eager_attention_forward`)."""
    total = torch.logaddexp(lse, sinks.float()[None, :, None])
    return (out.float() * torch.exp(lse - total)[..., None]).to(out.dtype)
