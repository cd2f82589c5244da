"""p-RoPE (Gemma 4's global layers, transformers' `proportional`): the pairs past R sit at frequency 0, the exponent runs
over the whole head, and every schedule leaves the zero pairs at 0 (shown unscaled, status "no rotation")."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from ropecli.cli.console import jsonable
from ropecli.errors import RopeCliError
from ropecli.models.config import rope_from_config
from ropecli.rope.freqs import frequency_report
from ropecli.rope.geometry import Geometry, critical_pair
from ropecli.rope.methods import REGISTRY, compute_schedule
from ropecli.tuning.advise_exports import served_winner
from ropecli.tuning.standings import Standings

GEMMA4 = {"model_type": "gemma4_text", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "num_hidden_layers": 2,
          "max_position_embeddings": 64, "layer_types": ["sliding_attention", "full_attention"],
          "per_layer_config": {"1": {"head_dim": 32}}, "sliding_window": 16,
          "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                              "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                 "rope_theta": 1e6}}}


def test_the_config_reads_as_transformers_builds_it():
    rope = rope_from_config("g", GEMMA4, None)
    assert (rope.rotary_dim, rope.rotating_pairs, rope.base, rope.shipped) == (32, 4, 1e6, None)
    cfg = AutoConfig.for_model("gemma4_text", **{k: v for k, v in GEMMA4.items() if k not in ("model_type", "per_layer_config")},
                               global_head_dim=32)
    theirs, _ = ROPE_INIT_FUNCTIONS["proportional"](cfg.per_layer_config["full_attention"], torch.device("cpu"),
                                                    layer_type="full_attention")
    np.testing.assert_allclose(rope.geometry(1.0).inv_freq(), theirs.double().numpy(), rtol=1e-6)
    sliding = rope_from_config("g", GEMMA4, "sliding_attention")  # the sliding layers: plain RoPE on head_dim 16
    assert (sliding.rotary_dim, sliding.rotating_pairs) == (16, None)
    scaled = rope_from_config("g", {**GEMMA4, "rope_parameters": {**GEMMA4["rope_parameters"], "full_attention": {
        **GEMMA4["rope_parameters"]["full_attention"], "factor": 8.0}}}, None)
    assert scaled.shipped.method == "pi" and scaled.shipped.factor == 8.0  # transformers divides every pair by it


@pytest.mark.parametrize("method", [m for m in REGISTRY if m not in ("longrope",)])
def test_every_method_leaves_the_zero_pairs_at_zero(method):
    geom = Geometry(32, 1e6, 4096, 8.0, rotating_pairs=4)
    s = compute_schedule(method, geom)
    assert np.all(s.factors[4:] == 1.0) and np.all(np.isfinite(s.factors)), s.factors
    assert np.all(s.scaled_inv_freq(geom)[4:] == 0.0)
    plain = compute_schedule(method, Geometry(32, 1e6, 4096, 8.0))  # the rotating pairs: as on the whole head
    np.testing.assert_allclose(s.factors[:4], plain.factors[:4])


def test_the_report_says_no_rotation_and_stays_valid_json():
    geom = Geometry(32, 1e6, 32, 4.0, rotating_pairs=4)
    report = frequency_report(geom, compute_schedule("yarn", geom))
    assert [p["status"] for p in report["pairs"][4:]] == ["no rotation"] * 12

    said = json.loads(json.dumps(jsonable(report), allow_nan=False))  # what --json prints: inf wavelengths as null
    assert said["pairs"][-1]["wavelength"] is None and said["rotating_pairs"] == 4
    assert critical_pair(geom) == 3  # the zero pairs never turn, but they are not the critical pair


def test_a_p_rope_geometry_must_rotate_something():
    with pytest.raises(RopeCliError, match="rotates at least one pair"):
        Geometry(32, 1e6, 32, 4.0, rotating_pairs=0)


def test_advise_exports_to_each_runtime_the_best_candidate_it_serves_on_p_rope():
    """The winner (dynamic) has no p-RoPE config in any runtime: transformers gets the best-ranked `pi` (its
    'proportional' block carries one factor), vLLM the unscaled model as shipped; each with the line saying why."""
    rope = rope_from_config("g", {**GEMMA4, "max_position_embeddings": 32}, None)
    geom = rope.geometry(4.0)
    row = lambda name, rank: {"method": name, "params": {}, "log_n": False, "candidate": name, "rank": rank,  # noqa: E731
                              "excluded": False}
    standings = Standings.from_json({"winner": "dynamic", "winner_spec": {"method": "dynamic", "params": {}, "log_n": False},
                                     "rows": [row("dynamic", 1), row("yarn", 2), row("pi", 3), row("none", 4)]})
    hf = served_winner(standings, "transformers", geom, rope)
    assert hf.candidate == "pi" and "divides every pair by one factor" in hf.instead
    vllm = served_winner(standings, "vllm", geom, rope)
    assert vllm.candidate == "none" and "Gemma4RotaryEmbedding" in vllm.instead
    plain = rope_from_config("l", {k: v for k, v in GEMMA4.items() if k != "rope_parameters"}, None)
    assert served_winner(standings, "vllm", plain.geometry(4.0), plain) is standings.winner  # not p-RoPE: the winner
