"""ropecli's vLLM plugin: the `vllm.general_plugins` entry point `ropecli` (pyproject.toml), which vLLM calls in every
process it starts, before it reads a model (vllm/plugins/__init__.py: load_general_plugins). It registers the class a
position-map folder names in config.json's `architectures` (`RopecliMapForCausalLM`, `maps.vllm_model`), by its
import path only, so registering costs no import of vLLM's model code. Without the plugin (ropecli not installed where
vLLM is, or `VLLM_PLUGINS` leaving `ropecli` out) no class has that name and vLLM refuses the folder; it never serves it
without its map (the folder's modeling file refuses vLLM's transformers fallback too: `map_modeling.
RopecliMapForCausalLM.is_backend_compatible`).
"""

from __future__ import annotations

from ropecli.deferred import deferred

vllm = deferred("vllm")

ARCHITECTURE = "RopecliMapForCausalLM"
MODEL_PATH = "ropecli.maps.vllm_model:RopecliMapForCausalLM"
# The vLLM classes whose attention `maps.vllm_model` changes, as checked in vLLM's engine (tests/test_vllm_engine.py):
# each calls `q, k = self.rotary_emb(positions, q, k)` then `self.attn(q, k, v)` with neox-style (rotate-half) RoPE
SERVED = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
VLLM_VERSIONS = ("0.32.",)  # the vLLM releases it was checked against (their attention and paged-cache interfaces)


def register() -> None:
    """Register the map folder's class with vLLM's model registry (idempotent: vLLM may call it more than once)."""
    if ARCHITECTURE not in vllm.ModelRegistry.get_supported_archs():
        vllm.ModelRegistry.register_model(ARCHITECTURE, MODEL_PATH)
