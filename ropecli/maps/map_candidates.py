"""The position-map candidates of `ropecli advise` (issue 48): the model as shipped (`reference_spec`: native, or none for
plain RoPE) under a map whose parameters follow its source's rule for the target (the map registry's `rule`: Self-Extend's
group rule, ChunkLlama's defaults), and MAP-tuned with the parameters its `ranges` name searched around the rule. They
enter the default tournament only at targets past the shipped length Ls (within it a map only costs)."""

from __future__ import annotations

from ropecli.rope.geometry import Geometry
from ropecli.maps.position_maps import BoundMap, bind, resolve_map
from ropecli.rope.spec import Spec, reference_spec
from ropecli.tuning.candidates import map_candidates


def maps_apply(model, rope, longest: int) -> bool | tuple[str, ...]:
    """Which map candidates the default tournament takes: none (False) short of a target past Ls, or a model the
    backend cannot map (its `map_refusal`: transformers, no layer that attends globally with RoPE, `maps.map_layers`;
    llama.cpp, not one RoPE on every layer with every dimension rotated; a backend that maps nothing); else the
    backend's `maps`: True (transformers: every map) or the names it runs (llama.cpp: Self-Extend). `model`: a
    `ModelBackend` (None: a session that loaded none, no map)."""
    if longest <= rope.shipped_len or model is None or model.map_refusal() is not None:
        return False
    return model.maps


def map_rule(candidate: str, Ls: int, T: int) -> BoundMap:
    """The candidate's position map for a longest target T on a model shipped at Ls, at its source's rule."""
    pmap = resolve_map(map_candidates()[candidate])
    return bind(pmap.name, pmap.rule(Ls, T))


def map_spec(candidate: str, geom: Geometry, T: int, factor: float, log_n: bool = False) -> Spec:
    """The model as shipped (at the tournament's factor: a plain-RoPE model's `none` ignores it) under the rule's map."""
    return reference_spec(geom).but(factor=factor, log_n=log_n, position_map=map_rule(candidate, geom.shipped_len, T))


def search_ranges(candidate: str, Ls: int, T: int) -> list[str]:
    """`--vary` items of a searched map candidate (MAP-tuned), from its map's ranges around the rule."""
    ranges = resolve_map(map_candidates()[candidate]).ranges(Ls, T)
    return [f"{p}={lo:g}:{hi:g}" for p, (lo, hi) in ranges.items()]
