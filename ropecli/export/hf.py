"""transformers and vLLM: a chosen schedule as a `rope_parameters` block.

`rope_type: longrope` with `long_factor` = Lambda_m, merged into a copy of a model folder's
config.json (per layer type for Gemma 3 style configs); transformers picks long_factor per forward
pass, once the sequence is longer than L (`_compute_longrope_parameters` in transformers'
modeling_rope_utils.py). vLLM takes the same block through `--hf-overrides` and picks long_factor
once at start-up, for every request, when `--max-model-len` > L; its longrope scales cos/sin by
`short_mscale` / `long_mscale`, not by `attention_factor` (`ropecli.export.runtimes.vllm`). Dynamic NTK goes as each
runtime's own `dynamic` type. Every file is written atomically; an existing output is refused unless forced.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.export.manifest import write_manifest
from ropecli.export.p_rope import p_rope_refusal, proportional_block, uniform_factor
from ropecli.export.runtimes.record import Runtime
from ropecli.files import atomic_write_text
from ropecli.models.model_rope import ModelRope
from ropecli.rope.factor_files import rope_parameters_block
from ropecli.spec import Spec


def rope_block(rope: ModelRope, spec: Spec, factor: float, consistent: bool = False) -> tuple[dict, str]:
    """(block, note): `{"rope_parameters": …, "max_position_embeddings": k*L}` running `spec` at factor k;
    per layer type (`{type: params or "unchanged"}`) for per-type models. With log-n the attention
    factor is the constant sqrt(log_L(k*L)): log-n's query scale at the target length."""
    if rope.rotating_pairs is not None:  # p-RoPE: transformers' own 'proportional' block, one factor (export.p_rope)
        return p_rope_block(rope, spec, factor)
    if spec.length_dependent and not spec.log_n and not spec.composed:  # dynamic NTK: transformers' own type follows the length
        return dynamic_block(rope, factor)
    per_type: dict[Any, dict] = {}
    for layer_type, base in rope.scaled_bases.items():
        geom = rope.geometry(factor, base)
        block = rope_parameters_block(geom, spec.schedule(geom), partial_rotary_factor=rope.partial_rotary_factor,
                                      consistent=consistent)
        params = block["rope_parameters"]
        if rope.shipped is not None:  # the shipped schedule up to Ls (short_factor), the extension past it
            params["original_max_position_embeddings"] = rope.shipped_len
            params["short_factor"] = [float(x) for x in rope.shipped.at(rope.rotary_dim, base)[0]]
            params.update(softmax_scale_keys(rope))
        if spec.log_n:
            params["attention_factor"] = math.sqrt(math.log(geom.target_len) / math.log(rope.train_len))
        if consistent:
            params["short_factor"] = list(params["long_factor"])
        per_type[layer_type] = params
    first = next(iter(per_type.values()))
    note = f"{spec.but(log_n=False).label} as longrope long_factor; attention_factor {first['attention_factor']:.6g}"
    if spec.log_n:
        note += (" = sqrt(log_L(k*L)) approximates the per-position log-n query scale by its value at the target "
                 "length (transformers applies one constant to q and k)")
    if consistent:
        note += "; short_factor = long_factor (--consistent)"
    elif rope.shipped is not None:
        note += f"; short_factor = the shipped {rope.shipped.label} up to Ls = {rope.shipped_len}"
    else:
        note += "; short_factor = 1 (unscaled up to L)"
    max_pos = int(round(factor * rope.train_len))
    if not rope.layer_types:
        return {"rope_parameters": first, "max_position_embeddings": max_pos}, note
    note += "; per layer type: merge the scaled entries into your config's rope_parameters, keep the others"
    return {"rope_parameters": {lt: per_type.get(lt, "unchanged") for lt in rope.layer_types},
            "max_position_embeddings": max_pos}, note


def p_rope_block(rope: ModelRope, spec: Spec, factor: float) -> tuple[dict, str]:
    """A p-RoPE model's block: `proportional` at the one factor `spec` divides the rotating pairs by, per scaled type."""
    geom = rope.geometry(factor)
    if (why := p_rope_refusal(spec, geom, rope)) is not None:
        raise RopeCliError(why)
    k = uniform_factor(spec, geom)
    per_type = {lt: proportional_block(rope, base, k) for lt, base in rope.scaled_bases.items()}
    note = f"{spec.label} as transformers' 'proportional' (p-RoPE) with factor {k:g}: pairs past {rope.rotating_pairs} stay at 0"
    block = per_type[None] if not rope.layer_types else {lt: per_type.get(lt, "unchanged") for lt in rope.layer_types}
    return {"rope_parameters": block, "max_position_embeddings": int(round(factor * rope.train_len))}, note


def softmax_scale_keys(rope: ModelRope) -> dict:
    """Keys of the shipped block that a model reads outside its rotary module, kept in the export: DeepSeek-V2/V3
    multiply the softmax scale by mscale(factor, mscale_all_dim)^2 whenever rope_type is not default
    (`DeepseekV3Attention.__init__`, transformers' modeling_deepseek_v3.py), so the export keeps the shipped
    factor and mscale_all_dim: the attention scale ropecli measured under (it patches the rotary only)."""
    shipped = dict(rope.shipped.params) if rope.shipped else {}
    if shipped.get("mscale_all_dim"):
        return {"factor": rope.shipped.factor, "mscale_all_dim": shipped["mscale_all_dim"]}
    return {}


