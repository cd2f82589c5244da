"""The RoPE schedule a model ships (Llama 3.1's llama3 x8, Qwen's YaRN, Phi-3's longrope, Gemma 3's linear x8 …),
read from a config's rope block into ropecli's own terms. Numpy only.

A model that ships a scaled RoPE has two lengths, named the same everywhere:
- L0: the length the shipped schedule was built from (`original_max_position_embeddings`);
- Ls: the length the model is shipped for.
Rules per rope_type (transformers' `modeling_rope_utils.py`; vLLM's `_get_and_verify_max_len` in
`vllm/config/model.py` for Ls):
    linear    Lambda_m = k               L0 = original, else max_position_embeddings / k;  Ls = max_position_embeddings
    proportional (Gemma 4's p-RoPE: the pairs past R at frequency 0, the geometry's `rotating_pairs`): linear by its
              factor (`_compute_proportional_rope_parameters` divides every pair by it); factor 1: plain RoPE
    dynamic   ntk-aware at k*n/L0-(k-1)  L0 = Ls = max_position_embeddings (it grows the base past it)
    yarn      ramp by turns within L0    L0 = original, else max_position_embeddings;      Ls = L0 * k
    llama3    by wavelength against L0   L0 = original (else max_position_embeddings);      Ls = max_position_embeddings
    longrope  short_factor up to L0, long_factor past it (attention factor from max_pos / L0 at every length)
                                         L0 = original;                                     Ls = max_position_embeddings
    dynamic with alpha (HunYuan, transformers' `ntk_alpha` in modeling_hunyuan_v1_dense.py): a fixed base*alpha^(d/(d-2)),
              ntk-aware at k = alpha    L0 = Ls = max_position_embeddings (no length enters it)
Ls is never below L0. `Shipped.at(d, base, n)` gives the per-pair factors and attention factor the
runtime applies to a request of n tokens: exactly what transformers computes (tested against
`ROPE_INIT_FUNCTIONS` and the unpatched model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.rope.geometry import Geometry
from ropecli.rope.methods import compute_schedule
from ropecli.rope.schedule import format_label

# transformers' rope_type -> ropecli's method (None: plain RoPE, nothing shipped)
TYPE_TO_METHOD = {"default": None, "mrope": None, "proportional": "pi", "linear": "pi", "dynamic": "dynamic", "yarn": "yarn",
                  "llama3": "llama3", "longrope": "longrope", "su": "longrope"}  # "su": Phi-3's first spelling
# the block's keys that become the ropecli method's parameters
_PARAM_KEYS = {"yarn": ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate"),
               "llama3": ("low_freq_factor", "high_freq_factor"), "longrope": ("attention_factor",)}


NTK_ALPHA = "ntk_alpha"  # HunYuan's `dynamic` block with a fixed `alpha`, as transformers renames it


@dataclass(frozen=True)
class Shipped:
    """A shipped schedule: a ropecli method with its parameters at factor k_s, built from L0, shipped for Ls."""
    rope_type: str  # as the config spells it (transformers' name)
    method: str  # ropecli's method (`ropecli.rope.methods.REGISTRY`)
    params: tuple  # (name, value) of the method's parameters that the block sets
    factor: float  # k_s
    original_len: int  # L0
    shipped_len: int  # Ls
    short_factors: tuple | None = None  # longrope: Lambda_m up to L0
    source: str = field(default="rope_parameters", compare=False)  # where it was read: rope_parameters, rope_scaling, gguf

    @property
    def label(self) -> str:
        if self.rope_type == NTK_ALPHA:
            return f"{NTK_ALPHA}(alpha={self.factor:g})"
        shown = {"factor": self.factor, **{k: v for k, v in self.params if k != "factors"}}
        return format_label(self.method if self.method != "pi" else "linear", shown)

    def describe(self) -> str:
        """`ships llama3(factor=8, …) from L0=8192 for Ls=131072 (rope_parameters)`."""
        return f"ships {self.label} from L0={self.original_len} for Ls={self.shipped_len} ({self.source})"

    def at(self, rotary_dim: int, base: float, n: int | None = None) -> tuple[np.ndarray, float]:
        """(Lambda_m (d/2,), attention factor) a request of n tokens runs under (default n = Ls)."""
        n = self.shipped_len if n is None else int(n)
        params = dict(self.params)
        if self.method == "longrope":
            if n <= self.original_len and self.short_factors is not None:
                params["factors"] = self.short_factors
            if params.get("attention_factor") is None:  # transformers: from max_position_embeddings / L0, at every length
                params["attention_factor"] = longrope_attention(self.factor, self.original_len)
        if self.method == "dynamic":
            params["seq_len"] = float(max(n, self.original_len))
        geom = Geometry(rotary_dim, base, self.original_len, max(self.factor, 1.0))
        s = compute_schedule(self.method, geom, **params)
        return s.factors, s.attention_factor

    def to_json(self) -> dict[str, Any]:
        return {"rope_type": self.rope_type, "method": self.method, "label": self.label, "factor": self.factor,
                "L0": self.original_len, "Ls": self.shipped_len, "source": self.source,
                "params": {k: (None if k == "factors" else v) for k, v in self.params}}


def longrope_attention(factor: float, original_len: int) -> float:
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original_len))


def read_shipped(block: dict[str, Any] | None, *, max_len: int | None, original_len: int | None = None,
                 source: str = "rope_parameters") -> Shipped | None:
    """The schedule a rope block ships (a transformers-5 `rope_parameters` entry or a transformers-4
    `rope_scaling`, `type` or `rope_type` spelling), None for plain RoPE. `max_len`:
    max_position_embeddings; `original_len`: a config's top-level original_max_position_embeddings
    (Phi-3 keeps it there; it wins over the block's, as in transformers' `standardize_rope_params`)."""
    block = dict(block or {})
    rope_type = str(block.get("rope_type") or block.get("type") or "default")
    if rope_type not in TYPE_TO_METHOD:
        raise RopeCliError(f"the model ships rope_type '{rope_type}', which ropecli does not know "
                           f"({', '.join(t for t in TYPE_TO_METHOD if t != 'su')}); pass --train-len and use --method none")
    method = TYPE_TO_METHOD[rope_type]
    if method is None or (rope_type == "proportional" and float(block.get("factor") or 1.0) == 1.0):
        return None  # p-RoPE at factor 1 is plain RoPE on its rotating pairs (the geometry carries which: rotating_pairs)
    original = original_len or block.get("original_max_position_embeddings")
    max_len = int(max_len) if max_len else None
    if rope_type == "dynamic" and block.get("alpha"):  # HunYuan: the checkpoints say dynamic, the alpha makes it fixed
        L = int(original or max_len or 0)
        if L <= 0:
            raise RopeCliError("the model's dynamic block with alpha states no length; pass --train-len")
        return Shipped(NTK_ALPHA, "ntk-aware", (), float(block["alpha"]), L, L, None, source)
    factor = block.get("factor")
    if method == "longrope" and factor is None and original and max_len:
        factor = max_len / original  # transformers: max_position_embeddings / L0
    if factor is None:
        raise RopeCliError(f"the model's rope block ({rope_type}) states no factor; check its config")
    factor = float(factor)
    if method == "pi":
        L0 = int(original or round((max_len or 0) / factor))
        Ls = int(max_len or round(L0 * factor))
    elif method == "dynamic":
        L0 = Ls = int(original or max_len or 0)
    elif method == "yarn":
        L0 = int(original or max_len or 0)
        Ls = int(round(L0 * factor))
    else:  # llama3, longrope
        L0 = int(original or max_len or 0)
        Ls = int(max_len or round(L0 * factor))
    if L0 <= 0:
        raise RopeCliError(f"the model's {rope_type} block states no original length and the config no "
                           "max_position_embeddings; pass --train-len")
    params: dict[str, Any] = {k: _number(block[k]) for k in _PARAM_KEYS.get(method, ()) if block.get(k) is not None}
    short = None
    if method == "longrope":
        long_f, short_f = block.get("long_factor"), block.get("short_factor")
        if long_f is None:
            raise RopeCliError("the model's longrope block has no long_factor; check its config")
        params["factors"] = tuple(float(x) for x in long_f)
        short = tuple(float(x) for x in short_f) if short_f is not None else None
    return Shipped(rope_type, method, tuple(params.items()), factor, L0, max(Ls, L0), short, source)


def _number(value: Any) -> float:
    return float(value) if not isinstance(value, bool) else (1.0 if value else 0.0)
