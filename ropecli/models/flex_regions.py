"""The GPU path of a position map (issue 58): each region one `flex_attention` call under a `BlockMask` made from the
region's mask, merged with the others by log-sum-exp in float32.

Per (T_q, T_k, device) and region, once and reused by every layer: the region's BlockMask over the whole window gives
the query blocks that reach any key and the key blocks they reach; the region's queries and keys are cut to those
extents and a second BlockMask is made for the cut (fully masked blocks skipped, full blocks run unmasked, no dense
mask anywhere). Per layer and region: its queries and keys rotated once at the region's positions (the rotary module's
own frequencies and scaling), one flex call (GQA native: `enable_gqa`; bf16/fp16 in, the log-sum-exp out), the cut's
rows merged into the running output. On CUDA the call is compiled (`torch.compile(flex_attention)`); on the CPU it runs
eagerly (slow: the twin the tests compare with the fused path and the unpatched model, on tiny shapes)."""

from __future__ import annotations

import warnings

import torch

FLEX_BLOCK = 128  # flex attention's block (rows and columns)


def flex_available() -> bool:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


class FlexRegions:
    """The regions of one map on flex attention; `__call__(query, key, value, scaling, rotated)` -> (B, H, T_q, D)."""

    def __init__(self, regions_for, compiled: bool):
        from torch.nn.attention.flex_attention import flex_attention

        self.regions_for = regions_for
        self.flex = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
        self.compiled = compiled
        self._shape, self._cuts = None, []

    def cuts(self, Tq: int, Tk: int, device) -> list:
        """[(region, q0, q1, k0, k1, BlockMask of the cut)] for T_q queries ending at T_k keys, built once per shape."""
        from torch.nn.attention.flex_attention import create_block_mask

        if self._shape == (Tq, Tk, device):
            return self._cuts
        shift, out = Tk - Tq, []
        for r in self.regions_for(Tk):
            def mask(b, h, q_idx, kv_idx, r=r, q0=0, k0=0):
                i, j = q_idx + q0 + shift, kv_idx + k0
                return r.where(i, j) & (i >= j)

            whole = create_block_mask(mask, None, None, Tq, Tk, device=device, BLOCK_SIZE=FLEX_BLOCK,
                                      _compile=self.compiled)
            extent = block_extent(whole, Tq, Tk)
            if extent is None:  # the region reaches no key from these queries
                continue
            q0, q1, k0, k1 = extent

            def cut(b, h, q_idx, kv_idx, r=r, q0=q0, k0=k0):
                i, j = q_idx + q0 + shift, kv_idx + k0
                return r.where(i, j) & (i >= j)

            bm = create_block_mask(cut, None, None, q1 - q0, k1 - k0, device=device, BLOCK_SIZE=FLEX_BLOCK,
                                   _compile=self.compiled)
            out.append((r, q0, q1, k0, k1, bm))
        self._shape, self._cuts = (Tq, Tk, device), out
        return out

    def __call__(self, query, key, value, scaling: float, rotated) -> torch.Tensor:
        B, H, Tq, D = query.shape
        Tk = key.shape[2]
        device, shift = query.device, Tk - Tq
        acc = torch.zeros(B, H, Tq, D, dtype=torch.float32, device=device)
        lse = torch.full((B, H, Tq), float("-inf"), dtype=torch.float32, device=device)
        for r, q0, q1, k0, k1, bm in self.cuts(Tq, Tk, device):
            qi = torch.arange(q0 + shift, q1 + shift, device=device)
            kj = torch.arange(k0, k1, device=device)
            q = rotated(query[:, :, q0:q1], r.query(qi)).contiguous()
            k = rotated(key[:, :, k0:k1], r.key(kj)).contiguous()
            with warnings.catch_warnings():  # eager flex on the CPU says it is slow: it is the twin, it knows
                warnings.simplefilter("ignore")
                o, l = self.flex(q, k, value[:, :, k0:k1].contiguous(), block_mask=bm, scale=scaling * r.scale,
                                 enable_gqa=True, return_lse=True)
            o, l = o.float(), l.float()
            new = torch.logaddexp(lse[:, :, q0:q1], l)
            keep, take = torch.exp(lse[:, :, q0:q1] - new).nan_to_num_(0.0), torch.exp(l - new).nan_to_num_(0.0)
            acc[:, :, q0:q1] = acc[:, :, q0:q1] * keep[..., None] + o * take[..., None]
            lse[:, :, q0:q1] = new
        return acc.to(value.dtype)


def block_extent(bm, Tq: int, Tk: int) -> tuple[int, int, int, int] | None:
    """(q0, q1, k0, k1): the rows of the query blocks that reach any key and the columns of the key blocks they reach,
    from a BlockMask's block counts and indices (batch and head broadcast: index 0); None when no block is reached."""
    counts = bm.kv_num_blocks[0, 0] + (bm.full_kv_num_blocks[0, 0] if bm.full_kv_num_blocks is not None else 0)
    rows = counts.nonzero().flatten()
    if not len(rows):
        return None
    cols = []
    for num, idx in ((bm.kv_num_blocks, bm.kv_indices), (bm.full_kv_num_blocks, bm.full_kv_indices)):
        if num is None:
            continue
        n, ix = num[0, 0], idx[0, 0]
        valid = torch.arange(ix.shape[-1], device=ix.device)[None, :] < n[:, None]
        cols.append(ix[valid])
    cols = torch.cat(cols)
    bq, bk = bm.BLOCK_SIZE
    return (int(rows[0]) * bq, min(Tq, (int(rows[-1]) + 1) * bq), int(cols.min()) * bk, min(Tk, (int(cols.max()) + 1) * bk))
