"""How a position map's region becomes kernel calls on the CPU path (`ropecli.maps.region_attention`): from the
region's mask over a block of queries, the parts the fused kernel runs — full columns with no mask, the causal diagonal
under the kernel's own causal skip, the rest under a bias — halved by rows where most of a band is masked
(`split_band`); the regions that are one shifted causal triangle over the whole window, run in one call
(`whole_triangles`); the regions that are one diagonal band over it or one chunk-diagonal (DCA's intra- and successive-chunk ones), in one
batched call (`whole_bands`, `whole_chunks`); and the
log-sum-exp merge of the parts (`merge_into`). Tested to partition every region's pairs
exactly (tests/test_position_maps.py)."""

from __future__ import annotations

from ropecli.deferred import deferred

torch = deferred("torch")


CAUSAL = "causal"  # a band whose mask is the causal square (key c reached by rows r >= c): the kernel's own is_causal


def merge_into(acc: torch.Tensor, lse: torch.Tensor, r0: int, r1: int, o: torch.Tensor, l: torch.Tensor) -> None:
    """Rows [r0, r1) of the running output `acc` (B, H, n, D) and its log-sum-exp `lse` (B, H, n), in place, with one
    more band's (o, l): the softmax over the union of their keys."""
    both = torch.logaddexp(lse[:, :, r0:r1], l)
    acc[:, :, r0:r1].mul_(torch.exp(lse[:, :, r0:r1] - both).nan_to_num_(0.0)[..., None]).add_(
        o.mul_(torch.exp(l - both).nan_to_num_(0.0)[..., None]))
    lse[:, :, r0:r1] = both


def whole_triangles(shape: torch.Tensor, Tq: int, Tk: int) -> dict[int, tuple[int, int]]:
    """The regions whose pairs are one shifted causal triangle — every query row i from the first one it reaches on
    takes exactly the keys 0 … i - s (the identity map's only region; Self-Extend's, ReRoPE's and STRING's far one):
    {region: (first row, s)}, run as one causal call over those rows and the first T_k - s keys. `shape` (3, regions,
    T_q): per row the keys reached, the first and the last."""
    out = {}
    rows = torch.arange(Tk - Tq, Tk)
    for n in range(shape.shape[1]):
        count, first, last = shape[:, n]
        reached = (count > 0).nonzero()
        if not len(reached):
            continue
        r0 = int(reached[0])
        s = int(rows[r0] - last[r0])
        if (count[r0:] > 0).all() and (first[r0:] == 0).all() and (count[r0:] == last[r0:] + 1).all() \
                and (rows[r0:] - last[r0:] == s).all() and int(last[r0]) == 0 and Tk - s == Tq - r0:
            out[n] = (r0, s)
    return out


def whole_bands(shape: torch.Tensor, first: torch.Tensor, Tq: int, Tk: int, done=()) -> dict[int, int]:
    """The regions whose pairs are one diagonal band over the whole window — every query row i takes the w keys up to
    its own, i - w + 1 … i (fewer at the start), w at most half the rows (Self-Extend's neighbours): {region: w}, run as
    one batched call (`region_attention.band_attention`). `shape` as `whole_triangles` reads it, `first` (regions, T_q)
    each row's first key reached; regions in `done` (whole triangles) skipped."""
    out = {}
    rows = torch.arange(Tk - Tq, Tk)
    for n in range(shape.shape[1]):
        count, _, last = shape[:, n]
        if n in done or not bool((count > 0).all()):
            continue
        w = int(count.max())
        if 2 * w <= Tq and bool((last == rows).all()) and bool((first[n] == last - count + 1).all()) \
                and bool((count == torch.clamp(rows + 1, max=w)).all()):
            out[n] = w
    return out


def whole_chunks(shape: torch.Tensor, first: torch.Tensor, Tq: int, Tk: int, period: int | None, done=()) -> dict:
    """The regions whose pairs are, for a whole prompt (T_q = T_k) cut in chunks of `period` rows, each chunk's
    queries against one chunk of keys d chunks before — d = 0: its own keys up to the query (the causal square),
    d = 1: the whole chunk before (DCA's intra-chunk and successive-chunk regions): {region: d}, run as one batched
    call over the chunks (`region_attention.chunk_attention`). `shape` and `first` as `whole_bands` reads them."""
    out = {}
    if not period or Tq != Tk or Tq <= period:
        return out
    p = torch.arange(Tq)
    own = p // period * period  # each row's chunk's first key
    for n in range(shape.shape[1]):
        if n in done:
            continue
        count, _, last = shape[:, n]
        if bool((first[n] == own).all()) and bool((last == p).all()) and bool((count == p - own + 1).all()):
            out[n] = 0
            continue
        later = p >= period
        if bool((count[~later] == 0).all()) and bool((count[later] == period).all()) \
                and bool((first[n][later] == own[later] - period).all()) and bool((last[later] == own[later] - 1).all()):
            out[n] = 1
    return out


