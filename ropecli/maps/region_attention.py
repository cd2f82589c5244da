"""One region's attention (`ropecli.maps.map_run` calls it per region and block): its turned queries against the band
of keys it reaches under its mask, in one fused call (torch's CPU flash kernel, which returns the log-sum-exp; explicit
scores elsewhere, and where the model soft-caps its logits), so that the regions merge exactly by log-sum-exp
(`map_bands.merge_into`): memory per layer is the block's (block, band) masks, never a T x T matrix per head for the
whole window. On CUDA a prefill's regions run in flex attention instead (`maps.flex_regions`).
"""

from __future__ import annotations

from ropecli.deferred import deferred

torch = deferred("torch")

MASK_CACHE_BYTES = 256 * 2 ** 20  # one shape's masks, kept across the layers of a forward (bool: a byte a pair)


def region_attention(q, k, v, mask, scaling: float, fused=None, bias=None, has=None, softcap=None):
    """One region's attention: q (B, H, n, D) against keys k, v (B, H, m, D) under mask (n, m) (None: every pair;
    CAUSAL: the causal square) -> out (B, H, n, D) float32 and log-sum-exp (B, H, n), -inf (and out 0) on rows where
    the region has no key. `bias` (the mask as 0 / -inf in q's dtype) and `has` (rows with a key; None: every row) are
    the mask's, made once per shape (`map_bands.masked`). `softcap`: the scores capped as the model caps them
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
