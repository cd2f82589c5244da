"""ropecli's in-place RoPE patching against transformers models built with the equivalent rope_parameters."""

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from ropecli.errors import RopeCliError
from ropecli.models.chunked_scoring import naive_window_nll, window_nll
from ropecli.models.config import choose_layer_types
from ropecli.models.patch import (
    add_log_n_hooks,
    apply_schedule,
    find_rotary_slots,
    layer_types_of,
    log_n_scale,
    restore,
    select_slots,
)
from ropecli.rope.factor_files import rope_parameters_block
from ropecli.rope.geometry import Geometry
from ropecli.rope.methods import compute_schedule

from tiny_models import VOCAB, L, base_of, build, rotary_dim


def all_slots(model, rope_layers=None):
    """The slots ropecli scales for --rope-layers (one parse: config.choose_layer_types)."""
    slots = find_rotary_slots(model)
    return select_slots(slots, choose_layer_types(layer_types_of(slots), rope_layers))

FAMILIES = ["llama", "qwen2", "gpt_neox", "gemma3"]
K = 4.0


def ids_of(length, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, length), generator=g)


def patched(model, method, **params):
    d = rotary_dim_of(model)
    geom = Geometry(d, all_slots(model)[0].base, L, K)
    sched = compute_schedule(method, geom, **params)
    slots = all_slots(model)
    for s in slots:
        apply_schedule(s, sched.factors, sched.attention_factor)
    return slots, geom, sched


def rotary_dim_of(model):
    return all_slots(model)[0].rotary_dim


def reference(family, rope_parameters, source, max_pos=None):
    ref = build(family, rope_parameters)
    if max_pos:
        ref.config.max_position_embeddings = max_pos
    ref.load_state_dict(source.state_dict())
    return ref


def logits(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_slots_read_geometry(family):
    model = build(family)
    slots = all_slots(model)
    assert slots[0].rotary_dim == rotary_dim(family)
    assert slots[0].base == base_of(family)
    if family == "gemma3":
        assert [s.layer_type for s in slots] == ["full_attention"]
        assert {s.layer_type for s in all_slots(model, "all")} == {"full_attention", "sliding_attention"}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("method,rope_parameters", [
    ("pi", {"rope_type": "linear", "factor": K}),
    ("yarn", {"rope_type": "yarn", "factor": K, "original_max_position_embeddings": L}),
    ("llama3", {"rope_type": "llama3", "factor": K, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": L}),
])
def test_patched_equals_native(family, method, rope_parameters):
    model = build(family)
    ids = ids_of(3 * L)
    ref = reference(family, rope_parameters, model)
    patched(model, method)
    torch.testing.assert_close(logits(model, ids), logits(ref, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_mixed_equals_exported_longrope(family):
    model = build(family)
    ids = ids_of(3 * L)
    _, geom, sched = patched(model, "mixed", b=0.625)
    partial = 0.5 if family == "gpt_neox" else 1.0
    block = rope_parameters_block(geom, sched, partial_rotary_factor=partial)
    ref = reference(family, block["rope_parameters"], model, max_pos=block["max_position_embeddings"])
    assert not torch.allclose(logits(build(family), ids), logits(ref, ids), atol=1e-3)  # the schedule matters here
    torch.testing.assert_close(logits(model, ids), logits(ref, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_restore_is_exact(family):
    model = build(family)
    ids = ids_of(2 * L)
    before = logits(model, ids)
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    slots, _, _ = patched(model, "yarn")
    assert not torch.equal(logits(model, ids), before)
    for s in slots:
        restore(s)
    for n, b in model.named_buffers():
        assert torch.equal(b, buffers[n]), n
    assert torch.equal(logits(model, ids), before)


@pytest.mark.parametrize("family", FAMILIES)
def test_log_n_changes_nothing_within_L(family):
    model = build(family)
    short, long = ids_of(L), ids_of(3 * L)
    base_short, base_long = logits(model, short), logits(model, long)
    hooks = add_log_n_hooks(model, L, ["full_attention"] if family == "gemma3" else None)
    try:
        assert torch.equal(logits(model, short), base_short)
        after = logits(model, long)
        assert torch.equal(after[:, :L], base_long[:, :L])  # causal: positions within L untouched
        assert not torch.allclose(after[:, L:], base_long[:, L:], atol=1e-4)
    finally:
        for h in hooks:
            h.remove()
    assert torch.equal(logits(model, long), base_long)


def test_log_n_scale_values():
    s = log_n_scale(4096, 512)
    assert s[0] == 1 and s[511] == 1  # n = 1 … 512: unchanged
    assert s[4095].item() == pytest.approx(np.log(4096) / np.log(512))


def test_log_n_equals_scaled_queries_by_hand():
    """Hooked model == the same attention computed with q multiplied by max(1, log_L n)."""
    model = build("llama")
    model.config._attn_implementation = "eager"
    ids = ids_of(3 * L)
    captured = {}
    attn = model.model.layers[0].self_attn
    h = attn.q_proj.register_forward_hook(lambda m, i, o: captured.setdefault("q", o.clone()))
    logits(model, ids)
    h.remove()
    hooks = add_log_n_hooks(model, L, None)
    h = attn.q_proj.register_forward_hook(lambda m, i, o: captured.setdefault("q_scaled", o.clone()))
    logits(model, ids)
    h.remove()
    for x in hooks:
        x.remove()
    # the capturing hook runs after ropecli's, so it sees the scaled queries
    expect = captured["q"] * log_n_scale(3 * L, L).view(1, -1, 1)
    torch.testing.assert_close(captured["q_scaled"], expect)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("chunk", [None, 7, 1000])
def test_chunked_loss_equals_naive(family, chunk):
    model = build(family)
    ids = ids_of(2 * L + 3)
    nll, n, _ = window_nll(model, ids, chunk_tokens=chunk)
    ref, n_ref = naive_window_nll(model, ids)
    assert n == n_ref == 2 * L + 2
    assert nll == pytest.approx(ref, rel=1e-5)


def test_score_last():
    model = build("llama")
    ids = ids_of(L)
    full, n, _ = window_nll(model, ids)
    last, m, _ = window_nll(model, ids, score_last=10)
    assert m == 10 and n == L - 1 and last < full


def test_model_without_rope_is_refused():
    with pytest.raises(RopeCliError, match="no rotary position embedding"):
        find_rotary_slots(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)))