MIN_ROWS = 128  # a sparse band is halved by rows down to this many queries (fewer: more calls than pairs saved)


def split_band(mask: torch.Tensor) -> list[tuple[int, int, int, int, torch.Tensor | str | None]]:
    """A region's pairs from a block of queries (mask (rows, T_k)) as [(r0, r1, lo, hi, part)]: rows [r0, r1) against
    keys [lo, hi), part None (every pair: no mask), CAUSAL (the causal square: the kernel skips its upper half) or the
    bool mask of the pairs. Where more than half of the pairs a part would compute are masked (a window narrower than
    the block), the rows are halved and each half split again: the kernel computes about the pairs the map keeps."""
    rows = mask.any(dim=1).nonzero()
    if not len(rows):
        return []
    r0, r1 = int(rows[0]), int(rows[-1]) + 1
    parts = [(r0 + a, r0 + b, lo, hi, part) for a, b, lo, hi, part in _columns(mask[r0:r1])]
    computed = sum((b - a) * (hi - lo) / (2 if isinstance(p, str) else 1) for a, b, lo, hi, p in parts)
    if r1 - r0 > MIN_ROWS and computed > 2 * int(mask.sum()):
        h = r0 + (r1 - r0) // 2
        top = [(a, b, lo, hi, p) for a, b, lo, hi, p in split_band(mask[:h])]
        return top + [(a + h, b + h, lo, hi, p) for a, b, lo, hi, p in split_band(mask[h:])]
    return parts


def _columns(mask: torch.Tensor) -> list[tuple[int, int, int, int, torch.Tensor | str | None]]:
    """Every row of `mask` reaches a key: its band of keys [lo, hi) in up to four parts — leading columns not reached by
    every row (a window's edge), full columns (no mask), trailing partial ones, and the causal square on the diagonal
    (its rows the last ones whose last key moves with them: a shifted triangle such as Self-Extend's grouped region
    loses its first rows to it)."""
    n = mask.shape[0]
    reach = mask.any(dim=0).nonzero()
    lo, hi = int(reach[0]), int(reach[-1]) + 1
    last = torch.where(mask, torch.arange(mask.shape[1], device=mask.device), -1).amax(dim=1)  # (n,)
    steady = (last - torch.arange(n, device=mask.device)) == hi - n
    m = int(steady.flip(0).logical_not().nonzero()[0]) if not bool(steady.all()) else n  # the trailing rows in step
    m = min(m, hi - lo)
    if m and torch.equal(mask[n - m:, hi - m:hi], torch.ones(m, m, dtype=torch.bool, device=mask.device).tril_()) \
            and not mask[:n - m, hi - m:hi].any():
        left = mask[:, :hi - m]
        return [*(_plain(left) if left.any() else []), (n - m, n, hi - m, hi, CAUSAL)]
    return _plain(mask)


def _plain(mask: torch.Tensor) -> list[tuple[int, int, int, int, torch.Tensor | None]]:
    """Leading partial, full and trailing partial columns of `mask`'s band, each on the rows that reach it."""
    reach = mask.any(dim=0).nonzero()
    lo, hi = int(reach[0]), int(reach[-1]) + 1
    full = mask[:, lo:hi].all(dim=0).nonzero()
    if not len(full):
        spans = [(lo, hi, False)]
    else:
        a, b = lo + int(full[0]), lo + int(full[-1]) + 1
        if not mask[:, a:b].all():  # full columns with a gap between them: one masked band (rare)
            spans = [(lo, hi, False)]
        else:
            spans = [(lo, a, False), (a, b, True), (b, hi, False)]
    out = []
    for c0, c1, full_cols in spans:
        if c1 <= c0:
            continue
        if full_cols:
            out.append((0, mask.shape[0], c0, c1, None))
            continue
        rows = mask[:, c0:c1].any(dim=1).nonzero()
        r0, r1 = int(rows[0]), int(rows[-1]) + 1
        out.append((r0, r1, c0, c1, mask[r0:r1, c0:c1].clone()))
    return out


def masked(mask, dtype) -> tuple:
    """(mask, its bias in `dtype` (0 where reached, -inf elsewhere), its rows with a key or None where every row has
    one): what `region_attention` takes, made once per shape."""
    if mask is None or isinstance(mask, str):
        return mask, None, None
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    has = mask.any(-1)
    return mask, bias, None if bool(has.all()) else has
