"""vLLM: the `--hf-overrides` block, and what vLLM computes from one (for `ropecli verify`).

Two forms, each exact for what it carries:
- `rope_type: "ntk"` with `factor` (and `mixed_b`): vLLM's own NTK-RoPE-fixed / NTK-RoPE-mixed
  (`NTKScalingRotaryEmbedding._compute_inv_freq` in vllm/model_executor/layers/rotary_embedding/
  ntk_scaling_rope.py, citing kexue.fm/archives/9706). ropecli writes it for ntk-fixed and for the
  seed's mixed(b) (critical m_c = d/2: the clamp min(k, ·) never acts), one RoPE per model, no log-n.
- `rope_type: "longrope"` with the factor lists otherwise (`Phi3LongRoPEScaledRotaryEmbedding` in
  .../rotary_embedding/phi3_long_rope_scaled_rope.py): long_factor for every request once
  `--max-model-len` > original_max_position_embeddings, cos/sin multiplied by `long_mscale` (it ignores
  `attention_factor`; its default is sqrt(1 + ln(max_len / L) / ln L)), so ropecli sets
  short_mscale = long_mscale = the schedule's attention factor.
"""

from __future__ import annotations

import json
import math
import shlex

import numpy as np

from ropecli.models.model_rope import ModelRope
from ropecli.rope.spec import Spec


def native_ntk_params(rope: ModelRope, spec: Spec, factor: float) -> dict | None:
    """vLLM's own `ntk` rope parameters for `spec` at factor k, or None where they would not be exact."""
    if spec.log_n or rope.layer_types or factor <= 1:
        return None
    params = dict(spec.params)
    if spec.method == "ntk-fixed":
        out = {"rope_type": "ntk", "rope_theta": rope.base, "factor": factor}
    elif spec.method == "mixed" and params.get("critical") is None:
        out = {"rope_type": "ntk", "rope_theta": rope.base, "factor": factor, "mixed_b": float(params["b"])}
    else:
        return None
    if rope.partial_rotary_factor != 1.0:
        out["partial_rotary_factor"] = rope.partial_rotary_factor
    return out


def vllm_block(rope: ModelRope, spec: Spec, factor: float, longrope_block: dict) -> tuple[dict, str]:
    """The block vLLM gets: native `ntk` where exact, else `longrope_block` with its mscales set.
    `ntk` keeps max_position_embeddings = k*L: vLLM's NTK class builds its cos/sin cache with
    max_position_embeddings rows (it does not multiply by the factor as the linear class does)."""
    native = native_ntk_params(rope, spec, factor)
    if native is not None:
        block = {"rope_parameters": native, "max_position_embeddings": int(round(factor * rope.train_len))}
        what = "NTK-RoPE-fixed" if "mixed_b" not in native else f"NTK-RoPE-mixed with mixed_b = {native['mixed_b']:g}"
        return block, (f"{spec.label} as vLLM's native rope_type 'ntk' ({what}, factor {factor:g}): exact, "
                       "applied at every length")
    out = json.loads(json.dumps(longrope_block))
    params = out["rope_parameters"]
    how = "short_mscale = long_mscale = attention_factor (vLLM's longrope reads those)"
    for p in ([params] if "rope_type" in params else [v for v in params.values() if isinstance(v, dict)]):
        if p.get("rope_type") == "longrope":
            p["short_mscale"] = p["long_mscale"] = p["attention_factor"]
        elif p.get("rope_type") == "dynamic":  # both of vLLM's formulas give k' = k^2 - k + 1 with these (runtimes/vllm.py)
            p["max_trained_positions"] = rope.train_len
            out["max_position_embeddings"] = int(round(factor * rope.train_len))
            how = (f"dynamic: max_position_embeddings = k*L = {out['max_position_embeddings']}, max_trained_positions = L "
                   f"= {rope.train_len}: the base vLLM fixes at start-up is transformers' dynamic at k*L, in vLLM before and "
                   "after PR #41277")
    return with_v4_keys(out), how


def with_v4_keys(block: dict) -> dict:
    """The block with `rope_scaling` beside `rope_parameters` (the same dict): vLLM before 0.12.0 reads only
    rope_scaling from --hf-overrides (`patch_rope_scaling`), later ones either (`patch_rope_parameters`). Per layer
    type there is no rope_scaling form: unchanged."""
    params = block["rope_parameters"]
    if "rope_type" not in params:
        return block
    return {**block, "rope_scaling": dict(params)}


