"""The shipped built-in model: loads offline, extends badly without help, and makes the
evaluation commands fast end to end (each a few seconds)."""

import json
import math

from ropecli.backends.load import BUILTIN_DIR, load_model
from ropecli.cli.app import app

from helpers import runner


def run_json(*args):
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_shipped_files_and_size():
    files = {p.name: p.stat().st_size for p in BUILTIN_DIR.iterdir()}
    for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "training_log.json"]:
        assert name in files
    assert files["model.safetensors"] <= 25 * 2**20
    log = json.loads((BUILTIN_DIR / "training_log.json").read_text())
    assert log["context"] == 256 and set(log["held_out_plays"]) == {"hamlet", "macbeth", "twelfth-night", "julius-caesar", "the-tempest"}


def test_loads_offline_with_autotokenizer(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lm = load_model(None, device="cpu")
    assert (lm.rope.name, lm.rope.rotary_dim, lm.rope.base, lm.rope.train_len) == ("builtin", 64, 10000.0, 256)
    ids = lm.tokenizer("To be, or not to be", add_special_tokens=False)["input_ids"]
    assert lm.tokenizer.decode(ids) == "To be, or not to be"


def test_ppl_default_model_extends_badly_without_help():
    out = run_json("ppl", "--len", "256", "--len", "2048", "--method", "none", "--samples", "4", "--json")
    assert out["model"] == "builtin" and out["train_len"] == 256
    at = {r["len"]: r["ppl"] for r in out["results"]}
    assert at[256] < 60  # a real model of the held-out plays (measured 29.8)
    assert at[2048] > 1.5 * at[256]  # direct extrapolation to 8L breaks it (measured 87.0)
    fixed = run_json("ppl", "--len", "2048", "--method", "ntk-fixed", "--samples", "4", "--json")["results"][0]
    pi = run_json("ppl", "--len", "2048", "--method", "pi", "--samples", "4", "--json")["results"][0]
    assert fixed["ppl"] < 0.9 * at[2048]  # NTK-style scaling repairs part of it (measured 60.8)
    assert pi["ppl"] > at[2048]  # and PI without fine-tuning is worse than nothing (measured 132.1), as in the seed


def test_compare_default_model():
    out = run_json("compare", "--len", "256", "--len", "1024", "--methods", "none,pi,mixed", "--samples", "1", "--json")
    assert len(out["results"]) == 6 and out["model"] == "builtin"
    assert all(math.isfinite(r["ppl"]) for r in out["results"])


def test_search_b_default_model(tmp_path):
    out = run_json("search-b", "--len", "1024", "--samples", "1", "--tol", "0.1", "--json")
    assert out["model"] == "builtin" and out["lengths"] == [1024]
    assert 0 <= out["best_b"] <= 1 and len(out["evaluations"]) <= 8
    assert out["best_objective"] <= min(r["objective"] for r in out["references"] if r["method"] in ("pi", "ntk-fixed")) + 1e-6


def test_default_search_length_is_8L():
    r = runner.invoke(app, ["search-b", "--samples", "1", "--tol", "0.5", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["lengths"] == [2048]


def test_default_model_retrieves_within_L(tmp_path):
    # the check: `ropecli passkey --len 256 --method none` on the built-in model retrieves >= 90 % of keys
    # (measured 100 % of these 20 prompts; 93 % of 100 with --samples 20), and the heatmap is written
    out = run_json("passkey", "--len", "256", "--method", "none", "--plot", str(tmp_path / "pk.png"), "--json")
    (row,) = out["results"]
    assert row["len"] == 256 and row["samples"] == 20 and row["accuracy"] >= 0.9
    assert (tmp_path / "pk.png").stat().st_size > 10_000
