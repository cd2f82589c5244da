"""What gets computed: a method with its resolved parameters (`Spec`), the one rule for the factor k
at a length, and the one list of standard methods. Numpy only.

- `make_spec(name, params)`: defaults filled by `methods.resolve_params` (the one place that fills
  them), so labels and cache keys say exactly what ran.
- k: a Spec may fix it (`factor`); otherwise a window of n tokens runs at k = max(1, n / L)
  (`Spec.factor_at`), and a schedule meant for several target lengths runs at the longest one's k
  (`target_factor`): the deployed config serves every length with one k.
- A method whose schedule depends on the current sequence length (dynamic NTK) says so in the
  registry (`Method.current_length`); `Spec.schedule(geom, length)` fills it in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from ropecli.rope.geometry import Geometry, default_factor
from ropecli.rope.methods import REGISTRY, Schedule, compute_schedule, format_label, resolve_params

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

    @property
    def label(self) -> str:
        """`mixed(b=0.625)`, `+log-n` appended when the queries are scaled: the one label of a Spec."""
        return format_label(self.method, dict(self.params)) + ("+log-n" if self.log_n else "")

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
        return compute_schedule(self.method, geom, **params)

    def but(self, **changes: Any) -> "Spec":
        """The same Spec with some fields changed (e.g. `spec.but(factor=8.0)`)."""
        return replace(self, **changes)


def make_spec(name: str, params: dict[str, Any] | None = None, *, factor: float | None = None, log_n: bool = False) -> Spec:
    method, resolved = resolve_params(name, params or {})
    if resolved.get("factors") is not None:
        resolved["factors"] = tuple(float(x) for x in resolved["factors"])
    return Spec(method.name, tuple(resolved.items()), factor, log_n)


def target_factor(k: float | None, lengths: Sequence[int], train_len: int) -> float:
    """The one target-k rule: the given k, else the longest target length over L (never below 1)."""
    return k if k is not None else default_factor(max(lengths), train_len)


def standard_specs(*, factor: float | None = None, log_n: bool = False) -> list[Spec]:
    """STANDARD_METHODS as Specs."""
    return [make_spec(name, params, factor=factor, log_n=log_n) for name, params in STANDARD_METHODS]
