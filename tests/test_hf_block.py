"""`ropecli schedule --format hf` loads into a transformers model unchanged and gives ropecli's frequencies."""

import json

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.rope.geometry import Geometry
from ropecli.rope.methods import compute_schedule


@pytest.mark.parametrize("method,extra", [("mixed", ["--b", "0.625"]), ("ntk-fixed", []), ("yarn", [])])
def test_hf_block_gives_ropecli_frequencies(method, extra):
    r = CliRunner().invoke(app, ["schedule", "--d", "32", "--base", "10000", "--train-len", "256", "--k", "8",
                                 "--method", method, *extra, "--format", "hf"])
    assert r.exit_code == 0, r.output
    block = json.loads(r.output)
    cfg = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, head_dim=32, **block)
    model = LlamaForCausalLM(cfg)
    rotary = model.model.rotary_emb
    geom = Geometry(32, 10000.0, 256, 8.0)
    ours = compute_schedule(method, geom, **({"b": 0.625} if method == "mixed" else {}))
    # transformers swaps in long_factor above original_max_position_embeddings
    x = torch.zeros(1, 4, 32)
    pos = torch.arange(2048 - 4, 2048)[None]
    rotary(x, pos)
    np.testing.assert_allclose(rotary.inv_freq.double().numpy(), ours.scaled_inv_freq(geom), rtol=1e-6)
    assert rotary.attention_scaling == pytest.approx(ours.attention_factor, rel=1e-12)
