"""What each runtime does with a model's position temperature when ropecli exports a schedule for it: one line per
export. ropecli changes frequencies only; the temperature stays the model's, and whether the runtime applies it is
the runtime's (read in each one's source through the search index, late 2026; docs/architectures.md has the table).
"""

from __future__ import annotations

from ropecli.models.config import ModelRope

# (temperature kind, runtime) -> what that runtime does with it
APPLIED = {
    ("llama4", "transformers"): "applies it from config.json (attn_temperature_tuning, floor_scale, attn_scale: "
                                "Llama4TextAttention.forward), kept as shipped",
    ("llama4", "vllm"): "applies it from the config (Llama4Attention._get_attn_scale, NoPE layers from no_rope_layers)",
    ("llama4", "sglang"): "applies the same formula, NoPE on every 4th layer hard-coded (models/llama4.py)",
    ("llama4", "llamacpp"): "applies 0.1 and 8192 hard-coded (src/models/llama4.cpp): other values in the config are not "
                            "served",
    ("mistral4", "transformers"): "applies it from the rope block (llama_4_scaling_beta and its "
                                  "original_max_position_embeddings: get_llama_4_attn_scale), kept as shipped",
    ("mistral4", "vllm"): "applies config.llama_4_scaling of Mistral's native format (_get_llama_4_scaling); from an HF "
                          "config's llama_4_scaling_beta no mapping was found upstream: check that your version applies it",
    ("mistral4", "sglang"): "applies config.llama_4_scaling (native format); the HF key as for vLLM",
    ("mistral4", "llamacpp"): "applies attention.temperature_scale and attention.temperature_length from the GGUF "
                              "(src/models/deepseek2.cpp), kept in the export",
}


def temperature_line(target: ModelRope, runtime: str) -> str | None:
    """`position temperature llama4(…): vllm applies it …`; None for a model without one."""
    t = target.temperature
    if t is None:
        return None
    said = APPLIED.get((t.kind, runtime), "ropecli has not read whether it applies it")
    return f"position temperature {t.label} on {t.layers} (the model's own; ropecli changes frequencies only): {runtime} {said}"
