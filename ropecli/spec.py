"""What gets computed: a method with its resolved parameters (`Spec`), the one rule for the factor k
at a length, and the one list of standard methods. Numpy only.

- `make_spec(name, params)`: defaults filled by `methods.resolve_params` (the one place that fills
  them), so labels and cache keys say exactly what ran.
- k: a Spec may fix it (`factor`); otherwise a window of n tokens runs at k = max(1, n / L)
  (`Spec.factor_at`), and a schedule meant for several target lengths runs at the longest one's k
  (`rope.target.target_factor`): the deployed config serves every length with one k.
- `parse_specs`: method names (repeated or comma lists), b values, `KEY=VALUE` parameters and a
  factor file, as the flags give them, become Specs; every given parameter must fit a chosen method.
- A method whose schedule depends on the current sequence length (dynamic NTK) says so in the
  registry (`Method.current_length`); `Spec.schedule(geom, length)` fills it in.
- A model that ships a scaled RoPE (`ropecli.rope.shipped`, on `geom.shipped`) is extended past its
  shipped length Ls in two families: *re-derived* (any method, k = N / L0 on the geometry of L0: a plain
  Spec) and *composed* (`native+METHOD`, `Spec.composed`): the shipped schedule at Ls times METHOD at
  k' = N / Ls on the geometry of Ls, Lambda_m = Lambda_shipped,m * Lambda_extra,m, attention factors
  multiplied (every runtime multiplies cos and sin by one attention factor: transformers'
  `attention_scaling`, vLLM's `mscale`, llama.cpp's `attn_factor`). `native` is the model as shipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.maps.map_spelling import map_label
from ropecli.maps.position_maps import BoundMap
from ropecli.rope.factor_files import read_factors
from ropecli.rope.geometry import Geometry, default_factor
from ropecli.rope.methods import REGISTRY, Method, compute_schedule, resolve_method, resolve_params
from ropecli.rope.schedule import Schedule, format_label
from ropecli.rope.temperature import TUNABLE_NAMES, split_temperature, temperature_label, tempered

# The methods people deploy, with transformers' defaults: search-b's references, search's held-out
# verdict and advise's fixed candidates are all taken from this one list.
STANDARD_METHODS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("none", {}), ("pi", {}), ("ntk-aware", {}), ("ntk-fixed", {}), ("dynamic", {}), ("yarn", {}), ("llama3", {}),
    ("mixed", {"b": 0.625}),  # the article's b
)


@dataclass(frozen=True)
class Spec:
    """One thing to compute: a method with its resolved parameters, optionally a fixed factor k, and log-n."""
    method: str
    params: tuple = ()  # (name, value) pairs in the method's order, defaults filled; hashable
    factor: float | None = None  # None: k = max(1, n / L) for a window of n tokens (`factor_at`)
    log_n: bool = False
    composed: bool = False  # native+METHOD: on top of the shipped schedule (k' = N / Ls), not re-derived from L0
    position_map: BoundMap | None = None  # the position map at the attention, checked once where it was bound; None: none
    temperature: tuple = ()  # ((param, value), ...): the model's position temperature changed (rope.temperature); () as shipped

    @property
    def label(self) -> str:
        """`mixed(b=0.625)`, `+log-n` appended when the queries are scaled, `@selfextend(G=8,W=64)` under a position
        map: the one label of a Spec."""
        at = f"@{map_label(self.position_map)}" if self.position_map else ""
        return (COMPOSED_PREFIX if self.composed else "") + format_label(self.method, dict(self.params)) + \
            ("+log-n" if self.log_n else "") + (f"+{temperature_label(self.temperature)}" if self.temperature else "") + at

    @property
    def native(self) -> bool:
        """The model as shipped (no patching)."""
        return self.method == "native"

    @property
    def length_dependent(self) -> bool:
        """True when the schedule follows the current length (dynamic NTK with its length unset)."""
        name = REGISTRY[self.method].current_length
        return name is not None and dict(self.params).get(name) is None

    def factor_at(self, length: int, train_len: int) -> float:
        """The factor k a window of `length` tokens runs at: the Spec's own, else max(1, length / L)."""
        return self.factor if self.factor is not None else default_factor(length, train_len)

    def schedule(self, geom: Geometry, length: int | None = None) -> Schedule:
        """The per-pair factors on `geom`; a length-dependent method runs at `length` (default: geom's target)."""
        params = dict(self.params)
        if self.length_dependent and length is not None:
            params[REGISTRY[self.method].current_length] = float(length)
        if self.composed and geom.shipped is not None:
            schedule = composed_schedule(self.method, params, geom)
        else:
            schedule = compute_schedule(self.method, geom, **params)
        if self.temperature:  # the model's own temperature changed; one line where it ships none
            schedule = replace(schedule, temperature=tempered(geom.temperature, self.temperature))
        return schedule

    def but(self, **changes: Any) -> "Spec":
        """The same Spec with some fields changed (e.g. `spec.but(factor=8.0)`)."""
        return replace(self, **changes)


COMPOSED_PREFIX = "native+"


def composed_schedule(method: str, params: dict[str, Any], geom: Geometry) -> Schedule:
    """The shipped schedule at Ls times `method` at k' = N / Ls on the geometry of Ls (N = geom's target length)."""
    sh = geom.shipped
    N = geom.target_len
    extra_geom = Geometry(geom.rotary_dim, geom.base, sh.shipped_len, max(1.0, N / sh.shipped_len))
    extra = compute_schedule(method, extra_geom, **params)
    base_factors, base_attention = sh.at(geom.rotary_dim, geom.base, sh.shipped_len)
    # the label and cache key name the composition in the method; the shipped schedule is the model's (its fingerprint)
    return Schedule(COMPOSED_PREFIX + method, base_factors * extra.factors, base_attention * extra.attention_factor,
                    dict(extra.params))


