"""Position maps on every multi-head latent attention (MLA) family transformers 5 ships: tiny random models
built from each config class, the rope part of each head (its last qk_rope_head_dim dims, the shared k_rot) rotated per
region, the latent part as is. The identity map is the model; Self-Extend (G = 2, W = 8) leaves the first W positions'
logits as they are and changes the later ones. The families a map cannot run on are one line: DeepSeek V2's complex
rotary, DeepSeek Sparse Attention's indexed layers, Kimi Linear's NoPE MLA."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers
from transformers import AutoConfig
from transformers.models.auto import modeling_auto
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from ropecli.errors import RopeCliError
from ropecli.maps.mapped_attention import map_refusal, mapped
from ropecli.maps.position_maps import bind

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8,
            qk_nope_head_dim=8, v_head_dim=8, n_routed_experts=2, num_experts_per_tok=1, n_shared_experts=1,
            first_k_dense_replace=1, n_group=1, topk_group=1, max_position_embeddings=64, num_local_experts=2,
            num_experts=2, index_n_heads=2, index_head_dim=16, index_topk=8, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)
MAPPED = ["deepseek_v3", "sarvam_mla", "mistral4", "glm4_moe_lite", "minicpm3", "youtu", "axk1"]
REFUSED = {"deepseek_v2": "complex numbers", "deepseek_v32": "DeepSeek Sparse Attention",
           "glm_moe_dsa": "DeepSeek Sparse Attention", "kimi_linear": "no rotary position embedding"}


def tiny(family: str):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = AutoConfig.for_model(family, **TINY)
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        # The class by its static name, not AutoModelForCausalLM.from_config: a map folder loaded earlier in this
        # process (trust_remote_code) registers its own class for the config's type in the auto mapping, and Mistral 4
        # has no auto entry of its own.
        name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(family) or next(
            a for a in dir(transformers) if a.lower().startswith(family.replace("_", "")) and a.endswith("ForCausalLM"))
        model = getattr(transformers, name)(cfg)
    model.config._attn_implementation = "sdpa"
    return model.eval()


@pytest.mark.parametrize("family", MAPPED)
def test_every_mla_family_runs_a_map(family):
    model = tiny(family)
    assert map_refusal(model) is None
    ids = torch.randint(3, 128, (1, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model(ids).logits
        with mapped(model, bind("none", {})):
            same = model(ids).logits
        with mapped(model, bind("selfextend", {"G": 2, "W": 8})):
            extended = model(ids).logits
    assert (same - plain).abs().max() < 1e-4
    assert (extended[:, :8] - plain[:, :8]).abs().max() < 1e-4  # within W: true positions
    assert (extended[:, 8:] - plain[:, 8:]).abs().max() > 1e-6  # past W: the grouped positions


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_the_mla_families_a_map_cannot_run_on_are_one_line(family):
    why = None
    try:
        why = map_refusal(tiny(family))
    except RopeCliError as exc:  # Kimi Linear: no RoPE at all, said when its rotary slots are looked for
        why = str(exc)
    assert why is not None and REFUSED[family] in why and "\n" not in why


def test_a_remote_class_registered_earlier_in_the_process_does_not_replace_the_family(monkeypatch):
    """A map folder loaded with trust_remote_code registers its class for the config's type in transformers' auto
    mapping, process-wide (the CI failure of stop 97: a later Mistral 4 built here became the folder's class)."""
    class Planted(torch.nn.Module):
        pass

    cfg = AutoConfig.for_model("mistral4", **TINY).get_text_config()
    extra = dict(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING._extra_content)
    monkeypatch.setattr(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING, "_extra_content", extra | {type(cfg): Planted})
    assert type(tiny("mistral4")).__name__ == "Mistral4ForCausalLM"
