"""What a GGUF says of the 2026 families beyond one RoPE, read as llama.cpp reads it (src/models/*.cpp
`load_arch_hparams`, src/llama-model.cpp `load_hparams`, the converters in conversion/*.py):

- p-RoPE (Gemma 4's global layers): the `rope_freqs` tensor divides the pairs that do not rotate by 1e30
  (conversion/gemma.py `generate_extra_tensors`: [1.0] x n_rot + [1e30] x n_unrot): those pairs sit at frequency 0;
- Llama 4: llama.cpp hard-codes chunked attention of 8,192 tokens on the RoPE layers, every 4th layer NoPE
  (`n_no_rope_layer_step`), and the temperature tuning 0.1 / 8,192 on the NoPE layers (src/models/llama4.cpp); a GGUF
  with `attention.sliding_window` 0 has every layer with RoPE (MobileLLM-style);
- Mistral 4 / DeepSeek-2 family: `attention.temperature_scale` (beta) and `attention.temperature_length` (the length it
  counts from), applied to every layer's query after RoPE (src/models/deepseek2.cpp; conversion/mistral.py writes beta);
- HunYuan: `rope.scaling.alpha` (HunYuan-VL writes the raw base with it; the dense/MoE converters pre-scale the base).
"""

from __future__ import annotations

from typing import Any

from ropecli.models.layer_kinds import LayerKinds, read_layer_kinds
from ropecli.rope.temperature import Temperature

P_ROPE_ZERO = 1e29  # a rope_freqs divisor this large marks a pair that does not rotate (llama.cpp writes 1e30)
LLAMA4_CHUNK, LLAMA4_NOPE_STEP, LLAMA4_FLOOR, LLAMA4_SCALE = 8192, 4, 8192.0, 0.1  # src/models/llama4.cpp


def rotating_pairs(freqs: list[float] | None) -> int | None:
    """p-RoPE's rotating pairs from a rope_freqs tensor (None: every pair rotates, or no tensor)."""
    if not freqs:
        return None
    n = sum(1 for f in freqs if f < P_ROPE_ZERO)
    return n if n < len(freqs) else None


def _llama4_nope(meta: dict[str, Any], arch: str) -> bool:
    return arch == "llama4" and meta.get(f"{arch}.attention.sliding_window") != 0


def gguf_layer_kinds(meta: dict[str, Any], arch: str) -> LayerKinds | None:
    """Llama 4's chunked and NoPE layers as llama.cpp lays them out; None for the other architectures."""
    n = meta.get(f"{arch}.block_count")
    if not _llama4_nope(meta, arch) or not isinstance(n, int):
        return None
    nope = [(i + 1) % LLAMA4_NOPE_STEP == 0 for i in range(n)]
    return read_layer_kinds({"num_hidden_layers": n, "attention_chunk_size": LLAMA4_CHUNK,
                             "layer_types": ["full_attention" if x else "chunked_attention" for x in nope],
                             "no_rope_layers": [0 if x else 1 for x in nope]})


def gguf_temperature(meta: dict[str, Any], arch: str) -> Temperature | None:
    """The position temperature llama.cpp applies for this GGUF (None: none)."""
    if _llama4_nope(meta, arch):
        return Temperature("llama4", (("attn_scale", LLAMA4_SCALE), ("floor_scale", LLAMA4_FLOOR)), "the NoPE layers")
    beta, length = meta.get(f"{arch}.attention.temperature_scale"), meta.get(f"{arch}.attention.temperature_length")
    if beta and length:
        return Temperature("mistral4", (("beta", float(beta)), ("original_len", float(length))), "every layer")
    return None


def gguf_alpha_block(meta: dict[str, Any], arch: str) -> dict | None:
    """HunYuan's NTK-alpha as a rope block (`rope.scaling.alpha` > 0), None where the GGUF has none."""
    alpha = meta.get(f"{arch}.rope.scaling.alpha")
    return {"rope_type": "dynamic", "alpha": float(alpha)} if alpha and float(alpha) > 0 else None


SWA_PATTERN = {"gemma2": 2, "cohere2": 4, "gemma3n": 5, "gemma3": 6}  # src/llama-model.cpp load_hparams: set_swa_pattern(n)


def gguf_layer_types(meta: dict[str, Any], arch: str) -> list[str] | None:
    """Per layer, sliding_attention or full_attention, for the families whose GGUF states a window and llama.cpp
    lays the sliding layers out by a fixed pattern (`llama_hparams::set_swa_pattern(n)`: layer il slides where
    il % n < n - 1, every n-th layer is global; transformers' configs say the same: Gemma 3's sliding_window_pattern 6);
    None where the GGUF has no window or the family no such pattern."""
    n, window, every = meta.get(f"{arch}.block_count"), meta.get(f"{arch}.attention.sliding_window"), SWA_PATTERN.get(arch)
    if not (isinstance(n, int) and window and every):
        return None
    return ["sliding_attention" if i % every < every - 1 else "full_attention" for i in range(n)]


def sliding_base(meta: dict[str, Any], arch: str) -> float | None:
    """`rope.freq_base_swa` (Gemma 4's sliding layers), None where the GGUF does not state it."""
    base = meta.get(f"{arch}.rope.freq_base_swa")
    return float(base) if base else None
