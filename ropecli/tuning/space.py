"""The search space of `ropecli search`: which parameters vary, within what bounds, from where.

Each varied parameter is a `Dim` with bounds (defaults in `default_bounds`, or `--vary NAME=LO:HI`),
mapped to [0, 1] for the optimizer, log-scaled for the YaRN betas and llama3's factors. The start
point is the method's default where it lies inside the bounds; for the clamped mixed family the
critical pair of the geometry (LongRoPE2's critical dimension) is the start of m_c. A model's position temperature
(Llama 4's attn_scale / floor_scale, Mistral 4's beta: `rope.temperature.TUNABLE`) is searched beside any method,
from the model's own values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ropecli.errors import RopeCliError
from ropecli.maps.position_maps import BoundMap
from ropecli.rope.geometry import Geometry, critical_pair
from ropecli.rope.methods import REGISTRY, resolve_method
from ropecli.rope.temperature import SEARCH_BOUNDS, TUNABLE


@dataclass(frozen=True)
class Dim:
    """One searched parameter: bounds, and whether the optimizer sees it on a log scale."""
    name: str
    lo: float
    hi: float
    log: bool = False

    def value(self, u: float) -> float:
        u = min(1.0, max(0.0, u))
        if self.log:
            return math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo)))
        return self.lo + u * (self.hi - self.lo)

    def unit(self, v: float) -> float:
        if self.log:
            return (math.log(v) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (v - self.lo) / (self.hi - self.lo)


_LOGGED = {("yarn", "beta_fast"), ("yarn", "beta_slow"), ("llama3", "low_freq_factor"), ("llama3", "high_freq_factor")}


@dataclass(frozen=True)
class SearchSpace:
    """What a search moves through: `method` with `fixed` parameters and `dims` varied, under log-n and a position map
    (whose parameters may be dims too)."""
    method: str
    dims: tuple[Dim, ...]
    fixed: dict = field(default_factory=dict)
    log_n: bool = False
    position_map: BoundMap | None = None


@dataclass(frozen=True)
class Effort:
    """How a search spends forward passes: `budget` evaluations by `optimizer` (to accuracy `tol`); on `windows`
    searched windows, a point hopeless against the incumbent after half of them stops there (`screen`); with
    `finalists` (advise's raced searches) every point on the first half, the best `finalists` then on all."""
    budget: int
    optimizer: str = "auto"
    tol: float | None = None
    windows: int | None = None
    screen: bool = False
    finalists: int = 0


def default_bounds(method: str, name: str, geom: Geometry, varied: list[str]) -> tuple[float, float, bool]:
    """(lo, hi, log scale) of a parameter when `--vary NAME` gives no bounds."""
    if name in SEARCH_BOUNDS:  # a position temperature's (checked against the model's own when it loads)
        return SEARCH_BOUNDS[name]
    table = {
        ("mixed", "b"): (0.0, 8.0 if "critical" in varied else 1.0, False),
        ("mixed", "critical"): (1.0, float(geom.n_pairs), False),
        ("yarn", "beta_fast"): (2.0, 128.0, True),
        ("yarn", "beta_slow"): (0.125, 8.0, True),
        ("yarn", "attention_factor"): (0.8, 1.6, False),
        ("yarn", "mscale"): (0.0, 2.0, False),
        ("llama3", "low_freq_factor"): (0.25, 8.0, True),
        ("llama3", "high_freq_factor"): (1.0, 64.0, True),
        ("longrope", "attention_factor"): (0.8, 1.6, False),
    }
    if (method, name) not in table:  # a parameter bounded in its registry record searches its whole domain

        own = {p.name: p for p in REGISTRY[method].params}.get(name) if method in REGISTRY else None
        if own is not None and own.lo is not None and own.hi is not None:
            return float(own.lo), float(own.hi), False
        raise RopeCliError(f"{method} parameter '{name}' has no default search range; give one, e.g. --vary {name}=LO:HI")
    return table[(method, name)]


# Any model's geometry at once (d of two million: every critical pair is in range): --vary's names,
# syntax and domains are checked against it before the model loads; its bounds come later from the model's
ANY_GEOMETRY = Geometry(2_000_000, 1e4, 4096, 8.0)


def parse_vary(items: list[str] | None, method: str, geom: Geometry, position_map: BoundMap | None = None) -> list[Dim]:
    """`--vary b`, `--vary critical=4:32` -> Dims, checked against the method's parameters and domain; under a position
    map (`search --map selfextend:G=8,W=64`) its parameters too (`--vary G=2:16`, bounds given)."""
    m = resolve_method(method)
    params = {p.name: p for p in m.params if p.name != "factors"}
    map_params = {p.name: p for p in position_map.record.params} if position_map else {}
    clash = set(params) & set(map_params)
    if clash:
        raise RopeCliError(f"{m.name} and the map {position_map.name} both have a parameter {sorted(clash)[0]}; search one")
    params = {**params, **map_params, **{p.name: p for ps in TUNABLE.values() for p in ps}}  # + a temperature's
    if not items:
        raise RopeCliError(f"nothing to search: pass --vary with a parameter of {m.name} "
                           f"({', '.join(params) or 'it has none'}), e.g. --vary {next(iter(params), 'b')}")
    names = [item.partition("=")[0].strip().replace("-", "_") for item in items]
    dims = []
    for item, name in zip(items, names):
        if name not in params:
            raise RopeCliError(f"--vary {name}: method '{m.name}'{' and the map' if map_params else ''} has no such "
                               f"parameter (it has: {', '.join(params) or 'none'})")
        if names.count(name) > 1:
            raise RopeCliError(f"--vary {name} is given twice; give each parameter once")
        _, sep, rng = item.partition("=")
        if sep:
            try:
                lo_s, hi_s = rng.split(":")
                lo, hi = float(lo_s), float(hi_s)
            except ValueError:
                raise RopeCliError(f"--vary {item}: write bounds as NAME=LO:HI, e.g. --vary {name}=0:4") from None
            log = (m.name, name) in _LOGGED or SEARCH_BOUNDS.get(name, (0, 0, False))[2] or params[name].log
        elif name in map_params:
            raise RopeCliError(f"--vary {name}: give the map's parameter its range, e.g. --vary {name}=2:16")
        else:
            lo, hi, log = default_bounds(m.name, name, geom, names)
        if not lo < hi:
            raise RopeCliError(f"--vary {name}={lo:g}:{hi:g}: the lower bound must be below the upper one")
        p = params[name]
        if (p.lo is not None and lo < p.lo) or (p.hi is not None and hi > p.hi) or (name == "critical" and hi > geom.n_pairs):
            top = geom.n_pairs if name == "critical" else p.hi
            raise RopeCliError(f"--vary {name}={lo:g}:{hi:g} leaves {position_map.name if name in map_params else m.name}'s domain "
                               f"[{'-inf' if p.lo is None else f'{p.lo:g}'}, {'inf' if top is None else f'{top:g}'}]; narrow it")
        if log and lo <= 0:
            raise RopeCliError(f"--vary {name}={lo:g}:{hi:g}: {name} is searched on a log scale; the lower bound must be positive")
        dims.append(Dim(name, lo, hi, log))
    return dims


def start_point(method: str, dims: list[Dim], fixed: dict, geom: Geometry) -> list[float]:
    """In [0, 1]^n: the method's defaults (the clamped mixed family: m_c = the critical pair, b = 1)."""
    m = resolve_method(method)
    defaults = {p.name: p.default for p in m.params} | dict(geom.temperature.params if geom.temperature else ())
    if method == "mixed" and any(d.name == "critical" for d in dims):
        defaults["critical"] = float(critical_pair(geom) or geom.n_pairs)
        defaults["b"] = 1.0
    out = []
    for d in dims:
        v = fixed.get(d.name, defaults.get(d.name))
        usable = isinstance(v, (int, float)) and math.isfinite(v) and (v > 0 or not d.log)
        out.append(min(1.0, max(0.0, d.unit(v))) if usable else 0.5)
    return out
