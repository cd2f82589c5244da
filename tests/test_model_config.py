"""`--model` on the analysis commands: d, base and L from a config.json or a GGUF header, without
torch, agreeing with what the model layer reads from the loaded model."""

import json
import struct
import subprocess
import sys

import numpy as np
import pytest

from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.models.config import gguf_metadata, read_rope_config

from helpers import runner
from tiny_models import L, base_of, build, char_tokenizer, rotary_dim

FAMILIES = ["llama", "qwen2", "gpt_neox", "gemma3"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = {}
    for family in FAMILIES:
        path = tmp_path_factory.mktemp(family) / "model"
        build(family).save_pretrained(path)
        char_tokenizer().save_pretrained(path)
        out[family] = str(path)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_config_reader_agrees_with_the_loaded_model(folders, family):
    rope = read_rope_config(folders[family])
    lm = load_model(folders[family], device="cpu")
    # the expected values come from the tiny models' own construction (tiny_models.py) ...
    assert (rope.rotary_dim, rope.base, rope.train_len) == (rotary_dim(family), base_of(family), L)
    # ... and agree with what ropecli reads from the loaded weights' rotary modules
    assert rope == lm.rope  # the config reader and the loaded model agree on the one record of a model's RoPE


def test_gemma3_layer_types(folders):
    rope = read_rope_config(folders["gemma3"])
    assert rope.layer_bases == {"full_attention": 1e6, "sliding_attention": 1e4} and rope.layer_type == "full_attention"
    sliding = read_rope_config(folders["gemma3"], rope_layers="sliding_attention")
    assert sliding.base == 1e4 and sliding.layer_type == "sliding_attention"
    with pytest.raises(RopeCliError, match="unknown layer type"):
        read_rope_config(folders["gemma3"], rope_layers="global")


def test_freqs_with_model_prints_geometry_and_flags_override(folders):
    r = runner.invoke(app, ["freqs", "--model", folders["gpt_neox"], "--k", "8", "--json"])
    assert r.exit_code == 0, r.output
    assert "rotary dim d=8, base=10000, training length L0=64, shipped length Ls=64" in r.stderr
    data = json.loads(r.stdout)
    assert (data["rotary_dim"], data["base"], data["train_len"], data["factor"]) == (8, 1e4, 64, 8.0)
    data = json.loads(runner.invoke(app, ["freqs", "--model", folders["gpt_neox"], "--base", "500000", "--target-len", "256",
                                          "--json"]).stdout)
    assert (data["rotary_dim"], data["base"], data["train_len"], data["factor"]) == (8, 5e5, 64, 4.0)


@pytest.mark.parametrize("cmd", [["digits", "--n", "100"], ["schedule"], ["plot", "freqs", "--out", "f.png"],
                                 ["plot", "--out", "o.png"]])
def test_every_analysis_command_takes_model(folders, cmd, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, [*cmd, "--model", folders["qwen2"], "--k", "4"])
    assert r.exit_code == 0, r.output
    assert "base=1e+06" in r.output


def test_schedule_hf_block_carries_partial_rotary(folders):
    block = json.loads(runner.invoke(app, ["schedule", "--model", folders["gpt_neox"], "--k", "4", "--format", "hf"]).stdout)
    assert block["rope_parameters"]["partial_rotary_factor"] == 0.5
    assert len(block["rope_parameters"]["long_factor"]) == 4 and block["max_position_embeddings"] == 256


def test_freqs_with_model_does_not_import_torch(folders):
    code = ("import sys; from ropecli.cli.app import app\n"
            "try: app(['freqs', '--model', sys.argv[1], '--k', '8'])\n"
            "except SystemExit as e: assert e.code == 0, e.code\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, folders["llama"]], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False False"


def _gguf_bytes(kv: dict) -> bytes:
    """A GGUF v3 header written by hand from the format's specification (no tensors)."""
    def s(text):
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw

    body = b""
    for key, (vtype, value) in kv.items():
        body += s(key) + struct.pack("<I", vtype)
        if vtype == 8:
            body += s(value)
        elif vtype == 9:  # array of strings
            body += struct.pack("<IQ", 8, len(value)) + b"".join(s(v) for v in value)
        else:
            body += struct.pack({4: "<I", 6: "<f", 10: "<Q"}[vtype], value)
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + body


def test_gguf_header_reader(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(_gguf_bytes({
        "general.architecture": (8, "llama"),
        "llama.context_length": (4, 8192),
        "llama.embedding_length": (4, 4096),
        "llama.attention.head_count": (4, 32),
        "llama.rope.freq_base": (6, 500000.0),
        "tokenizer.ggml.tokens": (9, ["<s>", "a", "b"] * 1000),
        "llama.rope.dimension_count": (4, 128),
    }))
    meta = gguf_metadata(path)
    assert meta["llama.rope.dimension_count"] == 128 and meta["tokenizer.ggml.tokens"] is None
    rope = read_rope_config(str(path))
    assert (rope.rotary_dim, rope.base, rope.train_len, rope.layer_bases) == (128, 5e5, 8192, {})
    path.write_bytes(b"GGUF\x03\x00")
    with pytest.raises(RopeCliError, match="cannot read GGUF metadata"):
        read_rope_config(str(path))


def test_gguf_written_by_the_gguf_package(tmp_path):
    gguf = pytest.importorskip("gguf")

    path = tmp_path / "g.gguf"
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_context_length(32768)
    w.add_embedding_length(640)
    w.add_head_count(4)
    w.add_key_length(256)
    w.add_rope_freq_base(1e6)
    w.add_token_list(["a", "b", "c"])
    w.add_tensor("x", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    rope = read_rope_config(str(path))
    assert (rope.rotary_dim, rope.base, rope.train_len) == (256, 1e6, 32768)
    assert rope.layer_bases == {"full_attention": 1e6, "sliding_attention": 1e4}
