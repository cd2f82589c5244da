"""`--backend llamacpp`: a GGUF evaluated inside llama.cpp. Where llama-cpp-python is installed
(`pip install -e '.[llamacpp]'`, which builds llama.cpp; CI never does) the backend reproduces llama.cpp's
own PPL of a window computed independently here from llama-cpp-python's logits, and the transformers
backend's effect of a schedule; elsewhere those tests skip with that reason. Bad input is one line everywhere."""

import json
import math
import sys

import numpy as np
import pytest
from transformers import AutoTokenizer

from ropecli.evaluation.inputs import Inputs
from ropecli.models.config import BUILTIN_DIR

from helpers import run


def test_not_installed_is_one_line_with_the_install_command(builtin_gguf, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    r = run("ppl", "--model", builtin_gguf, "--backend", "llamacpp", "--len", 128)
    assert r.exit_code != 0 and "pip install 'ropecli[llamacpp]'" in r.output and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("flags, words", [
    (["--model", BUILTIN_DIR], "needs a GGUF"),
    (["--dtype", "bf16"], "--dtype does not apply"),
    (["--base", "5e5"], "--base does not apply"),
])
def test_bad_input_is_one_line(builtin_gguf, flags, words):
    args = ["ppl", "--model", builtin_gguf, "--backend", "llamacpp", "--len", 128, *flags]
    if flags[0] == "--model":
        args = ["ppl", *flags, "--backend", "llamacpp", "--len", 128]
    r = run(*args)
    assert r.exit_code != 0 and words in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def llama_cpp_ppl(path, ids) -> float:
    """PPL of one window straight from llama-cpp-python: every position's logits (Llama.eval with
    logits_all), log-softmax in float64 here."""
    import llama_cpp  # an optional extra (.[llamacpp]): imported where a test that skips without it runs

    llm = llama_cpp.Llama(model_path=str(path), n_ctx=len(ids), n_batch=512, n_ubatch=512, logits_all=True,
                          n_threads=2, verbose=False)
    llm.eval([int(t) for t in ids])
    logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)
    llm.close()
    top = logits.max(1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(1, keepdims=True))
    return math.exp(-float(np.mean(logp[np.arange(len(ids) - 1), ids[1:]])))


def ppl_json(*flags):
    r = run("ppl", *flags, "--samples", 1, "--json", "--no-cache")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_backend_reproduces_llama_cpps_own_ppl_and_the_transformers_effect(builtin_gguf, tmp_path):
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install -e '.[llamacpp]' (builds llama.cpp)")


    n, scaled = 1024, ["--method", "mixed", "--b", "0.625"]  # 4L: the schedule matters
    cpp = {m: ppl_json("--model", builtin_gguf, "--backend", "llamacpp", "--len", n, *f)
           for m, f in (("none", ["--method", "none"]), ("mixed", scaled))}
    hf = {m: ppl_json("--model", builtin_gguf, "--len", n, *f) for m, f in (("none", ["--method", "none"]), ("mixed", scaled))}
    assert cpp["mixed"]["dtype"].startswith("gguf") and hf["mixed"]["dtype"] == "float32"

    # llama.cpp's own PPL of the same window on the GGUF `ropecli export --to gguf` writes
    out = tmp_path / "mixed.gguf"
    assert run("export", "--model", builtin_gguf, *scaled, "--len", n, "--to", "gguf", "--out", out).exit_code == 0
    tok = AutoTokenizer.from_pretrained(str(builtin_gguf.parent), gguf_file=builtin_gguf.name)
    ids = Inputs.load(tok, samples=1).windows(n).ids[0]
    own = llama_cpp_ppl(out, ids)
    assert cpp["mixed"]["results"][0]["ppl"] == pytest.approx(own, rel=1e-5)

    # the effect of the schedule, llama.cpp vs transformers (same weights in F32; llama.cpp's KV cache is F16)
    effect = {b: math.log(r["mixed"]["results"][0]["ppl"] / r["none"]["results"][0]["ppl"]) for b, r in (("cpp", cpp), ("hf", hf))}
    assert abs(effect["cpp"] - effect["hf"]) < 2e-3, effect
    assert cpp["none"]["results"][0]["ppl"] == pytest.approx(hf["none"]["results"][0]["ppl"], rel=2e-3)


def test_kl_and_passkey_run_inside_llama_cpp(builtin_gguf):
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install -e '.[llamacpp]' (builds llama.cpp)")
    common = ["--model", builtin_gguf, "--samples", 1, "--json", "--no-cache"]
    kl = {b: json.loads(run("kl", *common, "--len", 256, "--k", 4, "--method", "pi", "--backend", b).stdout)
          for b in ("llamacpp", "transformers")}
    a, b = (kl[x]["results"][0]["kl_mean"] for x in ("llamacpp", "transformers"))
    assert a > 0 and a == pytest.approx(b, rel=0.05), (a, b)
    r = run("passkey", *common, "--len", 512, "--method", "none", "--backend", "llamacpp", "--depths", "0.5")
    assert r.exit_code == 0, r.output
    assert 0 <= json.loads(r.stdout)["results"][0]["accuracy"] <= 1


def test_a_gguf_that_is_already_scaled_runs_only_as_native(builtin_gguf, tmp_path):
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install -e '.[llamacpp]' (builds llama.cpp)")
    scaled = tmp_path / "scaled.gguf"
    assert run("export", "--model", builtin_gguf, "--method", "pi", "--len", 512, "--to", "gguf", "--out", scaled).exit_code == 0
    r = run("ppl", "--model", scaled, "--backend", "llamacpp", "--len", 128, "--method", "pi")
    assert r.exit_code != 0 and "carries its own RoPE scaling" in r.output and "Traceback" not in r.output
    r = run("ppl", "--model", scaled, "--backend", "llamacpp", "--len", 128, "--method", "native", "--samples", 1, "--json",
            "--no-cache")  # the scaled GGUF as it is: what llama.cpp serves
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["shipped"]["rope_type"] == "rope_freqs"


def test_kl_of_the_unscaled_model_against_itself_is_zero(builtin_gguf):
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install -e '.[llamacpp]' (builds llama.cpp)")
    r = run("kl", "--model", builtin_gguf, "--backend", "llamacpp", "--len", 128, "--k", 1, "--method", "none",
            "--samples", 1, "--json", "--no-cache")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["results"][0]["kl_mean"] == 0.0
