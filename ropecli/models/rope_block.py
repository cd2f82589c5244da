"""The checks a config's rope block must pass before ropecli reads a schedule from it (or loads the model).

Users paste rope blocks into config.json by a model card's instructions, and a typo there does not fail
loudly anywhere: transformers' validators (`RotaryEmbeddingConfigMixin._validate_*_rope_parameters` in
`modeling_rope_utils.py`) only log a warning, and the model then runs at a factor of -4 or crashes deep in a
broadcast. ropecli refuses such a block in one line naming the key, its value and the fix, before any weight
is read. What is refused is what no runtime would serve:
- a factor (or HunYuan's alpha, an attention factor) that is not a finite number > 0;
- a length (original_max_position_embeddings, max_position_embeddings) that is not a positive integer;
- an original length above max_position_embeddings where the type reads Ls from the latter (linear, llama3,
  longrope: the shipped length would fall below the one the schedule was built from);
- llama3 with high_freq_factor <= low_freq_factor (every runtime divides by their difference: transformers'
  `_compute_llama3_parameters`, vLLM's `Llama3RotaryEmbedding`, llama.cpp's `llama_model_rope_factors`);
- longrope factor lists that are not lists of positive numbers, one per rotary pair;
- a rope_theta that is not a number > 1, a partial_rotary_factor outside (0, 1].
"""

from __future__ import annotations

import math
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.models.model_geometry import config_geometry

FIX = "fix that key in the model's config.json (the model card gives the value), or remove the block for plain RoPE"
_POSITIVE = ("factor", "alpha", "attention_factor", "mscale", "mscale_all_dim")  # finite numbers > 0 where present
_NUMBERS = ("beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor")  # finite numbers where present
_LEN_FROM_MAX = ("linear", "llama3", "longrope", "su")  # Ls = max_position_embeddings: original above it is refused


def _refuse(where: str, key: str, value: Any, problem: str) -> RopeCliError:
    return RopeCliError(f"the model's {where}: {key}={value!r} {problem}; {FIX}")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_length(value: Any, key: str, where: str) -> int | None:
    """A length key: None when absent, else a positive integer (an integral float such as 8192.0 passes)."""
    if value is None:
        return None
    if not is_number(value) or value <= 0 or value != int(value):
        raise _refuse(where, key, value, "is not a positive integer number of tokens")
    return int(value)


def check_rope_block(block: Any, *, where: str = "rope_parameters", max_len: Any = None, pairs: int | None = None) -> None:
    """Refuse (RopeCliError, one line) a rope block no runtime would serve. `max_len`: the config's
    max_position_embeddings; `pairs`: the rotary pairs d/2 the model rotates (longrope lists must match)."""
    if not isinstance(block, dict):
        raise _refuse(where, "block", block, "is not a mapping of rope keys")
    rope_type = block.get("rope_type", block.get("type", "default"))
    if not isinstance(rope_type, str):
        raise _refuse(where, "rope_type", rope_type, "is not a name such as 'yarn' or 'llama3'")
    for key in _POSITIVE:
        if key in block and block[key] is not None and not (is_number(block[key]) and block[key] > 0):
            raise _refuse(where, key, block[key], "is not a finite number > 0")
    for key in _NUMBERS:
        if key in block and block[key] is not None and not is_number(block[key]):
            raise _refuse(where, key, block[key], "is not a finite number")
    theta = block.get("rope_theta")
    if theta is not None and not (is_number(theta) and theta > 1):
        raise _refuse(where, "rope_theta", theta, "is not a number > 1 (the RoPE base; LLaMA's is 10000)")
    partial = block.get("partial_rotary_factor")
    if partial is not None and not (is_number(partial) and 0 < partial <= 1):
        raise _refuse(where, "partial_rotary_factor", partial, "is not a fraction in (0, 1] of the head that rotates")
    original = check_length(block.get("original_max_position_embeddings"), "original_max_position_embeddings", where)
    top = check_length(max_len, "max_position_embeddings", where)
    if rope_type in _LEN_FROM_MAX and original and top and original > top:
        raise _refuse(where, "original_max_position_embeddings", original,
                      f"is above max_position_embeddings={top}: a {rope_type} model is shipped for the longer one")
    if rope_type == "llama3":
        lo, hi = block.get("low_freq_factor", 1.0), block.get("high_freq_factor", 4.0)
        if hi <= lo:
            raise _refuse(where, "high_freq_factor", hi, f"is not above low_freq_factor={lo} (llama3 divides by their difference)")
    if rope_type in ("longrope", "su"):
        for key in ("long_factor", "short_factor"):
            _check_factor_list(block.get(key), key, where, pairs, required=key == "long_factor")


def _check_factor_list(values: Any, key: str, where: str, pairs: int | None, required: bool) -> None:
    if values is None:
        if required:
            raise _refuse(where, key, None, "is missing: longrope needs one factor per rotary pair")
        return
    if not isinstance(values, (list, tuple)) or not all(is_number(v) and v > 0 for v in values):
        raise _refuse(where, key, values if not isinstance(values, (list, tuple)) else "[…]",
                      "is not a list of finite numbers > 0")
    if pairs is not None and len(values) != pairs:
        raise _refuse(where, key, f"[{len(values)} values]", f"has not one factor per rotary pair (the model rotates {pairs})")


def check_config_blocks(text: dict[str, Any]) -> None:
    """Every rope block of a (text) config dict: transformers 5 `rope_parameters` (flat, or one per layer
    type), transformers 4 `rope_scaling`, and the config's own lengths; factor lists against the pairs each
    block's layers rotate (`config_geometry`, where the config states the head)."""
    max_len = text.get("max_position_embeddings")
    check_length(max_len, "max_position_embeddings", "config")
    check_length(text.get("original_max_position_embeddings"), "original_max_position_embeddings", "config")
    rp = text.get("rope_parameters")
    if rp is not None and not isinstance(rp, dict):
        raise _refuse("config", "rope_parameters", rp, "is not a mapping of rope keys")
    per_type = {t: v for t, v in (rp or {}).items() if isinstance(v, dict)}
    for t, block in sorted(per_type.items()):
        check_rope_block(block, where=f"rope_parameters['{t}']", max_len=max_len, pairs=_pairs(text, block, t))
    if rp and not per_type:
        check_rope_block(rp, where="rope_parameters", max_len=max_len, pairs=_pairs(text, rp))
    scaling = text.get("rope_scaling")
    if scaling is not None:
        check_rope_block(scaling, where="rope_scaling", max_len=max_len, pairs=_pairs(text, scaling))
    if "rope_theta" in text:
        check_rope_block({"rope_theta": text["rope_theta"]}, where="config", max_len=max_len)


def _pairs(text: dict[str, Any], block: dict, layer_type: str | None = None) -> int | None:
    """The rotary pairs d/2 of the layers a block applies to, None where the config does not say (or says nonsense:
    the block's own checks name that)."""
    try:
        d = config_geometry(text, block if isinstance(block, dict) else {}, layer_type).rotary_dim
    except (TypeError, ValueError, OverflowError):
        return None
    return d // 2 if d else None
