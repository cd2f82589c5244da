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


def band_attention(q, k, v, w: int, scaling: float, fused=None, softcap=None, masks: dict | None = None):
    """A region that is one diagonal band over the whole window (Self-Extend's neighbours: each query the w keys up to
    its own): q (B, H, n, D), the queries of key rows T_k - n … T_k - 1, against k, v (B, H_kv, T_k, D) -> out
    (B, H, n, D) float32 and log-sum-exp (B, H, n). The queries in blocks of b = w / 2, each block against the b + w
    keys its band lies in, every block one batch row of one call under one (b, b + w) mask (the window's first keys
    masked where a block starts before key 0): 1.5x the band's pairs, in one call instead of a split of the band per
    block (blocks of w against 2w keys: 2x the pairs, 25 % slower on this CPU). `masks`: where the mask of this shape
    is kept for the pass's other layers."""
    B, H, n, D = q.shape
    Tk, Dv = k.shape[2], v.shape[-1]
    b = max(1, w // 2) if w >= 32 else w
    nb = -(-n // b)
    start = Tk - n - w  # the key row of block 0's first key
    pad_lo, pad_hi = max(0, -start), max(0, start + nb * b + w - Tk)
    qb = (q if nb * b == n else torch.nn.functional.pad(q, (0, 0, 0, nb * b - n)))
    qb = qb.view(B, H, nb, b, D).transpose(1, 2).reshape(B * nb, H, b, D)

    def windows(x):  # (B, H_kv, T_k, d) -> (B * nb, H_kv, b + w, d): block s's keys start + s b … start + s b + b + w - 1
        x = x if not (pad_lo or pad_hi) else torch.nn.functional.pad(x, (0, 0, pad_lo, pad_hi))
        x = x[:, :, start + pad_lo:start + pad_lo + nb * b + w]
        return x.unfold(2, b + w, b).permute(0, 2, 1, 4, 3).reshape(B * nb, x.shape[1], b + w, x.shape[-1])

    kb, vb = windows(k), windows(v)
    tag = ("band", B, nb, b, w, start, Tk, q.dtype, q.device)
    allowed, bias = (masks or {}).get(tag, (None, None))
    if allowed is None:
        a, c = torch.arange(b, device=q.device)[:, None], torch.arange(b + w, device=q.device)[None, :]
        rows = start + torch.arange(nb, device=q.device)[:, None, None] * b + c  # (nb, 1, b + w): each key's row
        allowed = ((c > a) & (c <= a + w))[None] & (rows >= 0) & (rows < Tk)  # (nb, b, b + w)
        allowed = allowed.repeat(B, 1, 1)[:, None]  # (B * nb, 1, b, b + w)
        bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill_(~allowed, float("-inf"))
        if masks is not None:
            masks[tag] = (allowed, bias)
    out, lse = batched_call(qb, kb, vb, scaling, fused, softcap, allowed, bias)
    out = out[..., :Dv].reshape(B, nb, H, b, Dv).transpose(1, 2).reshape(B, H, nb * b, Dv)[:, :, :n]
    return out, lse.reshape(B, nb, H, b).transpose(1, 2).reshape(B, H, nb * b)[:, :, :n]


def chunk_attention(q, k, v, c: int, d: int, scaling: float, fused=None, softcap=None):
    """A region that is chunk-diagonal over a whole prompt (DCA's intra- and successive-chunk regions): q (B, H, n, D)
    against k, v (B, H_kv, n, D) of the same rows, cut in chunks of c rows, each chunk's queries against the keys of
    the chunk d before (d = 0: its own, causal; d = 1: the one before, every pair) -> out (B, H, n, D) float32 and
    log-sum-exp (B, H, n) (-inf, out 0, on rows of the first d chunks). Every chunk one batch row of one call: the
    last chunk padded after its rows (a padded key comes after every real query: the causal square never reaches it;
    a padded query is dropped)."""
    B, H, n, D = q.shape
    Dv = v.shape[-1]
    nc = -(-n // c)

    def chunks(x):  # (B, h, n, d) -> (B, nc, h, c, d)
        x = x if nc * c == n else torch.nn.functional.pad(x, (0, 0, 0, nc * c - n))
        return x.view(B, x.shape[1], nc, c, x.shape[-1]).transpose(1, 2)

    qc, kc, vc = chunks(q)[:, d:], chunks(k)[:, :nc - d], chunks(v)[:, :nc - d]
    m = nc - d
    qc, kc, vc = (x.reshape(B * m, *x.shape[2:]) for x in (qc, kc, vc))
    causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril_() if d == 0 else None
    o, lse = batched_call(qc, kc, vc, scaling, fused, softcap, causal, None, causal=d == 0)
    out = torch.zeros(B, H, nc * c, Dv, dtype=torch.float32, device=q.device)
    l = torch.full((B, H, nc * c), float("-inf"), dtype=torch.float32, device=q.device)
    out[:, :, d * c:] = o[..., :Dv].reshape(B, m, H, c, Dv).transpose(1, 2).reshape(B, H, m * c, Dv)
    l[:, :, d * c:] = lse.reshape(B, m, H, c).transpose(1, 2).reshape(B, H, m * c)
    return out[:, :, :n], l[:, :, :n]


def batched_call(q, k, v, scaling: float, fused, softcap, allowed=None, bias=None, causal: bool = False):
    """q (N, H, n, D) against k, v (N, H_kv, m, D), every batch row its own block (`band_attention`,
    `chunk_attention`) -> out (N, H, n, D) float32, log-sum-exp (N, H, n): the fused kernel under `bias` (the mask
    `allowed` as 0 / -inf) or its own causal skip, else explicit scores under `allowed`."""
    if fused is not None:
        out, lse = fused(q, k, v, 0.0, causal, attn_mask=None if causal else bias, scale=scaling)
        return out.float(), lse.float()
    if q.shape[1] != k.shape[1]:
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)).float().mul_(scaling)
    s = s if not softcap else torch.tanh(s / softcap).mul_(softcap)
    s = s if allowed is None else s.masked_fill_(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.matmul(torch.exp(s - lse[..., None]), v.float()), lse
