"""The candidates of `ropecli advise`: the standard methods as they are, and the searched families
with the plan of each search. Imported by the CLI at start-up for its choices, so it stays light."""

from __future__ import annotations

from enum import Enum


class Candidate(str, Enum):
    none = "none"
    pi = "pi"
    ntk_aware = "ntk-aware"
    dynamic = "dynamic"
    yarn = "yarn"
    yarn_tuned = "yarn-tuned"
    llama3 = "llama3"
    ntk_fixed = "ntk-fixed"
    mixed_b = "mixed-b"
    mixed_clamped = "mixed-clamped"
    # a model that ships a schedule (Llama 3.1, Qwen YaRN, Phi-3 …): as shipped, and extended on top of it
    native = "native"
    native_pi = "native+pi"
    native_yarn = "native+yarn"
    native_llama3 = "native+llama3"
    native_ntk_fixed = "native+ntk-fixed"
    native_yarn_tuned = "native+yarn-tuned"
    # the model as shipped under a position map at the attention (`ropecli.tuning.map_candidates`): past Ls only
    selfextend = "selfextend"
    selfextend_tuned = "selfextend-tuned"
    dca = "dca"


CANDIDATES = tuple(c.value for c in Candidate)
SHIPPED_ONLY = tuple(c for c in CANDIDATES if c.startswith("native"))  # meaningful only for a model that ships a schedule
MAPPED = ("selfextend", "selfextend-tuned", "dca")  # position maps: need a target past Ls and a model they can map
SEARCHED_MAPS = ("selfextend-tuned",)  # asked for by name (--candidates): a search of mapped passes


MAP_OF = {"selfextend": "selfextend", "selfextend-tuned": "selfextend", "dca": "dca"}  # candidate -> its map


def default_candidates(ships_schedule: bool, maps: bool | tuple[str, ...] = False) -> list[str]:
    """Every candidate; the native ones only for a model that ships a schedule (else native is none); the position maps
    with their rules' parameters where `maps` (a target past Ls, a model and backend that can map it: True for every
    map, or the names of the maps the backend runs, e.g. llama.cpp's Self-Extend alone)."""
    def mapped_ok(c: str) -> bool:
        return maps is True or (not isinstance(maps, bool) and MAP_OF[c] in maps)

    return [c for c in CANDIDATES if (ships_schedule or c not in SHIPPED_ONLY) and c not in SEARCHED_MAPS
            and (c not in MAPPED or mapped_ok(c))]


def static_candidates() -> dict[str, tuple[str, dict]]:
    """The standard methods (`ropecli.rope.spec.STANDARD_METHODS`) that are candidates as they are;
    mixed(b=0.625) is not one: the mixed-b search covers its family."""
    from ropecli.rope.spec import STANDARD_METHODS

    plain = {name: (name, params) for name, params in STANDARD_METHODS if name in CANDIDATES}
    composed = {"native+" + name: ("native+" + name, params) for name, params in STANDARD_METHODS
                if "native+" + name in CANDIDATES}
    return {**plain, "native": ("native", {}), **composed}


def search_plans(budget: int) -> dict[str, tuple[str, list[str], int]]:
    """The searched candidates: name -> (method, varied parameters, evaluations), the one plan both the
    searches and the progress bar's total read."""
    return {"yarn-tuned": ("yarn", ["beta_fast", "beta_slow"], max(budget, 7)),
            "mixed-b": ("mixed", ["b"], max(min(budget, 12), 4)),
            "mixed-clamped": ("mixed", ["b", "critical"], max(budget, 7)),
            "native+yarn-tuned": ("native+yarn", ["beta_fast", "beta_slow"], max(budget, 7)),
            "selfextend-tuned": ("native", ["G", "W"], max(budget, 7))}  # ranges: `map_candidates.search_ranges`
