"""`ropecli ppl` and `ropecli compare` end to end on a tiny saved model and a small text file."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

import ropecli.backends.backend as backend

from helpers import run
from tiny_models import char_tokenizer


def test_ppl_json(tiny_dir, jsonl_file):
    r = run("ppl", "--model", tiny_dir, "--data", jsonl_file, "--len", "64", "--len", "256", "--method", "mixed",
            "--samples", "2", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["train_len"] == 64 and data["rotary_dim"] == 16
    res = {x["len"]: x for x in data["results"]}
    assert res[64]["factor"] == 1.0 and res[256]["factor"] == 4.0
    for x in data["results"]:
        assert set(x) >= {"method", "len", "factor", "ppl", "nll", "tokens", "ppl_err"}
        assert x["tokens"] == 2 * (x["len"] - 1)
        assert x["ppl"] == pytest.approx(2.718281828 ** x["nll"], rel=1e-9)
    # the second run comes from the cache, identical
    again = json.loads(run("ppl", "--model", tiny_dir, "--data", jsonl_file, "--len", "64", "--len", "256",
                           "--samples", "2", "--json").stdout)
    assert [x["ppl"] for x in again["results"]] == [x["ppl"] for x in data["results"]]
    assert all(x["cached"] for x in again["results"])


def test_compare_table_json_and_plot(tiny_dir, jsonl_file, tmp_path):
    out = tmp_path / "ppl.png"
    r = run("compare", "--model", tiny_dir, "--data", jsonl_file, "--len", "64", "--len", "192",
            "--methods", "none,pi,ntk-fixed,mixed", "--b", "0.3", "--b", "0.625", "--samples", "2", "--json", "--plot", str(out))
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    labels = {x["label"] for x in data["results"]}
    assert labels == {"none", "pi", "ntk-fixed", "mixed(b=0.3)", "mixed(b=0.625)"}
    assert len(data["results"]) == 10
    at_L = {x["label"]: x["ppl"] for x in data["results"] if x["len"] == 64}
    assert len(set(at_L.values())) == 1  # k = 1 at L: every method is the unscaled model
    assert out.stat().st_size > 5000
    r = run("compare", "--model", tiny_dir, "--data", jsonl_file, "--len", "192", "--methods", "pi,mixed", "--samples", "2",
            "--with-and-without-log-n")
    assert r.exit_code == 0, r.output
    assert "pi+log-n" in r.output and "mixed(b=0.625)+log-n" in r.output


BAD = [
    (["ppl", "--model", "/nonexistent/model", "--len", "64"], "--model /nonexistent/model: no such file or folder"),
    (["ppl", "--len", "64", "--method", "pi", "--b", "0.5"], "does not apply"),
    (["ppl", "--len", "1"], "x>=2"),
    (["ppl", "--len", "64", "--samples", "0"], "x>=1"),
    (["ppl", "--len", "64", "--dtype", "fp8"], "is not one of"),
    (["ppl", "--len", "64", "--method", "pi,mixed"], "one schedule"),
    (["ppl"], "no --len"),
    (["ppl", "--len", "64", "--device", "tpu"], "not one of"),
    (["compare", "--len", "64", "--methods", "pi", "--b", "0.3"], "belongs to mixed"),
    (["compare", "--len", "64", "--method", "yarn", "--param", "b=0.3"], "belongs to mixed"),
]


@pytest.mark.parametrize("args,fragment", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input(args, fragment, tiny_dir):
    if args[0] in ("ppl", "compare") and "--model" not in args:
        args = [args[0], "--model", tiny_dir, *args[1:]]
    r = run(*args)
    assert r.exit_code != 0
    assert fragment in r.output, r.output
    assert "Traceback" not in r.output


def test_too_little_text(tiny_dir, jsonl_file):
    r = run("ppl", "--model", tiny_dir, "--data", jsonl_file, "--len", "100000")
    assert r.exit_code == 1 and "too little text" in r.output


def test_model_without_rope(tmp_path):
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=96)).save_pretrained(tmp_path / "gpt2")
    char_tokenizer().save_pretrained(tmp_path / "gpt2")
    r = run("ppl", "--model", str(tmp_path / "gpt2"), "--len", "64")
    assert r.exit_code == 1 and "no rotary position embedding" in r.output


def test_nan_loss_is_inf(tiny_dir, jsonl_file, tmp_path):
    m = AutoModelForCausalLM.from_pretrained(tiny_dir)
    with torch.no_grad():
        m.model.norm.weight.fill_(float("nan"))
    m.save_pretrained(tmp_path / "nan")
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(tmp_path / "nan")
    r = run("ppl", "--model", str(tmp_path / "nan"), "--data", jsonl_file, "--len", "64", "--samples", "1", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["results"][0]["ppl"] is None  # inf in JSON is null


def test_out_of_memory_is_one_clear_line(tiny_dir, jsonl_file, monkeypatch):
    def oom(*a, **k):
        raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")

    monkeypatch.setattr(backend, "window_nll", oom)
    r = run("ppl", "--model", tiny_dir, "--data", jsonl_file, "--len", "64", "--no-cache")
    assert r.exit_code == 1
    assert "out of memory at --len 64" in r.output and "--device-map auto" in r.output and "--chunk-size" in r.output
    assert "Traceback" not in r.output


def test_gguf_without_the_gguf_package(tmp_path, monkeypatch):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "gguf", None)  # `import gguf` now raises ImportError
    r = run("ppl", "--model", str(fake), "--len", "64")
    assert r.exit_code == 1 and "pip install 'ropecli[gguf]'" in r.output and "Traceback" not in r.output


def test_ppl_takes_the_shared_schedule_and_output_options(tiny_dir, jsonl_file, tmp_path):
    out = tmp_path / "ppl.png"
    r = run("ppl", "--model", tiny_dir, "--data", jsonl_file, "--len", "64", "--len", "128", "--method", "yarn",
            "--param", "beta_fast=16", "--samples", "1", "--plot", str(out), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {x["label"] for x in data["results"]} == {"yarn(beta_fast=16, beta_slow=1)"}
    assert out.stat().st_size > 5000


def test_progress_draws_only_on_a_terminal(tiny_dir, jsonl_file, tmp_path):
    """stderr to a file (a log, CI, nohup): the messages, one per line, and no progress frames or blank lines."""
    log = tmp_path / "log.txt"
    with open(log, "w") as err:
        r = subprocess.run([sys.executable, "-m", "ropecli", "ppl", "--model", tiny_dir, "--data", jsonl_file, "--len", "64",
                            "--samples", "2", "--cache-dir", str(tmp_path / "c")], stdout=subprocess.PIPE, stderr=err,
                           text=True, env={**os.environ, "COLUMNS": "400"})
    assert r.returncode == 0
    lines = log.read_text().splitlines()
    assert lines and all(line.strip() for line in lines), lines
    assert [line.split()[0] for line in lines] == ["model", "data", "memory:", "evaluating:"]  # the plan, then the passes
