"""The candidates of `ropecli advise`: the standard methods as they are, the searched families with the plan of each
search, and the position maps the map registry gives a rule (`ropecli.maps.position_maps.register_map(rule=, ranges=)`:
MAP at its source's rule, MAP-tuned searched around it). A map candidate is the model as shipped (`reference_spec`:
native, or none for plain RoPE) under the map at its source's rule for the target (Self-Extend's group rule,
ChunkLlama's defaults), or MAP-tuned with the parameters its `ranges` name searched around the rule; they enter the
default tournament only at targets past the shipped length Ls (within it a map only costs)."""

from __future__ import annotations

from ropecli.maps.position_maps import MAPS, BoundMap, bind, resolve_map
from ropecli.rope.geometry import Geometry
from ropecli.spec import STANDARD_METHODS, Spec, reference_spec

SCHEDULES = ("none", "pi", "ntk-aware", "dynamic", "yarn", "yarn-tuned", "llama3", "ntk-fixed", "mixed-b", "mixed-clamped",
             # a model that ships a schedule (Llama 3.1, Qwen YaRN, Phi-3 …): as shipped, and extended on top of it
             "native", "native+pi", "native+yarn", "native+llama3", "native+ntk-fixed", "native+yarn-tuned")
SHIPPED_ONLY = tuple(c for c in SCHEDULES if c.startswith("native"))  # meaningful only for a model that ships a schedule
TUNED = "-tuned"  # a searched map candidate: MAP-tuned


def map_candidates() -> dict[str, str]:
    """{candidate: its map} for every registered map with a rule (MAP) or search ranges (MAP-tuned), in the registry's
    order: the model as shipped under the map, past Ls only (`map_spec`)."""
    return {**{m.name: m.name for m in MAPS.values() if m.rule},
            **{m.name + TUNED: m.name for m in MAPS.values() if m.ranges}}


def map_names() -> list[str]:
    """The registered position maps (`--map`'s help lists them when drawn)."""
    return list(MAPS)


def candidate_names() -> list[str]:
    """Every candidate --candidates accepts: the schedules, then the maps'."""
    return [*SCHEDULES, *map_candidates()]


def default_candidates(ships_schedule: bool, maps: bool | tuple[str, ...] = False) -> list[str]:
    """Every candidate but the searched maps (asked for by name); the native ones only for a model that ships a
    schedule (else native is none); the position maps at their rules where `maps` (a target past Ls, a model and
    backend that can map it: True for every map, or the names of the maps the backend runs, e.g. llama.cpp's
    Self-Extend alone); a map registered with in_default=False (DPE) only by name."""
    mapped = {c: m for c, m in map_candidates().items() if not c.endswith(TUNED) and MAPS[m].in_default
              and (maps is True or (not isinstance(maps, bool) and m in maps))}
    return [c for c in SCHEDULES if ships_schedule or c not in SHIPPED_ONLY] + list(mapped)


def static_candidates() -> dict[str, tuple[str, dict]]:
    """The standard methods (`ropecli.spec.STANDARD_METHODS`) that are candidates as they are;
    mixed(b=0.625) is not one: the mixed-b search covers its family."""
    plain = {name: (name, params) for name, params in STANDARD_METHODS if name in SCHEDULES}
    composed = {"native+" + name: ("native+" + name, params) for name, params in STANDARD_METHODS
                if "native+" + name in SCHEDULES}
    return {**plain, "native": ("native", {}), **composed}


def search_plans(budget: int, Ls: int | None = None, T: int | None = None) -> dict[str, tuple[str, list[str], int]]:
    """The searched candidates: name -> (method, varied parameters, evaluations), the one plan both the searches and the
    progress bar's total read. A searched map varies what its ranges name, around its rule, on the model as shipped
    (`search_ranges`), within its own budget for a model shipped at Ls and a longest target T where its
    record has one (DPE's detection), else --budget."""
    def map_budget(name: str) -> int:
        own = MAPS[map_candidates()[name]].budget
        return own(Ls, T) if own is not None and Ls and T else max(budget, 7)

    maps = {c: ("native", [], map_budget(c)) for c in map_candidates() if c.endswith(TUNED)}
    return {"yarn-tuned": ("yarn", ["beta_fast", "beta_slow"], max(budget, 7)),
            "mixed-b": ("mixed", ["b"], max(min(budget, 12), 4)),
            "mixed-clamped": ("mixed", ["b", "critical"], max(budget, 7)),
            "native+yarn-tuned": ("native+yarn", ["beta_fast", "beta_slow"], max(budget, 7)), **maps}


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
