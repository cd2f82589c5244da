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


CANDIDATES = tuple(c.value for c in Candidate)


def static_candidates() -> dict[str, tuple[str, dict]]:
    """The standard methods (`ropecli.rope.spec.STANDARD_METHODS`) that are candidates as they are;
    mixed(b=0.625) is not one: the mixed-b search covers its family."""
    from ropecli.rope.spec import STANDARD_METHODS

    return {name: (name, params) for name, params in STANDARD_METHODS if name in CANDIDATES}


def search_plans(budget: int) -> dict[str, tuple[str, list[str], int]]:
    """The searched candidates: name -> (method, varied parameters, evaluations), the one plan both the
    searches and the progress bar's total read."""
    return {"yarn-tuned": ("yarn", ["beta_fast", "beta_slow"], max(budget, 7)),
            "mixed-b": ("mixed", ["b"], max(min(budget, 12), 4)),
            "mixed-clamped": ("mixed", ["b", "critical"], max(budget, 7))}
