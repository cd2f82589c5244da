"""transformers' ROPE_INIT_FUNCTIONS is the oracle for every method it has."""

import itertools
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from ropecli.rope.geometry import Geometry
from ropecli.rope.methods import compute_schedule

GRID = list(itertools.product([64, 80, 128, 256], [1e4, 5e5, 1e6], [1.0, 2.0, 8.0, 32.0], [2048, 4096, 8192]))


def hf_config(d, base, L, rope_parameters, max_pos=None):
    return LlamaConfig(hidden_size=d * 2, num_attention_heads=2, head_dim=d, max_position_embeddings=max_pos or L,
                       rope_parameters={"rope_theta": base, **rope_parameters})


def oracle(rope_type, cfg, **kwargs):
    """transformers' own function, run with `torch.float` meaning float64 so that its float32
    rounding (up to ~2e-6 on blended llama3 pairs) does not mask or fake a difference."""
    saved = torch.float
    torch.float = torch.float64
    try:
        return ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", **kwargs)
    finally:
        torch.float = saved


def assert_matches(ours, geom, hf_inv, hf_att):
    hf_inv = hf_inv.double().numpy()
    np.testing.assert_allclose(ours.scaled_inv_freq(geom), hf_inv, rtol=1e-6, atol=0)
    assert ours.attention_factor == pytest.approx(hf_att, rel=1e-6)


@pytest.mark.parametrize("d,base,k,L", GRID)
def test_linear(d, base, k, L):
    geom = Geometry(d, base, L, k)
    inv, att = oracle("linear", hf_config(d, base, L, {"rope_type": "linear", "factor": k}))
    assert_matches(compute_schedule("linear", geom), geom, inv, att)


@pytest.mark.parametrize("d,base,k,L", GRID)
def test_dynamic_at_several_lengths(d, base, k, L):
    geom = Geometry(d, base, L, k)
    cfg = hf_config(d, base, L, {"rope_type": "dynamic", "factor": k})
    for seq_len in [L // 2, L, L + 1, 3 * L, int(k * L)]:
        inv, att = oracle("dynamic", cfg, seq_len=seq_len)
        assert_matches(compute_schedule("dynamic", geom, seq_len=seq_len), geom, inv, att)


@pytest.mark.parametrize("d,base,k,L", GRID)
def test_yarn(d, base, k, L):
    geom = Geometry(d, base, L, k)
    cfg = hf_config(d, base, L, {"rope_type": "yarn", "factor": k, "original_max_position_embeddings": L}, max_pos=int(k * L))
    inv, att = oracle("yarn", cfg)
    assert_matches(compute_schedule("yarn", geom), geom, inv, att)


def test_yarn_with_betas_and_mscale():
    geom = Geometry(128, 1e4, 4096, 16)
    rp = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096, "beta_fast": 16.0,
          "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 1.0}
    inv, att = oracle("yarn", hf_config(128, 1e4, 4096, rp, max_pos=65536))
    ours = compute_schedule("yarn", geom, beta_fast=16, beta_slow=2, mscale=0.707, mscale_all_dim=1.0)
    assert_matches(ours, geom, inv, att)


@pytest.mark.parametrize("d,base,k,L", GRID)
def test_llama3(d, base, k, L):
    geom = Geometry(d, base, L, k)
    rp = {"rope_type": "llama3", "factor": k, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": L}
    inv, att = oracle("llama3", hf_config(d, base, L, rp, max_pos=int(k * L)))
    assert_matches(compute_schedule("llama3", geom), geom, inv, att)


@pytest.mark.parametrize("d,base,k,L", GRID)
def test_longrope(d, base, k, L):
    geom = Geometry(d, base, L, k)
    factors = np.linspace(1.0, k, d // 2) * (1 + 0.1 * np.sin(np.arange(d // 2)))
    rp = {"rope_type": "longrope", "factor": k, "long_factor": factors.tolist(), "short_factor": [1.0] * (d // 2),
          "original_max_position_embeddings": L}
    inv, att = oracle("longrope", hf_config(d, base, L, rp, max_pos=int(k * L)), seq_len=int(k * L) + 1)
    assert_matches(compute_schedule("longrope", geom, factors=factors), geom, inv, att)


def test_default_rope_matches_none():
    geom = Geometry(128, 5e5, 8192, 4)
    emb = LlamaRotaryEmbedding(hf_config(128, 5e5, 8192, {"rope_type": "default"}))
    np.testing.assert_allclose(compute_schedule("none", geom).scaled_inv_freq(geom), emb.inv_freq.double().numpy(), rtol=1e-6)
    assert math.isclose(emb.attention_scaling, 1.0)
