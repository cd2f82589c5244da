"""Sliding layers over their band of keys (`ropecli.models.banded_attention`): the same logits as the model's
own sdpa / eager attention everywhere (a prefill past the window, a cached continuation, one token, a left-padded batch,
generate), and no layer ever given a mask wider than its band where the model would build T x T."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    DynamicCache,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)

from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import bind
from ropecli.models import banded_attention
from ropecli.models.banded_attention import BLOCK, banded_model

from architectures import ARCHS, VOCAB, build_arch

WINDOW = 64


def _gemma3(impl: str):
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=WINDOW,
                           max_position_embeddings=256, layer_types=["sliding_attention", "sliding_attention",
                                                                     "full_attention", "sliding_attention"])
    model = Gemma3ForCausalLM(cfg).eval()
    model.config._attn_implementation = impl
    return model


def _mistral():
    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, sliding_window=WINDOW,
                        max_position_embeddings=256)
    model = MistralForCausalLM(cfg).eval()
    model.config._attn_implementation = "sdpa"
    return model


def _runs(model, ids, pad):
    """Every way a model is run: a prefill past the window, a cached continuation of many tokens then one, and a
    left-padded row (its own positions from the mask)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = model(ids).logits
        cache = DynamicCache(config=model.config)
        parts = [model(ids[:, a:b], past_key_values=cache, use_cache=True).logits
                 for a, b in ((0, 700), (700, ids.shape[1] - 1), (ids.shape[1] - 1, ids.shape[1]))]
        mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), torch.ones(1, 300, dtype=torch.long)], 1)
        padded = model(torch.cat([torch.zeros(1, pad, dtype=torch.long), ids[:, :300]], 1), attention_mask=mask,
                       position_ids=(mask.cumsum(-1) - 1).clamp_min(0)).logits[:, pad:]
    return full, torch.cat(parts, 1), padded


@pytest.mark.parametrize("make", [lambda: _gemma3("sdpa"), lambda: _gemma3("eager"), _mistral],
                         ids=["gemma3-sdpa", "gemma3-eager", "mistral-sdpa"])
def test_banded_sliding_layers_give_the_models_own_logits(make):
    model = make()
    ids = torch.randint(0, 300, (1, 1100))
    reference = _runs(model, ids, pad=5)
    assert banded_model(model) is not None
    for got, want in zip(_runs(model, ids, pad=5), reference):
        assert (got - want).abs().max() < 1e-4


def test_no_sliding_layer_is_given_more_than_its_band(monkeypatch):
    """The widest mask a layer receives past the window is (BLOCK, BLOCK + window - 1), not T x T; removing the banded
    mask function hands every sliding layer the model's (T, T) mask."""
    model = _gemma3("sdpa")
    banded_model(model)
    widest = []
    own = banded_attention.own_function

    def spy(module, name):
        fn = own(module, name)

        def call(module, q, k, v, mask=None, **kw):
            widest.append(0 if mask is None else mask.shape[-2] * mask.shape[-1])
            return fn(module, q, k, v, mask, **kw)

        return call

    monkeypatch.setattr(banded_attention, "own_function", spy)
    T = 3 * BLOCK
    with torch.no_grad():
        model(torch.randint(0, 300, (1, T)))
    assert max(widest) <= BLOCK * (BLOCK + WINDOW - 1) < T * T


def test_a_model_without_sliding_layers_is_left_as_it_is():
    model = LlamaForCausalLM(LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2))
    model.config._attn_implementation = "sdpa"
    assert banded_model(model) is None and model.config._attn_implementation == "sdpa"


def test_a_position_map_on_a_banded_model_runs_its_sliding_layers_banded():
    """The map's unmapped sliding layers run the banded implementation (the one the map found), and the identity map
    still equals the model."""
    model = _gemma3("sdpa")
    ids = torch.randint(0, 300, (1, 900))
    with torch.no_grad():
        want = model(ids).logits
        banded_model(model)
        with mapped(model, bind("none", {}), length=256):
            got = model(ids).logits
    assert (got - want).abs().max() < 1e-4
    assert model.config._attn_implementation == banded_attention.BANDED["sdpa"]


def _sliding_archs():
    return [a for a in ARCHS if a.kwargs.get("sliding_window")]


@pytest.mark.parametrize("arch", _sliding_archs(), ids=lambda a: a.name)
def test_every_sliding_family_of_the_matrix_gives_its_own_logits_banded(arch):
    """Every architecture of the matrix with a window (Gemma 2/3/4, gpt-oss, OLMo 3, EXAONE 4 …), prefilled past it and
    continued through the cache: banded = its own attention. DeepSeek V4 (compressed layers extend the mask) is left as
    shipped."""
    model = build_arch(arch)  # its own implementation: sdpa, eager where sdpa cannot (Gemma 2's soft-capping)
    ids = torch.randint(2, VOCAB, (1, 90), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model(ids).logits
        if banded_model(model) is None:
            assert "compressed" in arch.name or "chunked" in arch.name, arch.name
            return
        got = model(ids).logits
        cache = DynamicCache(config=model.config)
        parts = torch.cat([model(ids[:, :50], past_key_values=cache, use_cache=True).logits,
                           model(ids[:, 50:], past_key_values=cache, use_cache=True).logits], 1)
    assert (got - want).abs().max() < 1e-4
    assert (parts - want).abs().max() < 1e-4


@pytest.mark.parametrize("family", ["qwen2_moe", "phimoe"])
def test_a_family_that_keeps_the_window_to_its_mask_is_banded_by_its_layer_type(family):
    """Qwen2-MoE and PhiMoE build the sliding mask without handing the window to the attention function: the layer's
    window comes from its config (`layer_window`), so banding still keeps it."""
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(family, vocab_size=100, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                               shared_expert_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, num_experts=2, num_local_experts=2, num_experts_per_tok=1,
                               sliding_window=WINDOW // 4, use_sliding_window=True, max_window_layers=2,
                               max_position_embeddings=256)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.config._attn_implementation = "sdpa"
    ids = torch.randint(0, 100, (1, 120))
    with torch.no_grad():
        want = model(ids).logits
        assert banded_model(model) is not None
        got = model(ids).logits
    assert (got - want).abs().max() < 1e-4
