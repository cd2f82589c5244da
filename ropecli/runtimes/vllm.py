"""vLLM: `--hf-overrides` JSON (the rope_parameters block) and the `vllm serve` line.

Decides once at start-up: longrope's long_factor for every request when --max-model-len > original length
(`Phi3LongRoPEScaledRotaryEmbedding.__init__`, vllm/model_executor/layers/rotary_embedding/
phi3_long_rope_scaled_rope.py), its cos/sin scaled by long_mscale; `ntk` (NTK-RoPE-fixed/mixed) and
`dynamic` fix their factors at start-up too. The same rotation at every step of decoding: a KV cache never
goes stale. The block ropecli writes and what vLLM computes from it: `ropecli.export.vllm`.
"""

from __future__ import annotations

from ropecli.runtimes.record import AT_START_UP, Runtime, Version

RECORD = Runtime(
    name="vllm", label="vLLM", package="vllm",
    artefact="--hf-overrides JSON (the rope_parameters block, short_mscale = long_mscale) and the `vllm serve` line",
    reads="--hf-overrides rope_parameters (or the checkpoint's rope_scaling), --max-model-len",
    at_length="once at start-up: --max-model-len > original length selects long_factor for every request, short ones included",
    decoding="fixed at start-up: every step, prefill and decode, uses the same rotation; the KV cache stays consistent",
    rule=AT_START_UP, serves_dynamic=True,
    versions=(
        Version(">=0.11.1", "reads rope_parameters in --hf-overrides (transformers-5 naming)",
                "vLLM PR #28542, vllm/transformers_utils/config.py: patch_rope_parameters",
                older="older vLLM reads only rope_scaling: the rope_parameters override is ignored and the model is "
                      "served unscaled, silently"),
        Version(">=0.11.1", "longrope picks long_factor from max_model_len > original_max_position_embeddings",
                "vLLM PR #27431, phi3_long_rope_scaled_rope.py: Phi3LongRoPEScaledRotaryEmbedding.__init__"),
        Version("", "dynamic NTK: base fixed once at max_position_embeddings x factor",
                "dynamic_ntk_scaling_rope.py: DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache "
                "(formula per version: ropecli.export.vllm.dynamic_factors)"),
    ),
)
