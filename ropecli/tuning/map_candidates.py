"""The position-map candidates of `ropecli advise` (issue 48): the model as shipped (`reference_spec`: native, or none for
plain RoPE) under a map whose parameters follow its source's rule for the target, and Self-Extend with G and W
searched. They enter the default tournament only at targets past the shipped length Ls (within it a map only costs).

    selfextend        W = Ls/4 rounded down to a multiple of G (llama.cpp's -gaw must be one), G the smallest group
                      with floor((T - 1)/G) + W - floor(W/G) <= Ls - 1: the farthest pair's rotation distance within
                      the trained range (Jin et al. 2024, section 3: "the group size G ... such that the maximum
                      relative position after grouping does not exceed the pretraining context window")
    selfextend-tuned  G and W searched (G in [2, 4 G_rule], W in [Ls/16, Ls/2]), started at the rule
    dca               chunk = 3 Ls/4, local = Ls/16 (HKUNLP/ChunkLlama's defaults): every rotation distance below chunk
"""

from __future__ import annotations

from ropecli.errors import RopeCliError
from ropecli.rope.geometry import Geometry
from ropecli.rope.position_maps import bind
from ropecli.rope.spec import Spec, reference_spec

RULED = ("selfextend", "dca")
SEARCHED = {"selfextend-tuned": "selfextend"}
MAP_CANDIDATES = (*RULED, *SEARCHED)


def maps_apply(model, rope, longest: int) -> bool | tuple[str, ...]:
    """Which map candidates the default tournament takes: none (False) short of a target past Ls, a backend that maps
    and a model it can map (one RoPE, every dimension rotated; `models.mapped_attention` refuses the rest in one line);
    else the backend's `maps`: True (transformers: every map) or the names it runs (llama.cpp: Self-Extend)."""
    ok = (longest > rope.shipped_len and rope.partial_rotary_factor == 1
          and not rope.layer_bases and rope.layers is None)  # NoPE, chunked, sliding, linear layers: not mapped
    return getattr(model, "maps", False) if ok else False


def selfextend_rule(Ls: int, T: int) -> dict[str, float]:
    for G in range(2, T + 1):
        W = max(G, (Ls // 4) // G * G)
        if (T - 1) // G + W - W // G <= Ls - 1:
            return {"G": G, "W": W}
    raise RopeCliError(f"selfextend: no group size keeps a {T}-token window within Ls = {Ls}")


def map_rule(name: str, Ls: int, T: int) -> tuple:
    """The candidate's position map for a longest target T on a model shipped at Ls: (map, ((param, value), ...))."""
    base = SEARCHED.get(name, name)
    params = selfextend_rule(Ls, T) if base == "selfextend" else {"chunk": 3 * Ls // 4, "local": max(1, Ls // 16)}
    return bind(base, params)


def map_spec(name: str, geom: Geometry, T: int, factor: float, log_n: bool = False) -> Spec:
    """The model as shipped (at the tournament's factor: a plain-RoPE model's `none` ignores it) under the rule's map."""
    return reference_spec(geom).but(factor=factor, log_n=log_n, position_map=map_rule(name, geom.shipped_len, T))


def search_ranges(name: str, Ls: int, T: int) -> list[str]:
    """`--vary` items of a searched map candidate, around its rule."""
    G = int(dict(map_rule(name, Ls, T)[1])["G"])
    return [f"G=2:{max(4, 4 * G)}", f"W={max(1, Ls // 16)}:{Ls // 2}"]