def split_composed(name: str) -> tuple[str, bool]:
    """`native+yarn` -> ("yarn", True); anything else -> (name, False)."""
    n = name.strip()
    if n.lower().startswith(COMPOSED_PREFIX):
        rest = n[len(COMPOSED_PREFIX):]
        if resolve_method(rest).name == "native":
            raise RopeCliError("native+native is native; pass --method native")
        return rest, True
    return n, False


def make_spec(name: str, params: dict[str, Any] | None = None, *, factor: float | None = None, log_n: bool = False) -> Spec:
    """The Spec of a method and its parameters; a position temperature's (`attn_scale`, `beta`, …) go to its
    `temperature`, the rest are the method's, checked and completed with its defaults."""
    name, composed = split_composed(name)
    own, temperature = split_temperature(params or {})
    method, resolved = resolve_params(name, own)
    if resolved.get("factors") is not None:
        resolved["factors"] = tuple(float(x) for x in resolved["factors"])
    return Spec(method.name, tuple(resolved.items()), factor, log_n, composed, temperature=temperature)


def reference_spec(geom: Geometry) -> Spec:
    """What a cost within the shipped length is measured against: the model as shipped (`native`), which for
    a model that ships plain RoPE is `none` (kept as `none` there: the arithmetic every cached number used)."""
    return make_spec("native" if geom.shipped is not None else "none")


def standard_specs_for(geom: Geometry, *, factor: float | None = None, log_n: bool = False) -> list[Spec]:
    """The methods people deploy on this model: STANDARD_METHODS, and for a model that ships a schedule
    `native` (the model as shipped) and each method composed on top of it (`native+METHOD`)."""
    specs = standard_specs(factor=factor, log_n=log_n)
    if geom.shipped is None:
        return specs
    composed = [s.but(composed=True) for s in specs if s.method not in ("none", "native")]
    return [make_spec("native", factor=factor, log_n=log_n), *specs, *composed]


def standard_specs(*, factor: float | None = None, log_n: bool = False) -> list[Spec]:
    """STANDARD_METHODS as Specs."""
    return [make_spec(name, params, factor=factor, log_n=log_n) for name, params in STANDARD_METHODS]


def parse_params(pairs: list[str] | None) -> dict[str, float]:
    """`--param KEY=VALUE` (repeatable) as a dict of floats; dashes in keys become underscores."""
    out: dict[str, float] = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise RopeCliError(f"--param '{item}' is not KEY=VALUE; write e.g. --param beta_fast=32")
        try:
            out[key] = float(value)
        except ValueError:
            raise RopeCliError(f"--param {key}: '{value}' is not a number; write e.g. --param {key}=1.5") from None
        if not math.isfinite(out[key]):
            raise RopeCliError(f"--param {key}={value.strip()}: not a finite number; write e.g. --param {key}=1.5")
    return out


def split_methods(methods: list[str] | None, default: str) -> list[str]:
    """Repeated and comma-separated `--method` values as one list; `default` when none is given."""
    names = [n.strip() for item in (methods or [default]) for n in item.split(",") if n.strip()]
    if not names:
        raise RopeCliError(f"no method given; pass e.g. --method {default}")
    return names


def check_params_fit(methods: list[Method], keys: list[str]) -> None:
    """Every given parameter must belong to at least one of the chosen methods."""
    accepted = {p.name for m in methods for p in m.params}
    for key in keys:
        if key not in accepted and key not in TUNABLE_NAMES:  # a position temperature's: every method runs under it
            owners = [m.name for m in REGISTRY.values() if any(p.name == key for p in m.params)]
            hint = f"it belongs to {', '.join(owners)}" if owners else "no method takes it"
            raise RopeCliError(f"parameter '{key}' does not apply: it fits none of the chosen methods "
                               f"({', '.join(m.name for m in methods)}); {hint}")


def parse_specs(methods: list[str] | None, bs: list[float] | None = None, param: list[str] | None = None,
                     factors_file: str | None = None, *, default: str = "mixed", factor: float | None = None,
                     log_n_modes: tuple[bool, ...] = (False,)) -> list[Spec]:
    """One Spec per method, per b for methods that take b, per log-n mode, in that order."""
    params = parse_params(param)
    named = [split_composed(n) for n in split_methods(methods, default)]
    chosen = [resolve_method(n) for n, _ in named]
    check_params_fit(chosen, [*params, *(["b"] if bs else []), *(["factors"] if factors_file else [])])
    factors = None
    if factors_file:
        factors = read_factors(factors_file)
    specs = []
    for method, (_, composed) in zip(chosen, named):
        takes = {p.name for p in method.params}
        kwargs = {k: v for k, v in params.items() if k in takes or k in TUNABLE_NAMES}
        if "factors" in takes:
            kwargs["factors"] = factors
        for b in (bs or [None]) if "b" in takes else [None]:
            for log_n in log_n_modes:
                specs.append(make_spec((COMPOSED_PREFIX if composed else "") + method.name,
                                       {**kwargs, **({"b": b} if b is not None else {})}, factor=factor, log_n=log_n))
    return specs
