"""Queries and keys rotated at a position map's positions (`maps.region_attention` and `maps.flex_regions` call
it per region): by the rotary module's own forward, at positions shared by every pair or per group of pairs (a per-pair
map, DPE), and under a key-pair selection only the selected columns at the map's positions, the rest at true ones.
"""

from __future__ import annotations

from ropecli.deferred import deferred
from ropecli.maps.map_layers import rotate_with

torch = deferred("torch")


def rotated(x: torch.Tensor, positions: torch.Tensor, rotary, cache: dict | None = None, key=None,
            module=None, true: torch.Tensor | None = None, columns: torch.Tensor | None = None) -> torch.Tensor:
    """x (B, H, T, D) rotated at `positions` (T,) by the rotary module's own forward (its frequencies and scaling; a
    partial rotary in the model's own layout, `map_layers.rotate_with`); its cos and sin kept in `cache` under `key`
    for the next layers of the same forward pass. With `columns` (1, H, 1, D) bool (a key-pair selection,
    `MappedAttention.columns`): only those columns at `positions`, the others at the `true` ones (T,) (a pair's
    rotated columns depend on its own angle alone, so the two rotations merge column by column, exactly)."""
    got = cache.get(key) if cache is not None else None
    if got is None:
        got = trig_at(x, positions, rotary)
        if cache is not None:
            cache[key] = got
    out = rotate_with(module, x, *got)
    if columns is None:
        return out
    keep = rotated(x, true, rotary, cache, ("true", key), module)  # merged in place: no third tensor of x's size
    return keep.mul_(~columns).add_(out.mul_(columns))


def trig_at(x, positions: torch.Tensor, rotary) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (1, T, rotary dims) from the rotary module at positions (T,), or at positions (T, groups) that differ
    per group of rotary pairs (a per-pair map: group g the pairs m with floor(m groups / pairs) = g): each group's
    columns from the module's own output at that group's positions, in the module's layout (`pair_groups`)."""
    if positions.ndim == 1:
        return rotary(x, positions.to(torch.float32)[None, :])
    per = [rotary(x, positions[:, g].to(torch.float32)[None, :]) for g in range(positions.shape[1])]
    cols = pair_groups(rotary, x, positions.shape[1])
    cos, sin = per[0][0].clone(), per[0][1].clone()
    for g in range(1, len(per)):
        cos[..., cols == g], sin[..., cols == g] = per[g][0][..., cols == g], per[g][1][..., cols == g]
    return cos, sin


def pair_groups(rotary, x, groups: int) -> torch.Tensor:
    """(rotary dims,) the group of each column of the module's cos and sin: rotate-half (the pairs' angles twice,
    [θ_0 … θ_{P-1}, θ_0 … θ_{P-1}]) or interleaved ([θ_0, θ_0, θ_1, θ_1, …]), read off the module's cos at position 1."""
    c = rotary(x, torch.ones(1, 1, device=x.device))[0][0, 0]
    D = c.shape[-1]
    P = D // 2
    if torch.equal(c[:P], c[P:]):
        pair = torch.arange(D, device=x.device) % P
    elif torch.equal(c[0::2], c[1::2]):
        pair = torch.arange(D, device=x.device) // 2
    else:
        raise ValueError("a per-pair map needs the rotary module's cos in rotate-half or interleaved layout")
    return pair * groups // P
