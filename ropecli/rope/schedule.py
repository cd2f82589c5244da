"""What a scaling method is made of and makes (`ropecli.rope.methods`): its declared parameters (`Param`, bounded,
`REQUIRED` or defaulted; a position map's too) and its output (`Schedule`: the per-pair factors Lambda_m, shape (d/2,),
and the attention factor), with the label a table shows (`format_label`). Numpy only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropecli.rope.geometry import Geometry


@dataclass(frozen=True)
class Schedule:
    method: str
    factors: np.ndarray  # Lambda_m, shape (d/2,), float64; theta'_m = theta_m / Lambda_m
    attention_factor: float  # multiplies cos/sin; attention logits scale by its square
    params: dict[str, Any] = field(default_factory=dict)  # the resolved method parameters
    temperature: Any = None  # a changed rope.temperature.Temperature the model runs at (None: its own, untouched)

    @property
    def lambdas(self) -> np.ndarray:
        """Radix multipliers lambda_m = Lambda_m / Lambda_{m-1} (Lambda_0 = 1): pair m has radix beta*lambda_m."""
        return self.factors / np.concatenate(([1.0], self.factors[:-1]))

    def scaled_inv_freq(self, geom: Geometry) -> np.ndarray:
        return geom.inv_freq() / self.factors

    def label(self) -> str:
        return format_label(self.method, self.params)


def format_label(method: str, params: dict[str, Any]) -> str:
    """`mixed(b=0.625)`: the method and its set parameters (explicit factor lists left out)."""
    shown = [(k, v) for k, v in params.items() if k != "factors" and v is not None]
    inner = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown)
    return f"{method}({inner})" if inner else method


REQUIRED = object()  # marks a parameter without a default


@dataclass(frozen=True)
class Param:
    name: str
    default: Any  # REQUIRED, None (optional) or a value
    help: str
    lo: float | None = None  # inclusive bounds, checked before the method runs
    hi: float | None = None
    integer: bool = False  # a count of tokens or positions (a position map's G, W): rounded when searched
    log: bool = False  # searched on a log scale (DPE's group factors: powers of two on an even grid)
    choices: tuple[str, ...] = ()  # named values: the value is its name's index (LaMPE's fit=llama2 is 2)
