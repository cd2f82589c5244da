"""Target: what the user extends to, one record made at the command boundary and taken whole by the layers below
(compare, search, search-b, advise, the tournament, the search engine): the lengths to measure (validated here,
once), the factor k as the user gave it, and the model's geometry at the target's k with its shipped schedule.

The one target-k rule (`target_factor`): the given k, else the longest length over L. A spec built with
`factor` None is evaluated at each length's own k (n / L); `geom.factor` is the target's k, what an export writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ropecli.errors import RopeCliError
from ropecli.rope.geometry import Geometry, default_factor

DEFAULT_EXTENSION = 8  # the default target of search-b, search, advise and passkey: 8 L


def target_factor(k: float | None, lengths: Sequence[int], train_len: int) -> float:
    """The one target-k rule: the given k, else the longest target length over L (never below 1)."""
    return k if k is not None else default_factor(max(lengths), train_len)


def check_lengths(lengths: Sequence[int]) -> list[int]:
    """--len values, sorted and each once; one line on none or on a length below 2 tokens."""
    if not lengths:
        raise RopeCliError("no --len given; pass e.g. --len 4096")
    bad = [n for n in lengths if n < 2]
    if bad:
        raise RopeCliError(f"--len {bad[0]} is too short; pass lengths of at least 2 tokens")
    return sorted(dict.fromkeys(lengths))


def default_target(train_len: int) -> int:
    """The one default target length of search-b, search, advise and passkey: 8 L."""
    return DEFAULT_EXTENSION * train_len


@dataclass(frozen=True)
class Target:
    lengths: tuple[int, ...]  # the lengths measured: sorted, each once, each >= 2 tokens
    factor: float | None  # k as given (--k); None: each length at its own n / L, the target at the longest / L
    geom: Geometry  # the model's geometry at the target's k (geom.factor), with its shipped schedule

    @classmethod
    def of(cls, rope: Any, lengths: Sequence[int] | None, factor: float | None = None, default: bool = True) -> "Target":
        """The target of a model (`rope`: anything with `train_len` and `geometry(k)`, a models.model_rope.ModelRope);
        no lengths: 8 L where the command has a default (`default`), else one line asking for --len."""
        chosen = tuple(check_lengths(lengths or ([default_target(rope.train_len)] if default else [])))
        return cls(chosen, factor, rope.geometry(target_factor(factor, chosen, rope.train_len)))

    @property
    def longest(self) -> int:
        return self.lengths[-1]

    @property
    def k(self) -> float:
        """The target's k: what an export writes, what the guards and KL measure at L with."""
        return self.geom.factor
