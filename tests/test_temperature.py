"""Position temperatures (issue 49): what ropecli reads from a config is the query scale the loaded model applies, position
by position (Llama 4's temperature tuning on its NoPE layers, Mistral 4's beta on every layer); shown in headers and --json,
kept in exports."""

from __future__ import annotations

import json

import numpy as np
import torch
from typer.testing import CliRunner

from architectures import ARCHS, save_arch
from ropecli.cli.app import app
from ropecli.models.config import read_rope_config

ROW = {a.temperature: a for a in ARCHS if a.temperature}


def queries_seen(model, ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """The query each attention layer hands to its attention function (after any temperature), by layer index."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    seen = {}

    def capture(module, query, key, value, attention_mask, **kw):
        seen[module.layer_idx] = query.detach().clone()
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kw)

    ALL_ATTENTION_FUNCTIONS["capture-q"] = capture
    before = model.config._attn_implementation
    model.config._attn_implementation = "capture-q"
    try:
        with torch.no_grad():
            model(ids)
    finally:
        model.config._attn_implementation = before
        del ALL_ATTENTION_FUNCTIONS["capture-q"]
    return seen


def test_llama4_temperature_is_the_models_query_scale(tmp_path):
    from ropecli.models.load import load_model

    arch = ROW["llama4"]
    folder = save_arch(arch, tmp_path / "m")
    rope = read_rope_config(str(folder))
    n = 64  # floor_scale 8: the scale steps every 8 positions
    lm = load_model(str(folder), device="cpu", dtype="fp32")
    ids = torch.randint(2, 90, (1, n))
    on = queries_seen(lm.model, ids)
    for layer in lm.model.model.layers:
        layer.self_attn.attn_temperature_tuning = False
    off = queries_seen(lm.model, ids)
    nope = [i for i, layer in enumerate(lm.model.model.layers) if not layer.self_attn.use_rope]
    assert nope, "the row must have a NoPE layer"
    for i in range(len(lm.model.model.layers)):
        ratio = (on[i] / off[i]).mean(dim=(0, 1, 3)).double().numpy()  # (T,): the scale at each position
        want = rope.temperature.scale(np.arange(n)) if i in nope else np.ones(n)
        np.testing.assert_allclose(ratio, want, rtol=1e-5)
    assert want.max() > 1.2  # the test can fail: the scale moves within the window


def test_mistral4_temperature_is_transformers_own():
    from transformers.models.mistral4.modeling_mistral4 import get_llama_4_attn_scale

    t = read_rope_config_of(ROW["mistral4"])
    positions = torch.arange(300)[None]
    theirs = get_llama_4_attn_scale(positions, 0.1, 32).reshape(-1).double().numpy()
    np.testing.assert_allclose(t.scale(np.arange(300)), theirs, rtol=1e-6)  # transformers: float32
    assert theirs.max() > 1.2


def read_rope_config_of(arch):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        return read_rope_config(str(save_arch(arch, Path(d) / "m"))).temperature


def test_header_json_and_export_keep_the_temperature(tmp_path):
    folder = save_arch(ROW["mistral4"], tmp_path / "m")
    r = CliRunner().invoke(app, ["freqs", "--model", str(folder), "--k", "4", "--json"])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())
    assert "position temperature mistral4(beta=0.1, original_len=32) on every layer" in said
    out = json.loads(r.stdout)["temperature"]
    assert out["kind"] == "mistral4" and out["scale_at"]["128"] > 1.0
    r = CliRunner().invoke(app, ["export", "--model", str(folder), "--method", "native+yarn", "--len", "256", "--to", "hf",
                                 "--out", str(tmp_path / "hf")])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert "position temperature mistral4(beta=0.1, original_len=32) on every layer (the model's own" in said
    assert "transformers applies it from the rope block" in said
    r = CliRunner().invoke(app, ["export", "--model", str(folder), "--method", "native+yarn", "--len", "256", "--to", "vllm",
                                 "--out", str(tmp_path / "v.json")])
    assert r.exit_code == 0 and "no mapping was found upstream" in " ".join(r.output.split()), r.output
    block = json.loads((tmp_path / "hf" / "config.json").read_text())["rope_parameters"]
    assert block["llama_4_scaling_beta"] == 0.1 and block["original_max_position_embeddings"] == 32
