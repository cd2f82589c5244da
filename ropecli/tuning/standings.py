"""advise's answer in types, as it crosses from tuning to export: the winner and every eligible candidate by rank, each
holding the Spec the tournament measured (`Standings.of`), not one rebuilt from advice.json's fields. An advice.json read
back (verify, a test) is the one place a spec is rebuilt from JSON (`Standings.from_json`, `row_spec`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ropecli.maps.map_spelling import map_from_json
from ropecli.spec import Spec, make_spec


@dataclass(frozen=True)
class Ranked:
    """One candidate: its name (advise's `--candidates` word, `+log-n` appended when the queries are scaled), the spec
    it was measured as, its rank (None: excluded), and why it stands in for the winner where a runtime cannot serve the
    winner (`instead`)."""
    candidate: str
    spec: Spec
    rank: int | None = None
    instead: str | None = None


@dataclass(frozen=True)
class Standings:
    winner: Ranked
    ranked: tuple[Ranked, ...]  # every eligible candidate by rank (the winner first where it is eligible)

    def get(self, candidate: str) -> Ranked:
        return next(r for r in (self.winner, *self.ranked) if r.candidate == candidate)

    @classmethod
    def of(cls, result: dict, specs: dict[str, Spec]) -> "Standings":
        """From the ranking's rows (`tuning.ranking.rank`) and the specs the tournament measured, by candidate."""
        rows = {r["candidate"]: r for r in result["rows"]}
        eligible = sorted((r for r in result["rows"] if not r["excluded"]), key=lambda r: r.get("rank", math.inf))
        winner = result["winner"]
        return cls(Ranked(winner, specs[winner], rows.get(winner, {}).get("rank")),
                   tuple(Ranked(r["candidate"], specs[r["candidate"]], r.get("rank")) for r in eligible))

    @classmethod
    def from_json(cls, result: dict) -> "Standings":
        """From an advice.json's rows and winner_spec (read back from disk: the specs rebuilt from their fields)."""
        specs = {r["candidate"]: row_spec(r) for r in result["rows"]}
        specs.setdefault(result["winner"], row_spec(result["winner_spec"]))
        return cls.of(result, specs)


def row_spec(r: dict) -> Spec:
    """The spec an advice.json row (or its winner_spec) describes: method (native+ where composed), parameters,
    position temperature, log-n, position map."""
    params = {**{k: v for k, v in r["params"].items() if v is not None and k != "factors"}, **(r.get("temperature") or {})}
    spec = make_spec(("native+" if r.get("composed") else "") + r["method"], params, log_n=r["log_n"])
    return spec.but(position_map=map_from_json(r.get("position_map")))
