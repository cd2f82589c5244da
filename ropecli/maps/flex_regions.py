"""The GPU path of a position map: each region one `flex_attention` call under a `BlockMask`, merged with the
others by log-sum-exp in float32.

Per (T_q, T_k, device), once and reused by every layer: each region's (query block, key block) classes (no pair, some
pairs, every pair), found by evaluating the region's mask a band of query rows at a time (`block_classes`: never a
T x T mask, never `create_block_mask`'s compile of a closure); the region's queries and keys cut to the blocks it
reaches (`extent`), and a BlockMask made from the cut's classes with `BlockMask.from_kv_blocks` (fully masked blocks
skipped, full blocks run unmasked). The cut's mask function reads its offsets from two 0-d tensors, so a new length or a
new cut is new data for the compiled kernel, not a new graph. Per layer and region: its queries and keys rotated once
at the region's positions (the rotary module's own frequencies and scaling), one flex call (GQA native: `enable_gqa`;
bf16/fp16 in, the log-sum-exp out), the cut's rows merged into the output a slab of rows at a time (float32 weights,
temporaries bounded by MERGE_ROWS). On CUDA the call is compiled (`torch.compile(flex_attention)`, shapes dynamic after
the first); on the CPU it runs eagerly (slow: the twin the tests compare with the fused path and the unpatched model)."""

from __future__ import annotations

import warnings

from ropecli.deferred import deferred, installed
from ropecli.maps.map_bands import whole_triangles

flex_attention = deferred("torch.nn.attention.flex_attention")
torch = deferred("torch")

FLEX_BLOCK = 128  # flex attention's block (rows and columns)
PASS_PAIRS = 2 ** 25  # (query, key) pairs per pass of `block_classes`: its int64 temporaries stay near 256 MiB
MERGE_ROWS = 8192  # rows of a cut merged at a time: float32 temporaries of (B, H, MERGE_ROWS, D)
RECOMPILE_LIMIT = 64  # a map's regions are distinct mask functions, each compiled once static and once dynamic
TRIANGLES_FUSED = True  # FlexRegions' default: whole shifted causal triangles in the device's fused causal kernel
_LAST: dict = {}  # the last shape's cuts, by map and shape: the next window of that length (a new `mapped`) reuses them


def flex_available() -> bool:
    return installed("torch.nn.attention.flex_attention")