def vllm_command(model: str, block: dict) -> str:
    overrides = json.dumps(block, separators=(",", ":"))
    return (f"vllm serve {shlex.quote(model)} --hf-overrides {shlex.quote(overrides)} "
            f"--max-model-len {block['max_position_embeddings']}")


# --- what vLLM computes from a block (numpy twins of its rotary classes) -------------------------

def ntk_factors(rotary_dim: int, factor: float, mixed_b: float | None) -> np.ndarray:
    """Lambda_m = inv_freq(unscaled) / inv_freq(vLLM ntk), m = 1 .. d/2, as
    `NTKScalingRotaryEmbedding._compute_inv_freq` computes it:
        base = self.base * (self.scaling_factor if self.mixed_b is None else 1)
        inv_freq = super()._compute_inv_freq(base)            # base^(-2i/d), i = 0 .. d/2-1
        if self.mixed_b is None:
            inv_freq = inv_freq / self.scaling_factor ** (2 / self.rotary_dim)
        else:
            a = torch.tensor(self.scaling_factor).log() / (self.rotary_dim / 2) ** self.mixed_b
            lambda_1_m = (a * torch.arange(1, self.rotary_dim // 2 + 1).float() ** self.mixed_b).exp()
            inv_freq = inv_freq / lambda_1_m
    Without mixed_b: (base*k)^(-2i/d) / k^(2/d) = base^(-2i/d) / k^(2(i+1)/d), so Lambda_m = k^(2m/d)."""
    half = rotary_dim // 2
    m = np.arange(1, half + 1, dtype=np.float64)
    if mixed_b is None:
        i = m - 1
        return factor ** (2.0 * i / rotary_dim) * factor ** (2.0 / rotary_dim)
    a = math.log(factor) / half ** mixed_b
    return np.exp(a * m ** mixed_b)


def longrope_applied(params: dict, max_position_embeddings: int, max_model_len: int, train_len: int) -> tuple[np.ndarray, float, str]:
    """(factors, cos/sin scale, which list) vLLM's longrope applies to every request when serving with
    --max-model-len `max_model_len` (`Phi3LongRoPEScaledRotaryEmbedding.__init__`: use_long_rope =
    max_model_len > original_max_position_embeddings, decided once; cos/sin of each cache multiplied by
    its mscale, whose default is sqrt(1 + ln(s) / ln L), s = max_position_embeddings / L, 1 when s <= 1)."""
    orig = int(params.get("original_max_position_embeddings") or train_len)
    which = "long" if max_model_len > orig else "short"
    factors = np.asarray(params[f"{which}_factor"], dtype=np.float64)
    scale = max_position_embeddings / orig
    default = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0
    mscale = params.get(f"{which}_mscale")
    return factors, float(default if mscale is None else mscale), which


def dynamic_factors(rotary_dim: int, factor: float, max_position_embeddings: int | None = None,
                    max_trained_positions: int | None = None, before_41277: bool = False) -> np.ndarray:
    """Lambda_m of vLLM's `dynamic` (DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache in
    vllm/model_executor/layers/rotary_embedding/dynamic_ntk_scaling_rope.py), base fixed once at start-up:
    - vLLM >= 0.22 (PR #41277): base * (k * max_position_embeddings / max_trained_positions - (k - 1))^(d/(d-2)),
      max_trained_positions from rope_parameters, default max_position_embeddings (then no scaling at all);
    - vLLM <= 0.21 (`before_41277`): base * (k * max_len / max_position_embeddings - (k - 1))^(d/(d-2)) with
      max_len = max_position_embeddings * k: k' = k*k - (k - 1) whatever the lengths.
    ropecli writes max_position_embeddings = k*L and max_trained_positions = L, for which both are k' = k^2 - k + 1:
    what transformers' dynamic type applies at k*L tokens."""
    if before_41277 or max_position_embeddings is None:
        k_eff = factor * factor - (factor - 1)
    else:
        trained = max_trained_positions or max_position_embeddings
        k_eff = max(1.0, factor * max_position_embeddings / trained - (factor - 1))
    i = np.arange(rotary_dim // 2, dtype=np.float64)
    return k_eff ** (2.0 * i / (rotary_dim - 2))
