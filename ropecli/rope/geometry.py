"""RoPE geometry of one attention head: inverse frequencies, wavelengths, turns.

Convention (docs/methods.md, "The math in one paragraph"; formulas per method in `methods.py`): pairs are m = 1 … d/2, the original inverse frequency of pair m is
theta_m = base^(-2(m-1)/d) and every static scaling method divides it by a per-pair factor
Lambda_m >= 1. transformers indexes the same pairs from 0 (i = m - 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropecli.errors import RopeCliError


TWO_PI = 2.0 * math.pi


@dataclass(frozen=True)
class Geometry:
    rotary_dim: int  # d: rotary dimension of one head (head_dim * partial_rotary_factor); d/2 frequency pairs
    base: float  # rope_theta; beta = base^(2/d)
    train_len: int  # L: the context the model was trained at
    factor: float  # k: extension factor (target length / L unless given)
    shipped: Any = field(default=None, compare=False)  # a rope.shipped.Shipped: the schedule the model ships (L = its L0), if any (untyped here: shipped imports geometry)
    rotating_pairs: int | None = None  # p-RoPE (Gemma 4's 'proportional'): pairs 1..R rotate, R+1..d/2 sit at frequency 0; None: all
    temperature: Any = field(default=None, compare=False)  # a rope.temperature.Temperature the model ships (shown and plotted)

    def __post_init__(self) -> None:
        validate_geometry(self.rotary_dim, self.base, self.train_len, self.factor)
        if self.rotating_pairs is not None and not 0 < self.rotating_pairs <= self.rotary_dim // 2:
            raise RopeCliError(f"{self.rotating_pairs} rotating pairs of d/2={self.rotary_dim // 2}: p-RoPE rotates at least one pair")

    @property
    def shipped_len(self) -> int:
        """Ls: the length the model is shipped for (L for a model that ships plain RoPE): costs within it are
        measured there, against `native`."""
        return self.shipped.shipped_len if self.shipped is not None else self.train_len

    @property
    def n_pairs(self) -> int:
        return self.rotary_dim // 2

    @property
    def beta(self) -> float:
        return self.base ** (2.0 / self.rotary_dim)

    @property
    def target_len(self) -> int:
        return int(round(self.factor * self.train_len))

    def pair_index(self) -> np.ndarray:
        """m = 1 … d/2, shape (d/2,)."""
        return np.arange(1, self.n_pairs + 1, dtype=np.float64)

    @property
    def zero_pairs(self) -> slice:
        """The pairs at frequency 0 (p-RoPE's tail; an empty slice for plain RoPE), 0-based."""
        return slice(self.rotating_pairs if self.rotating_pairs is not None else self.n_pairs, self.n_pairs)

    def inv_freq(self) -> np.ndarray:
        """theta_m = base^(-2(m-1)/d), float64, shape (d/2,); 0 for p-RoPE's pairs past R (the exponent stays over d:
        transformers' `_compute_proportional_rope_parameters`)."""
        exponent = np.arange(0, self.rotary_dim, 2, dtype=np.float64) / self.rotary_dim
        theta = 1.0 / self.base**exponent
        theta[self.zero_pairs] = 0.0
        return theta


def validate_geometry(rotary_dim: int, base: float, train_len: int, factor: float) -> None:
    if rotary_dim <= 0 or rotary_dim % 2:
        raise RopeCliError(f"rotary dim d={rotary_dim} must be a positive even number (rotary dims come in pairs); pass e.g. --d 128")
    if not base > 1:
        raise RopeCliError(f"base={base} must be greater than 1 (LLaMA uses 10000); pass e.g. --base 10000")
    if train_len <= 0:
        raise RopeCliError(f"training length L={train_len} must be positive; pass e.g. --train-len 4096")
    if not (factor >= 1) or not math.isfinite(factor):
        raise RopeCliError(f"factor k={factor} must be a finite number >= 1 (k = target length / training length); pass e.g. --k 8")


def wavelength(inv_freq: np.ndarray) -> np.ndarray:
    """Tokens per full turn, 2*pi / theta (inf for a pair at frequency 0)."""
    with np.errstate(divide="ignore"):
        return TWO_PI / inv_freq


def default_factor(length: float, train_len: int) -> float:
    """The extension factor a target length asks for: k = length / L, never below 1 (within L nothing is extended)."""
    return max(1.0, length / train_len)


def turns(inv_freq: np.ndarray, length: float) -> np.ndarray:
    """Full turns a pair completes over `length` positions: length * theta / (2*pi)."""
    return length * inv_freq / TWO_PI


def critical_pair(geom: Geometry) -> int | None:
    """First pair m (1-based) that never completes a full turn within L; None if every pair does."""
    theta = geom.inv_freq()
    never = np.nonzero((turns(theta, geom.train_len) < 1.0) & (theta > 0))[0]  # p-RoPE's zero pairs never rotate at all
    return int(never[0]) + 1 if never.size else None