def block_classes(where, Tq: int, Tk: int, shift: int, device, block: int = FLEX_BLOCK):
    """(some, every, rows): `some` and `every` (ceil(T_q/block), ceil(T_k/block)) bool, per (query block, key block)
    whether the region holds some of its causal pairs and whether it holds every one; `rows` (3, T_q) long, per query
    row the keys it reaches, 0 where it reaches key 0 (else 1), and its last key (`map_bands.whole_triangles` reads
    them). Query row r is position r + shift (`where(i, j)`, i a column and j a row of positions). Padding past T_q or
    T_k counts as no pair, so an edge block is never full (as torch's own `create_block_mask`)."""
    nq, nk = -(-Tq // block), -(-Tk // block)
    kj = torch.arange(nk * block, device=device)
    step = max(1, PASS_PAIRS // (nk * block * block)) * block  # query rows per pass, whole blocks
    some = torch.zeros(nq, nk, dtype=torch.bool, device=device)
    every = torch.zeros(nq, nk, dtype=torch.bool, device=device)
    rows = torch.zeros(3, nq * block, dtype=torch.long, device=device)
    for r0 in range(0, nq * block, step):
        qi = torch.arange(r0, min(nq * block, r0 + step), device=device)
        i, j = qi[:, None] + shift, kj[None, :]
        m = where(i, j) & (i >= j) & (qi[:, None] < Tq) & (j < Tk)
        counts = m.view(len(qi) // block, block, nk, block).sum(dim=(1, 3))
        some[r0 // block:r0 // block + len(counts)] = counts > 0
        every[r0 // block:r0 // block + len(counts)] = counts == block * block
        rows[0, qi], rows[1, qi], rows[2, qi] = m.sum(dim=1), (~m[:, 0]).long(), (m * j).amax(dim=1)
    return some, every, rows[:, :Tq].cpu()


def extent(some: torch.Tensor, Tq: int, Tk: int, block: int = FLEX_BLOCK) -> tuple[int, int, int, int] | None:
    """(q0, q1, k0, k1): the rows of the query blocks that reach any key and the columns of the key blocks they reach;
    None when the region reaches no key."""
    rows, cols = some.any(dim=1).nonzero().flatten(), some.any(dim=0).nonzero().flatten()
    if not len(rows):
        return None
    return (int(rows[0]) * block, min(Tq, (int(rows[-1]) + 1) * block), int(cols[0]) * block,
            min(Tk, (int(cols[-1]) + 1) * block))


def as_block_mask(some: torch.Tensor, every: torch.Tensor, mask_mod, Tq: int, Tk: int, block: int = FLEX_BLOCK):
    """A BlockMask for T_q x T_k from per-block classes: `every` blocks run without the mask function, the rest of
    `some` under it, the others skipped."""
    def ordered(m):  # (nq, nk) bool -> counts (1, 1, nq) and the true columns first (1, 1, nq, nk), int32
        idx = torch.argsort(m.to(torch.int8), dim=-1, descending=True, stable=True)
        return m.sum(dim=-1, dtype=torch.int32)[None, None], idx.to(torch.int32)[None, None]

    partial = some & ~every
    n, idx = ordered(partial)
    fn, fidx = ordered(every)
    return flex_attention.BlockMask.from_kv_blocks(n, idx, fn, fidx, BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(Tq, Tk))


def cut_mask(where, q_offset: torch.Tensor, k_offset: torch.Tensor):
    """The mask function of a cut: query index q is position q + q_offset, key index k is k + k_offset (0-d tensors:
    data to a compiled kernel, not constants it recompiles for)."""
    def mask(b, h, q_idx, kv_idx):
        i, j = q_idx + q_offset, kv_idx + k_offset
        return where(i, j) & (i >= j)

    return mask


class FlexRegions:
    """The regions of one map on flex attention; `__call__(query, key, value, scaling, rotated)` -> (B, H, T_q, D) in
    the value's dtype; `rotated(x, positions, true positions)` rotates a region's queries or keys."""

    def __init__(self, regions_for, compiled: bool, name=None, triangles: bool | None = None, softcap=None):
        """`name`: the map with its parameters, under which the cuts of a shape outlive this object (`_LAST`).
        `triangles`: a region that is one shifted causal triangle runs in the device's fused causal kernel
        (`causal_kernel`) where there is one, not in flex attention (its blocks are all full or causal: the fused
        kernel is faster on them); default TRIANGLES_FUSED. `softcap`: the scores capped as the model caps them (Gemma
        2), a score_mod in every call (the fused kernel cannot: no triangles then)."""
        if compiled:
            _raise_recompile_limit()
        self.regions_for = regions_for
        self.flex = torch.compile(flex_attention.flex_attention) if compiled else flex_attention.flex_attention
        self.compiled, self.name = compiled, name
        self.triangles = (TRIANGLES_FUSED if triangles is None else triangles) and not softcap
        self.score_mod = None if not softcap else softcapped(softcap)
        self._shape, self._cuts = None, []

    def cuts(self, Tq: int, Tk: int, device, dtype) -> list:
        """[(region, q0, q1, k0, k1, BlockMask of the cut, or None: rows [q0, q1) against keys [k0, k1) causal, in the
        fused kernel)] for T_q queries ending at T_k keys, built once per shape."""
        causal = causal_kernel(device, dtype) if self.triangles else None
        shape = (Tq, Tk, device, causal is not None)
        if self._shape == shape:
            return self._cuts
        key = (self.name, *shape)
        if self.name is not None and _LAST.get("key") == key:
            self._shape, self._cuts = shape, _LAST["cuts"]
            return self._cuts
        shift, out = Tk - Tq, []
        for r in self.regions_for(Tk):
            some, every, rows = block_classes(r.where, Tq, Tk, shift, device)
            if (ext := extent(some, Tq, Tk)) is None:  # the region reaches no key from these queries
                continue
            if causal is not None and (tri := whole_triangles(rows[:, None], Tq, Tk)):
                r0, s = tri[0]
                out.append((r, r0, Tq, 0, Tk - s, None))
                continue
            q0, q1, k0, k1 = ext
            cut = (slice(q0 // FLEX_BLOCK, -(-q1 // FLEX_BLOCK)), slice(k0 // FLEX_BLOCK, -(-k1 // FLEX_BLOCK)))
            offsets = torch.tensor(q0 + shift, device=device), torch.tensor(k0, device=device)
            bm = as_block_mask(some[cut], every[cut], cut_mask(r.where, *offsets), q1 - q0, k1 - k0)
            out.append((r, q0, q1, k0, k1, bm))
        self._shape, self._cuts = shape, out
        if self.name is not None:
            _LAST.clear()
            _LAST.update(key=key, cuts=out)
        return out

    def __call__(self, query, key, value, scaling: float, rotated, sinks=None) -> torch.Tensor:
        """`sinks`: gpt-oss's logit per head (H,) in every softmax's denominator."""
        try:
            return self.run(query, key, value, scaling, rotated, sinks)
        except RuntimeError as exc:  # the fused causal kernel refused (a build without it, a head size it lacks)
            if not self.triangles or causal_kernel(query.device, query.dtype) is None:
                raise
            warnings.warn(f"position map: the fused causal kernel failed on {query.device} ({str(exc)[:200]}); "
                          "running every region in flex attention", stacklevel=2)
            self.triangles, self._shape = False, None
            return self.run(query, key, value, scaling, rotated, sinks)

    def run(self, query, key, value, scaling: float, rotated, sinks=None) -> torch.Tensor:
        B, H, Tq, D = query.shape
        Tk = key.shape[2]
        device, shift = query.device, Tk - Tq
        out = lse = None
        for r, q0, q1, k0, k1, bm in self.cuts(Tq, Tk, device, query.dtype):
            qi = torch.arange(q0 + shift, q1 + shift, device=device)
            kj = torch.arange(k0, k1, device=device)
            # the scale (the layer's, times a region's temperature) on the queries, and every call at scale 1: a
            # second value of a float argument makes it symbolic to the compiled kernel, which inductor's flex lowering
            # refuses (H200, torch 2.11: STRING's t^2 as flex's scale failed to compile)
            q = rotated(query[:, :, q0:q1], r.query(qi), qi).mul_(scaling * r.scale).contiguous()
            k = rotated(key[:, :, k0:k1], r.key(kj), kj).contiguous()
            v = value[:, :, k0:k1].contiguous()
            if bm is None:
                o, l = causal_kernel(device, query.dtype)(q, k, v, 1.0)
            else:
                with warnings.catch_warnings():  # eager flex on the CPU says it is slow: it is the twin, it knows
                    warnings.simplefilter("ignore")
                    o, l = self.flex(q, k, v, score_mod=self.score_mod, block_mask=bm, scale=1.0, enable_gqa=True,
                                     return_lse=True)
            del q, k, v
            if out is None and (q0, q1) == (0, Tq):  # the first region over every row: taken as it is
                out, lse = o.to(value.dtype), l.float()
                continue
            if out is None:
                out = torch.zeros(B, H, Tq, D, dtype=value.dtype, device=device)
                lse = torch.full((B, H, Tq), float("-inf"), dtype=torch.float32, device=device)
            merge_rows(out, lse, q0, o, l.float())
        if sinks is not None:
            total = torch.logaddexp(lse, sinks.float()[None, :, None])
            out = (out.float() * torch.exp(lse - total)[..., None]).to(value.dtype)
        return out


def softcapped(cap: float):
    """Gemma 2's logit soft-capping as a flex score_mod: cap tanh(s / cap)."""
    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / cap) * cap

    return score_mod


def _raise_recompile_limit() -> None:
    """Every region and length go through one compiled function; at dynamo's default limit (8) it would fall back to
    eager flex attention, which materialises the scores."""
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit,
                                                           4 * RECOMPILE_LIMIT)


def causal_kernel(device: torch.device, dtype: torch.dtype):
    """The device's fused causal attention that also returns its log-sum-exp, as `(q, k, v, scale) -> (out (B, H, n, D),
    lse (B, H, n))` with q (B, H, n, D) and k, v (B, H_kv, n, D), or None: FlashAttention-2 on CUDA in fp16/bf16
    (`aten._scaled_dot_product_flash_attention`, key and value heads repeated for GQA), torch's flash kernel on the CPU
    (GQA native). Private ops, hence looked up, not assumed."""
    if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention", None)
        if op is None:
            return None

        def flash(q, k, v, scale):
            if (g := q.shape[1] // k.shape[1]) > 1:
                k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            got = op(q, k, v, 0.0, True, False, scale=scale)
            return got[0], got[1]

        return flash
    op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if device.type != "cpu" or op is None:
        return None
    return lambda q, k, v, scale: op(q, k, v, 0.0, True, scale=scale)[:2]


def merge_rows(out: torch.Tensor, lse: torch.Tensor, q0: int, o: torch.Tensor, l: torch.Tensor) -> None:
    """out[:, :, q0:q0+n] and lse (B, H, T) take in a region's rows o (B, H, n, D) with its log-sum-exp l (B, H, n): the
    softmax over the union of their keys, in float32, MERGE_ROWS rows at a time (rows where neither has a key stay 0)."""
    for s in range(0, o.shape[2], MERGE_ROWS):
        e = min(o.shape[2], s + MERGE_ROWS)
        old, add = lse[:, :, q0 + s:q0 + e], l[:, :, s:e]
        new = torch.logaddexp(old, add)
        keep, take = torch.exp(old - new).nan_to_num_(0.0), torch.exp(add - new).nan_to_num_(0.0)
        rows = out[:, :, q0 + s:q0 + e]
        rows.copy_(rows.float() * keep[..., None] + o[:, :, s:e].float() * take[..., None])
        lse[:, :, q0 + s:q0 + e] = new