def dynamic_block(rope: ModelRope, factor: float) -> tuple[dict, str]:
    """Dynamic NTK as transformers' own `dynamic` type: its factor depends on the current length, which a
    static long_factor cannot express. transformers reads L from max_position_embeddings (kept at L)."""
    per_type = {}
    for layer_type, base in rope.scaled_bases.items():
        params = {"rope_type": "dynamic", "rope_theta": base, "factor": factor}
        if rope.partial_rotary_factor != 1.0:
            params["partial_rotary_factor"] = rope.partial_rotary_factor
        per_type[layer_type] = params
    note = (f"dynamic NTK as transformers' rope_type 'dynamic', factor {factor:g}: base scaled by the current length "
            "past L (max_position_embeddings stays L; transformers keeps the largest length seen until a prompt "
            "shorter than L resets it; vLLM computes it once for k*L)")
    if not rope.layer_types:
        return {"rope_parameters": per_type[None], "max_position_embeddings": rope.train_len}, note
    return {"rope_parameters": {lt: per_type.get(lt, "unchanged") for lt in rope.layer_types},
            "max_position_embeddings": rope.train_len}, note


def write_json(path: str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def write_hf_block(path: str, rope: ModelRope, spec: Spec, factor: float, rec: Runtime, consistent: bool = True,
                   model: str | None = None, gguf_file: str | None = None) -> dict:
    """`search-b --export-config`: the block for a model, to a JSON file, with the manifest `ropecli export` writes
    beside it (what `ropecli verify PATH` reads); generation-safe (short_factor = long_factor, as `export` writes by
    default) unless `consistent` is False (--switching); `rec`: transformers' record."""
    block, note = rope_block(rope, spec, factor, consistent=consistent)
    write_json(path, block)
    manifest = write_manifest(path, spec, rope.geometry(factor), rope, rec, model or rope.name,
                              gguf_file, consistent)
    return {"path": path, "note": note, "manifest": manifest}


# --- transformers: a model folder whose config.json carries the block ---------------------------

# the keys of a rope block that make the schedule (written anew); any other key is the model's and is kept
SCHEDULE_KEYS = {"rope_type", "type", "factor", "rope_theta", "original_max_position_embeddings", "beta_fast", "beta_slow",
                 "mscale", "mscale_all_dim", "attention_factor", "truncate", "low_freq_factor", "high_freq_factor",
                 "long_factor", "short_factor", "alpha", "partial_rotary_factor"}


def keep_model_keys(old: Any, new: dict) -> dict:
    """The new block with the old block's keys that are not part of a schedule (Qwen2-VL's mrope_section, Mistral 4's
    llama_4_scaling_beta and its max_position_embeddings): an export changes the schedule, not the rest of the model.
    Mistral 4's query temperature counts from the block's original_max_position_embeddings
    (`get_llama_4_attn_scale` in transformers' modeling_mistral4.py), so that length stays the model's where the new
    block is a consistent longrope (short = long factors: the length it switches at changes nothing), else export refuses."""
    if not isinstance(old, dict):
        return new
    out = {**{k: v for k, v in old.items() if k not in SCHEDULE_KEYS}, **new}
    if "llama_4_scaling_beta" in old and out.get("original_max_position_embeddings") != old.get("original_max_position_embeddings"):
        if out.get("rope_type") != "longrope" or out.get("short_factor") != out.get("long_factor"):
            raise RopeCliError("this export would move the length the model's position temperature (llama_4_scaling_beta) "
                               "counts from; leave --switching out (the consistent export keeps one factor list at every length)")
        out["original_max_position_embeddings"] = old["original_max_position_embeddings"]
    return out


def merged_config(config: dict, block: dict) -> dict:
    """A copy of a model's config.json with the block merged (into text_config where the model has
    one); per layer type, only the scaled types are replaced. Old `rope_scaling` keys are dropped; a single-RoPE
    model gets `rope_scaling` (the same dict) and `rope_theta` beside `rope_parameters`, for transformers-4 readers."""
    out = json.loads(json.dumps(config))
    text = out["text_config"] if isinstance(out.get("text_config"), dict) else out
    new = block["rope_parameters"]
    if "rope_type" not in new:  # per layer type: {type: params or "unchanged"}
        old = dict(text.get("rope_parameters") or {})
        if "rope_local_base_freq" in text and not old:  # transformers 4 Gemma 3: both bases at the top level
            old = {"full_attention": {"rope_type": "default", "rope_theta": text.get("rope_theta", 1e6)},
                   "sliding_attention": {"rope_type": "default", "rope_theta": text["rope_local_base_freq"]}}
        text["rope_parameters"] = {lt: (old.get(lt) if params == "unchanged" else keep_model_keys(old.get(lt), params))
                                   for lt, params in new.items()}
    else:
        new = keep_model_keys(text.get("rope_parameters") or text.get("rope_scaling"), new)
        text["rope_parameters"] = new
    for stale in ("rope_scaling", "rope_theta", "rope_local_base_freq"):
        text.pop(stale, None)
    if "original_max_position_embeddings" in text:  # Phi-3 keeps it at the top level, and it wins over the block's
        first = new if "rope_type" in new else next((p for p in new.values() if isinstance(p, dict)), {})
        text["original_max_position_embeddings"] = first.get("original_max_position_embeddings",
                                                             text["original_max_position_embeddings"])
    text["max_position_embeddings"] = block["max_position_embeddings"]
    text.update(block.get("config") or {})  # a changed position temperature's keys (Llama 4: attn_scale, floor_scale)
    if "rope_type" in new:  # transformers 4 reads rope_scaling + rope_theta; 5 takes rope_scaling over rope_parameters
        text["rope_scaling"], text["rope_theta"] = dict(new), new["rope_theta"]  # (convert_rope_params_to_dict): the same dict
    return out
