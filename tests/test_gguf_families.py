"""The 2026 families in a GGUF, read as llama.cpp reads them (`ropecli.models.gguf_families`): Gemma 4's p-RoPE from
its rope_freqs tensor (1e30 on the pairs that do not rotate), Llama 4's hard-coded chunked / NoPE layers and temperature,
Mistral 4's beta from attention.temperature_*, HunYuan's rope.scaling.alpha. Header-only files written in-process."""

from __future__ import annotations

import gguf as gguf_lib
import numpy as np
import pytest
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.models.config import read_rope_config
from ropecli.models.gguf_rope import P_ROPE_MASK

from gguf_models import write_llama_gguf
from tiny_models import build

pytest.importorskip("gguf")


def gguf(tmp_path, arch: str, keys: dict | None = None, tensors: dict | None = None) -> str:
    path = tmp_path / f"{arch}.gguf"
    write_llama_gguf(build("llama"), path, arch=arch, rope_keys=keys, rope_tensors=tensors)
    return str(path)


def test_gemma4_p_rope_from_rope_freqs(tmp_path):
    rope = read_rope_config(gguf(tmp_path, "gemma4", {"rope.freq_base_swa": 1e4}, {"rope_freqs.weight": [1.0] * 2 + [1e30] * 6}))
    assert rope.rotating_pairs == 2 and rope.shipped is None  # 1e30 is frequency 0, not a schedule of factor 1e30
    assert rope.layer_bases == {"full_attention": 1e4, "sliding_attention": 1e4} and rope.layer_type == "full_attention"
    plain = read_rope_config(gguf(tmp_path, "llama", None, {"rope_freqs.weight": [1.0] * 4 + [4.0] * 4}))
    assert plain.rotating_pairs is None and plain.shipped.rope_type == "rope_freqs"  # Llama 3.1's factors stay a schedule


def test_llama4_layers_and_temperature_as_llama_cpp_hard_codes_them(tmp_path):
    rope = read_rope_config(gguf(tmp_path, "llama4"))
    assert rope.layers.summary() == "2 RoPE chunked (8192 tokens)"  # 2 layers: the 4th-layer NoPE is past them
    assert rope.temperature.label == "llama4(attn_scale=0.1, floor_scale=8192)"
    every = read_rope_config(gguf(tmp_path, "llama4", {"attention.sliding_window": 0}))  # MobileLLM-style: RoPE everywhere
    assert every.layers is None and every.temperature is None


def test_mistral4_beta_and_hunyuan_alpha(tmp_path):
    rope = read_rope_config(gguf(tmp_path, "deepseek2", {"attention.temperature_scale": 0.1, "attention.temperature_length": 64}))
    assert rope.temperature.label == "mistral4(beta=0.1, original_len=64)"
    hy = read_rope_config(gguf(tmp_path, "hunyuan-vl", {"rope.scaling.alpha": 1000.0}))
    assert hy.shipped.rope_type == "ntk_alpha" and hy.shipped.factor == 1000.0


def test_gemma4_p_rope_exported_to_llama_cpp_keeps_its_mask(tmp_path):
    """llama.cpp reads Gemma 4's p-RoPE from rope_freqs on the global layers (src/models/gemma4.cpp): the export scales
    the rotating pairs and keeps 1e30 past them; a schedule with an attention factor (it would reach the sliding layers
    too) is refused in one line; the exported file reads back as the schedule on the same rotating pairs."""
    src = gguf(tmp_path, "gemma4", {"rope.freq_base_swa": 1e4}, {"rope_freqs.weight": [1.0] * 2 + [1e30] * 6})
    out = tmp_path / "out.gguf"
    r = CliRunner().invoke(app, ["export", "--model", src, "--method", "ntk-aware", "--k", "4", "--to", "llamacpp",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    freqs = [t for t in gguf_lib.GGUFReader(str(out)).tensors if t.name == "rope_freqs.weight"][0].data.reshape(-1)
    assert np.all(freqs[2:] == np.float32(P_ROPE_MASK)) and freqs[1] > 1.0  # the mask kept, the rotating pairs scaled
    back = read_rope_config(str(out))
    assert back.rotating_pairs == 2 and back.shipped is not None
    np.testing.assert_allclose(back.shipped.at(back.rotary_dim, back.base)[0][:2], freqs[:2], rtol=1e-6)
    r = CliRunner().invoke(app, ["export", "--model", src, "--method", "yarn", "--k", "4", "--to", "llamacpp",
                                 "--out", str(tmp_path / "y.gguf")])
    assert r.exit_code == 1 and "an attention factor would reach the sliding layers too" in " ".join(r.output.split())


def test_a_changed_mistral4_temperature_goes_to_llama_cpp_as_its_override(tmp_path):
    """llama.cpp reads Mistral 4's beta from attention.temperature_scale (src/models/deepseek2.cpp): an export whose
    schedule changes it names the override with the GGUF's own architecture and the value."""
    src = gguf(tmp_path, "deepseek2", {"attention.temperature_scale": 0.1, "attention.temperature_length": 64})
    r = CliRunner().invoke(app, ["export", "--model", src, "--method", "pi", "--param", "beta=0.3", "--k", "4",
                                 "--to", "llamacpp", "--out", str(tmp_path / "out.gguf")])
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert "position temperature changed to mistral4(beta=0.3, original_len=64) on every layer" in said
    assert "--override-kv deepseek2.attention.temperature_scale=float:0.3" in said
