"""Position temperatures: what ropecli reads from a config is the query scale the loaded model applies, position
by position (Llama 4's temperature tuning on its NoPE layers, Mistral 4's beta on every layer); shown in headers and --json,
kept in exports."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.mistral4.modeling_mistral4 import get_llama_4_attn_scale
from typer.testing import CliRunner

from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.models.config import read_rope_config
from ropecli.models.position_temperature import position_temperature

from architectures import ARCHS, save_arch

ROW = {a.temperature: a for a in ARCHS if a.temperature}


def queries_seen(model, ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """The query each attention layer hands to its attention function (after any temperature), by layer index."""
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
    t = read_rope_config_of(ROW["mistral4"])
    positions = torch.arange(300)[None]
    theirs = get_llama_4_attn_scale(positions, 0.1, 32).reshape(-1).double().numpy()
    np.testing.assert_allclose(t.scale(np.arange(300)), theirs, rtol=1e-6)  # transformers: float32
    assert theirs.max() > 1.2


def read_rope_config_of(arch):
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


# --- a changed temperature -------------------------

def test_a_changed_temperature_is_the_query_scale_the_model_then_applies(tmp_path):
    """`--param attn_scale=…` / `beta=…` puts the model at that temperature: the query each layer sees is scaled by the
    changed Temperature's s(n), position by position; restored after the block."""
    for kind, change in (("llama4", ("attn_scale", 0.7)), ("mistral4", ("beta", 0.9))):
        folder = save_arch(ROW[kind], tmp_path / kind)
        shipped = read_rope_config(str(folder)).temperature
        changed = shipped.but((change,))
        lm = load_model(str(folder), device="cpu", dtype="fp32")
        n = 96
        ids = torch.randint(2, 90, (1, n))
        before = queries_seen(lm.model, ids)
        with position_temperature(lm.model, changed):
            after = queries_seen(lm.model, ids)
        again = queries_seen(lm.model, ids)
        for i in sorted(before):  # the first layer it scales (the layers after it see other hidden states too)
            torch.testing.assert_close(again[i], before[i])  # restored
            ratio = (after[i] / before[i]).mean(dim=(0, 1, 3)).double().numpy()
            if not np.allclose(ratio, 1.0):  # (Llama 4's RoPE layers: unscaled)
                np.testing.assert_allclose(ratio, changed.scale(np.arange(n)) / shipped.scale(np.arange(n)), rtol=1e-5)
                break
        else:
            raise AssertionError(f"{kind}: no layer's queries moved")


def test_a_changed_temperature_is_measured_cached_and_searched(tmp_path):
    folder = save_arch(ROW["llama4"], tmp_path / "m")
    base = ["ppl", "--model", str(folder), "--method", "native", "--len", "96", "--samples", "2", "--json", "--cache-dir", str(tmp_path / "c")]

    def ppl(*extra):
        r = CliRunner().invoke(app, [*base, *extra])
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["results"][0]

    own, same, changed = ppl(), ppl("--param", "attn_scale=0.1"), ppl("--param", "attn_scale=0.8")
    assert same["ppl"] == own["ppl"]  # the shipped value is the model as loaded
    assert changed["ppl"] != own["ppl"] and changed["label"] == "native+temperature(attn_scale=0.8)"
    assert changed["temperature"] == {"attn_scale": 0.8} and not changed["cached"]
    assert ppl("--param", "attn_scale=0.8")["cached"]  # its own cache key
    r = CliRunner().invoke(app, ["search", "--model", str(folder), "--method", "native", "--vary", "attn_scale",
                                 "--len", "96", "--samples", "2", "--budget", "4", "--json", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["start"] == {"attn_scale": 0.1}  # from the model's own value
    assert all("temperature(attn_scale=" in e["label"] for e in out["evaluations"])


def test_a_temperature_on_a_model_without_one_is_one_line(tmp_path):
    for args in (["ppl", "--param", "beta=0.3"], ["search", "--method", "yarn", "--vary", "beta", "--budget", "4"]):
        r = CliRunner().invoke(app, [*args, "--len", "512", "--samples", "1", "--cache-dir", str(tmp_path)])
        assert r.exit_code == 1
        assert r.output.strip().splitlines()[-1] == ("Error: beta changes a position temperature, and this model ships "
                                                    "none (Llama 4 and Mistral 4 do); drop it"), r.output
    r = CliRunner().invoke(app, ["ppl", "--param", "beta=-1", "--len", "512"])
    assert r.exit_code == 1 and "beta=-1 is outside [0, 10]" in r.output


def test_a_changed_temperature_is_exported_where_the_runtime_reads_it(tmp_path):
    folder = save_arch(ROW["mistral4"], tmp_path / "m")
    common = ["--model", str(folder), "--method", "yarn", "--param", "beta=0.6", "--len", "256", "--force"]
    r = CliRunner().invoke(app, ["export", *common, "--to", "hf", "--out", str(tmp_path / "hf")])
    assert r.exit_code == 0, r.output
    assert "transformers reads beta=0.6 from the rope block" in " ".join(r.output.split())
    block = json.loads((tmp_path / "hf" / "config.json").read_text())["rope_parameters"]
    assert block["llama_4_scaling_beta"] == 0.6 and block["original_max_position_embeddings"] == 32
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "hf")])  # reloaded = ropecli's own number at beta 0.6
    assert r.exit_code == 0 and "transformers: OK" in r.output, r.output
    r = CliRunner().invoke(app, ["export", *common, "--to", "vllm", "--out", str(tmp_path / "v.json")])
    assert r.exit_code == 1 and "it cannot be served the changed temperature mistral4(beta=0.6" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["export", *common[:2], "--method", "native", "--param", "beta=0.6", "--len", "256", "--to", "hf",
                                 "--out", str(tmp_path / "n")])
    assert r.exit_code == 1 and "set llama_4_scaling_beta = 0.6 in the model's config.json" in " ".join(r.output.split())
    llama4 = save_arch(ROW["llama4"], tmp_path / "l4")
    r = CliRunner().invoke(app, ["export", "--model", str(llama4), "--method", "yarn", "--param", "attn_scale=0.5",
                                 "--len", "128", "--to", "hf", "--out", str(tmp_path / "hf4")])
    assert r.exit_code == 0, r.output
    text = json.loads((tmp_path / "hf4" / "config.json").read_text())
    text = text.get("text_config", text)
    assert (text["attn_scale"], text["floor_scale"]) == (0.5, 8)
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "hf4")])
    assert r.exit_code == 0 and "transformers: OK" in r.output, r.output
