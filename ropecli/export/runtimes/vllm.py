"""vLLM: `--hf-overrides` JSON (the rope_parameters block) and the `vllm serve` line.

Decides once at start-up: longrope's long_factor for every request when --max-model-len > original length
(`Phi3LongRoPEScaledRotaryEmbedding.__init__`, vllm/model_executor/layers/rotary_embedding/
phi3_long_rope_scaled_rope.py), its cos/sin scaled by long_mscale; `ntk` (NTK-RoPE-fixed/mixed) and
`dynamic` fix their factors at start-up too. The same rotation at every step of decoding: a KV cache never
goes stale. The block ropecli writes and what vLLM computes from it: `ropecli.export.vllm_overrides`.
"""

from __future__ import annotations

from ropecli.export.runtimes.record import AT_START_UP, Runtime, Version
from ropecli.errors import RopeCliError

RECORD = Runtime(
    name="vllm", label="vLLM", package="vllm",
    artefact="--hf-overrides JSON (the rope_parameters block, short_mscale = long_mscale) and the `vllm serve` line",
    reads="--hf-overrides rope_parameters (or the checkpoint's rope_scaling), --max-model-len",
    at_length="once at start-up: --max-model-len > original length selects long_factor for every request, short ones included",
    decoding="fixed at start-up: every step, prefill and decode, uses the same rotation; the KV cache stays consistent",
    rule=AT_START_UP, serves_dynamic=True,
    versions=(
        Version("", "reads the override as rope_parameters (>= 0.12.0: patch_rope_parameters) or rope_scaling (older: "
                "patch_rope_scaling); ropecli writes both, the same block",
                "vLLM PR #28542 (0.12.0), vllm/transformers_utils/config.py: patch_rope_parameters"),
        Version(">=0.11.1", "longrope: long_factor for every request once --max-model-len > original_max_position_embeddings",
                "vLLM PR #27431 (0.11.1), phi3_long_rope_scaled_rope.py: Phi3LongRoPEScaledRotaryEmbedding.__init__",
                older="0.11.0 and older pick per batch (torch.any(positions > original)), like transformers: the same "
                      "for a consistent export (the default); a --switching export decodes with stale keys there"),
        Version(">=0.22.0", "dynamic NTK: base * (k * max_position_embeddings / max_trained_positions - (k - 1))^(d/(d-2))",
                "vLLM PR #41277 (0.22.0), dynamic_ntk_scaling_rope.py: DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache",
                older="<= 0.21: base * (k * max_len / max_position_embeddings - (k - 1))^(d/(d-2)), max_len = "
                      "max_position_embeddings * k; ropecli writes max_position_embeddings = k*L and max_trained_positions "
                      "= L, for which both give k' = k^2 - k + 1 (transformers' dynamic at k*L)"),
    ),
    p_rope="vLLM's get_rope builds Gemma4RotaryEmbedding for 'proportional' (rotary_embedding/gemma4_rope.py) and passes "
           "it no factor: it serves the model as shipped only",
    temperatures=(("llama4", "applies it from the config (Llama4Attention._get_attn_scale, NoPE layers from no_rope_layers)"),
                  ("mistral4", "applies config.llama_4_scaling of Mistral's native format (_get_llama_4_scaling); from an HF "
                               "config's llama_4_scaling_beta no mapping was found upstream: check that your version applies it")),
    temperature_changes=(("llama4:instead", "vLLM reads attn_scale and floor_scale from the model's config.json: "
                          "export --to transformers --out DIR and serve DIR"),),
)


def write(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, replace=False) -> dict:
    """--hf-overrides JSON (vLLM's native ntk, or longrope with its mscales) and the `vllm serve` line."""
    import json

    from ropecli.export.writers import hf_result, vllm_checkpoint, write_block
    from ropecli.export.vllm_overrides import vllm_block, vllm_command

    block, result = hf_result(spec, geom, rope, "vllm", model, consistent)
    block, how = vllm_block(rope, spec, geom.factor, block)
    note = how if block["rope_parameters"].get("rope_type") == "ntk" else f"{result['note']}; {how}"
    if rope.partial_rotary_factor != 1.0 and "longrope" in json.dumps(block):
        note += "; note: vLLM's longrope needs rotary_dim = head_dim, this model has partial rotary"
    result.update(note=note, block=block, lines=[note])
    result["command"] = vllm_command(vllm_checkpoint(result, model, gguf_file), block)
    result["lines"].append(result["command"])
    return result if out is None else write_block(result, block, out, model, gguf_file, force, folder=False)


def claims(path) -> bool:
    """A .json overrides file with vLLM's mscale or ntk keys."""
    return path.suffix == ".json" and ("_mscale" in path.read_text() or '"ntk"' in path.read_text())


def read_back(artefact, exp):
    """What vLLM applies to every request at --max-model-len T (`ropecli.export.readback.vllm_applied`)."""
    from ropecli.export.readback import read_json, vllm_applied

    block = read_json(artefact)
    if "rope_parameters" not in block:
        raise RopeCliError(f"{artefact}: no rope_parameters in it; pass a block written by `ropecli export`")
    head_dim = int(round(exp.rope.rotary_dim / exp.rope.partial_rotary_factor))
    return vllm_applied(block, exp.target_len, head_dim), block
