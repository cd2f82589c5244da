"""The one rule for a model's rotary geometry (d, base, L), from a config's fields, and the geometry the
commands compute with (flags over config over defaults). Torch-free: loading (`ropecli.backends.load`),
the config reader (`ropecli.models.config`), export's readback and verify all take d, base and L from
`config_geometry`:

- head_dim = qk_rope_head_dim (MLA), else head_dim, else hidden_size / num_attention_heads (GPT-2 style: n_embd / n_head);
- d = rotary_dim where a config states it as an int; qk_rope_head_dim where a config states one (MLA rotates exactly
  that part of a head; Mistral 4's partial_rotary_factor is qk_rope / (qk_nope + qk_rope), a fraction of the whole
  head, not of the rotating part); else int(head_dim x partial_rotary_factor), the factor read from the rope
  parameters first, then the config (GPT-NeoX: rotary_pct), else 1;
- base = rope_theta of the rope parameters, then of the config, else 10000;
- L = original_max_position_embeddings (rope parameters, then config), else max_position_embeddings
  (GPT-2 style: n_positions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ropecli.errors import RopeCliError

DEFAULT_BASE = 10000.0  # transformers' and llama.cpp's default rope_theta
DEFAULT_FACTOR = 8.0  # k when neither --k nor a target length is given
DEFAULT_GEOMETRY = {"rotary_dim": 128, "base": DEFAULT_BASE, "train_len": 4096}  # LLaMA-2-7B's, without --model


@dataclass(frozen=True)
class ConfigGeometry:
    """What a config's fields say of its rotary geometry (None: the config does not say)."""
    head_dim: int | None
    partial_rotary_factor: float
    rotary_dim: int | None  # d
    base: float
    original_len: int | None  # original_max_position_embeddings, where stated
    max_len: int | None  # max_position_embeddings
    rotating_pairs: int | None = None  # p-RoPE: the pairs that rotate (the rest of d/2 at frequency 0); None: all

    @property
    def train_len(self) -> int | None:
        """L: the original length where the config states one, else its maximum length."""
        return self.original_len or self.max_len


def config_geometry(text: dict[str, Any], rope_parameters: dict[str, Any] | None = None,
                    layer_type: str | None = None) -> ConfigGeometry:
    """The rule on a (text) config as a dict and the rope parameters of the layer type in question (a
    transformers 5 `rope_parameters` block, or a transformers 4 config's `rope_scaling`). p-RoPE (`proportional`,
    Gemma 4's global layers): d is the whole head (the exponent runs over it), its first
    int(partial x head_dim) // 2 pairs rotate and the rest sit at frequency 0 (`_compute_proportional_rope_parameters`)."""
    rp = rope_parameters or {}
    hidden, heads = text.get("hidden_size") or text.get("n_embd"), text.get("num_attention_heads") or text.get("n_head")
    head_dim = (text.get("qk_rope_head_dim")  # MLA (DeepSeek-V2/V3): only the qk_rope part of a head rotates
                or layer_head_dim(text, layer_type)
                or text.get("head_dim") or (int(hidden) // int(heads) if hidden and heads else None))
    partial = float(rp.get("partial_rotary_factor") or text.get("partial_rotary_factor") or text.get("rotary_pct") or 1.0)
    if isinstance(text.get("rotary_dim"), int):
        d = int(text["rotary_dim"])
    elif text.get("qk_rope_head_dim"):  # MLA: the rotating part, whatever fraction of the whole head it is
        d = int(text["qk_rope_head_dim"])  # partial stays the config's: the fraction of ITS head_dim a runtime rotates
    elif rp.get("rope_type") == "proportional" and head_dim:
        d = int(head_dim)
    else:
        d = int(head_dim * partial) if head_dim else None
    rotating = int(partial * int(head_dim) // 2) if rp.get("rope_type") == "proportional" and head_dim else None
    original = rp.get("original_max_position_embeddings") or text.get("original_max_position_embeddings")
    max_len = text.get("max_position_embeddings") or text.get("n_positions")
    return ConfigGeometry(head_dim and int(head_dim), partial, d, float(rp.get("rope_theta") or text.get("rope_theta") or DEFAULT_BASE),
                          original and int(original), max_len and int(max_len), rotating)


def layer_head_dim(text: dict[str, Any], layer_type: str | None) -> int | None:
    """A layer type's own head size where it differs from head_dim (Gemma 4: its full layers' `global_head_dim`, saved by
    transformers as `per_layer_config` {layer index: {"head_dim": …}}); None where the config gives none."""
    if layer_type is None:
        return None
    types = text.get("layer_types") or []
    per_layer = text.get("per_layer_config") or {}
    for i, t in enumerate(types):
        own = per_layer.get(str(i)) or per_layer.get(i) if isinstance(per_layer, dict) else None
        if t == layer_type and isinstance(own, dict) and own.get("head_dim"):
            return int(own["head_dim"])
    return int(text["global_head_dim"]) if layer_type == "full_attention" and text.get("global_head_dim") else None


def resolve_factor(train_len: int, k: float | None, target_len: int | None, default: float = DEFAULT_FACTOR) -> float:
    """k from `--k` or `--target-len` (target / L); `default` when neither is given."""
    if k is not None and target_len is not None:
        raise RopeCliError("--k and --target-len both set the factor; pass only one of them")
    if target_len is not None:
        if target_len < train_len:
            raise RopeCliError(f"--target-len {target_len} is below --train-len {train_len}; nothing to extend (k would be < 1)")
        return target_len / train_len
    return default if k is None else k
