"""Position temperatures: query scales that grow with the position, which some models ship beside their frequencies.
Numpy only.

One idea in several spellings (logits scaled by position or length):
- `llama4`  Llama 4's attention temperature tuning on its NoPE layers (`attn_temperature_tuning`):
            s(n) = 1 + attn_scale x log(1 + floor((n + 1) / floor_scale))     (Llama4TextAttention.forward)
- `mistral4` Mistral 4's `llama_4_scaling_beta` on every layer, counted from the rope block's original length L0:
            s(n) = 1 + beta x log(1 + floor(n / L0))                             (get_llama_4_attn_scale)
The seeds' log-n scale, s(n) = max(1, log_L n), is the same idea applied by ropecli itself (`--log-n`, models/patch.py).
n is the 0-based position of the query; s multiplies the query, so it scales every logit of that row. YaRN's attention
factor (and DeepSeek's mscale) is the constant member of the family: a factor on cos and sin, so s^2 on the logits,
carried by the schedule itself (`Schedule.attention_factor`), not here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.rope.schedule import Param

# The parameters a schedule may change (`--param attn_scale=0.2`, `search --vary beta`); the rest stay the model's
# (Mistral 4's original_len is the length its rope block names: moving it would move the frequencies' too)
TUNABLE: dict[str, tuple[Param, ...]] = {
    "llama4": (Param("attn_scale", None, "slope of the NoPE layers' query scale per log(1 + floor((n+1)/floor_scale))", 0.0, 10.0),
               Param("floor_scale", None, "positions per step of the scale (Llama 4 ships its chunk, 8192)", 1.0, 1e9)),
    "mistral4": (Param("beta", None, "slope of every layer's query scale per log(1 + floor(n/L0))", 0.0, 10.0),),
}
TUNABLE_NAMES = frozenset(p.name for ps in TUNABLE.values() for p in ps)
# where transformers 5.24 keeps each one: ("config", key) the text config, copied onto each Llama4TextAttention as the
# same attribute at __init__; ("rope_parameters", key) the rope block, read by Mistral4Attention.forward every call
HF_KEYS = {"attn_scale": ("config", "attn_scale"), "floor_scale": ("config", "floor_scale"),
           "beta": ("rope_parameters", "llama_4_scaling_beta")}
# search's default ranges (lo, hi, log scale) where `--vary NAME` gives none
SEARCH_BOUNDS = {"attn_scale": (0.0, 0.5, False), "floor_scale": (1024.0, 65536.0, True), "beta": (0.0, 1.0, False)}


@dataclass(frozen=True)
class Temperature:
    """A position temperature a model ships: its kind, its parameters, and the layers it scales."""
    kind: str  # llama4 | mistral4
    params: tuple  # (name, value) pairs
    layers: str  # which layers' queries it scales, in words

    @property
    def label(self) -> str:
        inner = ", ".join(f"{k}={v:g}" for k, v in self.params)
        return f"{self.kind}({inner})"

    def scale(self, positions: np.ndarray) -> np.ndarray:
        """s(n) at 0-based query positions n, float64."""
        p = dict(self.params)
        n = np.asarray(positions, dtype=np.float64)
        if self.kind == "llama4":
            return 1.0 + p["attn_scale"] * np.log1p(np.floor((n + 1.0) / p["floor_scale"]))
        if self.kind == "mistral4":
            return 1.0 + p["beta"] * np.log1p(np.floor(n / p["original_len"]))
        raise ValueError(self.kind)

    def but(self, changes: tuple) -> "Temperature":
        """This temperature with some tunable parameters changed (`Spec.temperature`); one line where a name is not
        this kind's or a value leaves its domain."""
        own = {p.name: p for p in TUNABLE[self.kind]}
        params = dict(self.params)
        for name, value in changes:
            if name not in own:
                raise RopeCliError(f"{name} is not a parameter of this model's position temperature {self.label}; its "
                                   f"tunable ones: {', '.join(own)}")
            params[name] = float(value)
        return Temperature(self.kind, tuple(params.items()), self.layers)

    def describe(self, lengths: dict[str, int]) -> str:
        """`llama4(attn_scale=0.1, floor_scale=8192) on the NoPE layers: x1 at L0=8192, x1.11 at 16384`."""
        at = ", ".join(f"x{self.scale(np.array([n - 1]))[0]:.3g} at {name}={n}" for name, n in lengths.items())
        return f"{self.label} on {self.layers}: {at}"

    def to_json(self, lengths: dict[str, int] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "label": self.label, "params": dict(self.params), "layers": self.layers}
        if lengths:
            out["scale_at"] = {str(n): float(self.scale(np.array([n - 1]))[0]) for n in lengths.values()}
        return out


def temperature_label(changes: tuple) -> str:
    """`temperature(attn_scale=0.2)`: how a Spec's label names its changed temperature."""
    return "temperature(" + ",".join(f"{k}={v:g}" for k, v in changes) + ")"


def split_temperature(params: dict[str, Any]) -> tuple[dict[str, Any], tuple]:
    """(the method's parameters, the temperature's changes as sorted (name, value) pairs) of one parameter dict;
    each change checked against its domain."""
    changes = []
    for name in sorted(TUNABLE_NAMES & {k for k, v in params.items() if v is not None}):
        p = next(q for ps in TUNABLE.values() for q in ps if q.name == name)
        v = float(params[name])
        if not (math.isfinite(v) and p.lo <= v <= p.hi):
            raise RopeCliError(f"position temperature {name}={v:g} is outside [{p.lo:g}, {p.hi:g}]; pick a value in that range")
        changes.append((name, v))
    return {k: v for k, v in params.items() if k not in TUNABLE_NAMES}, tuple(changes)


def tempered(shipped: "Temperature | None", changes: tuple) -> "Temperature | None":
    """The temperature a Spec runs the model at: the model's own with `changes`; one line where the model ships
    none to change."""
    if not changes:
        return shipped
    if shipped is None:
        raise RopeCliError(f"{changes[0][0]} changes a position temperature, and this model ships none (Llama 4 and "
                           "Mistral 4 do); drop it")
    return shipped.but(changes)


def read_temperature(text: dict[str, Any], rope_block: dict[str, Any] | None) -> Temperature | None:
    """The position temperature a (text) config dict ships, None where it ships none."""
    rp = rope_block or {}
    if text.get("attn_temperature_tuning") and text.get("floor_scale") and text.get("attn_scale") is not None:
        layers = "the NoPE layers" if 0 in (text.get("no_rope_layers") or []) else "no layer (every layer has RoPE)"
        return Temperature("llama4", (("attn_scale", float(text["attn_scale"])), ("floor_scale", float(text["floor_scale"]))),
                           layers)
    beta = rp.get("llama_4_scaling_beta")
    if beta is not None and rp.get("original_max_position_embeddings"):
        return Temperature("mistral4", (("beta", float(beta)), ("original_len", float(rp["original_max_position_embeddings"]))),
                           "every layer")
    return None
