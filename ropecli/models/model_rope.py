"""ModelRope: a model's RoPE geometry, the one record of it that export and evaluation take — d, base, the lengths L0
and Ls, the layer types and which are scaled, what the model ships (a schedule, layer kinds, p-RoPE, a position
temperature). Made by `ropecli.models.config` from a config alone and by `ropecli.backends.load` from a loaded model."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ropecli.models.layer_kinds import LayerKinds
from ropecli.rope.geometry import Geometry
from ropecli.rope.shipped import Shipped
from ropecli.rope.temperature import Temperature


@dataclass(frozen=True)
class ModelRope:
    """A model's RoPE geometry, the one record of it: read from a config (`read_rope_config`, no
    weights) or from a loaded model (`ropecli.backends.load`); export and evaluation both take it."""
    name: str  # what the user passed
    rotary_dim: int  # d
    base: float  # of the (first) scaled layer type
    train_len: int  # L
    partial_rotary_factor: float = 1.0  # d / head_dim
    layer_bases: dict[str, float] = field(default_factory=dict)  # RoPE base per layer type; {} with one RoPE
    scaled_types: tuple[str, ...] = ()  # the layer types ropecli scales (--rope-layers); () with one RoPE
    shipped: Shipped | None = None  # the schedule the model ships on the (first) scaled layer type; None: plain RoPE
    model_type: str = ""  # the config's model_type (llama, qwen2, phi3 …): what a runtime's loader does depends on it
    layers: LayerKinds | None = None  # NoPE, chunked, sliding, linear-attention layers (None: one RoPE on every layer)
    rotating_pairs: int | None = None  # p-RoPE (Gemma 4 'proportional'): pairs past it at frequency 0; None: all rotate
    temperature: Temperature | None = None  # a position temperature the model ships (Llama 4, Mistral 4); None: none
    # train_len is L0, the length the shipped schedule was built from (the training length of a plain model)

    @property
    def shipped_len(self) -> int:
        """Ls: the length the model is shipped for (L0 for a model that ships plain RoPE)."""
        return self.shipped.shipped_len if self.shipped else self.train_len

    @property
    def layer_type(self) -> str | None:
        """The layer type whose geometry this is (the first scaled one); None with one RoPE."""
        return self.scaled_types[0] if self.scaled_types else None

    @property
    def layer_types(self) -> list[str]:
        """Every RoPE layer type of the model ([] with one RoPE)."""
        return sorted(self.layer_bases)

    @property
    def scaled_bases(self) -> dict[str | None, float]:
        """Base of each scaled layer type ({None: base} for a model with one RoPE)."""
        return {t: self.layer_bases[t] for t in self.scaled_types} if self.scaled_types else {None: self.base}

    def on_model(self, position_map):
        """(the map as it runs on this model, the line saying what it chose here or None): LaMPE's fit = auto becomes
        its family's (`BoundMap.on_model`); () stays ()."""
        if not position_map:
            return position_map, None
        return position_map.on_model(self.model_type, self.base, self.train_len,
                                     self.shipped.rope_type if self.shipped else None)

    def geometry(self, factor: float, base: float | None = None) -> Geometry:
        """The geometry of L0 at factor k (k = N / L0), carrying the shipped schedule; `base`: a layer type's."""
        return Geometry(self.rotary_dim, self.base if base is None else base, self.train_len, factor, self.shipped,
                        self.rotating_pairs, self.temperature)

    def overridden(self, rotary_dim: int | None = None, base: float | None = None, train_len: int | None = None) -> "ModelRope":
        """Explicit flags win over the config: --base replaces the base of every scaled layer type."""
        bases = {t: (base if base is not None and t in self.scaled_types else b) for t, b in self.layer_bases.items()}
        shipped = self.shipped
        if shipped is not None and train_len and train_len != self.train_len:  # --train-len names L0
            shipped = replace(shipped, original_len=train_len, shipped_len=max(shipped.shipped_len, train_len))
        return replace(self, rotary_dim=rotary_dim or self.rotary_dim, base=self.base if base is None else base,
                       train_len=train_len or self.train_len, layer_bases=bases, shipped=shipped)

    def describe_shipped(self) -> str:
        """What the model ships, in one phrase: `ships llama3(factor=8, …) from L0=8192 for Ls=131072 (…)`."""
        if self.shipped is None:
            return f"ships plain RoPE (native = none) from L0=Ls={self.train_len}"
        return self.shipped.describe()

    def describe(self, runs: str = "") -> str:
        """`NAME: rotary dim d=…, base=…, L0=…, Ls=…[, RUNS][, layer types]; ships …` (RUNS: dtype and device)."""
        types = ""
        if self.layer_bases:
            others = ", ".join(f"{t} base {b:g}" for t, b in self.layer_bases.items() if t != self.layer_type)
            types = f", layer type {self.layer_type}" + (f" (also {others})" if others else "")
        layers = f"; layers: {self.layers.summary()} ({'; '.join(self.layers.extension_notes())})" if self.layers else ""
        if self.rotating_pairs is not None:
            layers += (f"; p-RoPE: pairs 1-{self.rotating_pairs} rotate, pairs {self.rotating_pairs + 1}-{self.rotary_dim // 2} "
                       "sit at frequency 0 (no schedule moves them)")
        if self.temperature is not None:
            layers += f"; position temperature {self.temperature.describe(self.lengths)} (the model applies it; kept in exports)"
        return (f"{self.name}: rotary dim d={self.rotary_dim}, base={self.base:g}, training length L0={self.train_len}, "
                f"shipped length Ls={self.shipped_len}{', ' + runs if runs else ''}{types}; {self.describe_shipped()}{layers}")

    def to_json(self) -> dict[str, Any]:
        """The model's RoPE for --json headers: d, base, L0, Ls and what it ships."""
        return {"rotary_dim": self.rotary_dim, "base": self.base, "L0": self.train_len, "Ls": self.shipped_len,
                "shipped": self.shipped.to_json() if self.shipped else None,
                "layer_types": self.layer_types, "scaled_types": list(self.scaled_types),
                "layers": self.layers.to_json() if self.layers else None, "rotating_pairs": self.rotating_pairs,
                "temperature": self.temperature.to_json(self.lengths) if self.temperature else None}

    def extension_notes(self) -> list[str]:
        """What extending this architecture can and cannot change, one sentence each (advise's notes): its layer kinds,
        p-RoPE's fixed pairs, the position temperature that every candidate keeps as shipped."""
        notes = [f"this model's layers: {self.layers.summary()}: {n}" for n in self.layers.extension_notes()] if self.layers else []
        if self.rotating_pairs is not None:
            notes.append(f"p-RoPE: only pairs 1-{self.rotating_pairs} of {self.rotary_dim // 2} rotate; every candidate scales "
                         "those and leaves the rest at frequency 0")
        if self.temperature is not None:
            notes.append(f"position temperature {self.temperature.label} on {self.temperature.layers}: every candidate keeps "
                         "it as shipped (ropecli changes frequencies, not the model's query scale)")
        return notes

    @property
    def lengths(self) -> dict[str, int]:
        """{'L0': …, 'Ls': …} (one entry where they agree): where headers show a position temperature."""
        return {"L0": self.train_len} if self.shipped_len == self.train_len else {"L0": self.train_len, "Ls": self.shipped_len}
