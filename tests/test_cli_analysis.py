"""Every analytical command and every bad-input case, in-process through Typer's CliRunner."""

import json

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from ropecli.cli.app import app
from ropecli.models.packaged import PACKAGE_DIR

from helpers import run, runner


def test_version_and_help():
    r = run("--version")
    assert r.exit_code == 0 and r.output.startswith("ropecli ")
    for cmd in ["freqs", "digits", "schedule", "methods", "plot"]:
        r = run(cmd, "--help")
        assert r.exit_code == 0, r.output
        if cmd != "plot":
            assert "Example" in r.output


def test_freqs_json_keys_and_values():
    r = run("freqs", "--d", "128", "--k", "8", "--method", "mixed", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    for key in ["method", "rotary_dim", "base", "factor", "train_len", "attention_factor", "pairs", "critical_pair"]:
        assert key in data
    assert data["method"] == "mixed" and data["rotary_dim"] == 128 and data["factor"] == 8.0
    assert len(data["pairs"]) == 64
    p = data["pairs"][10]
    assert p["m"] == 11
    # by hand, m = 11 of d = 128, base 1e4, k = 8, b = 0.625:
    #   theta_11 = 1e4^(-20/128) = 10^(-0.625) = 0.2371373705661655
    #   a = ln 8 / 64^0.625 = 2.0794415416798357 / 13.454342644059432 = 0.15455541728736802
    #   Lambda_11 = exp(a * 11^0.625) = exp(0.15455541728736802 * 4.475797488182033) = 1.9972250626913353
    assert p["inv_freq"] == pytest.approx(0.2371373705661655, rel=1e-12)
    assert p["factor"] == pytest.approx(1.9972250626913353, rel=1e-12)
    assert p["scaled_inv_freq"] == pytest.approx(0.2371373705661655 / 1.9972250626913353, rel=1e-12)
    assert p["scaled_wavelength"] == pytest.approx(52.91842082533191, rel=1e-12)  # 2*pi * Lambda_11 / theta_11 tokens
    assert data["pairs"][-1]["status"] == "interpolated"
    assert data["pairs"][-1]["factor"] == pytest.approx(8.0, rel=1e-12)  # Lambda_{d/2} = k by construction


def test_freqs_table_names_critical_pair():
    r = run("freqs", "--d", "128", "--k", "8", "--method", "pi")
    assert r.exit_code == 0, r.output
    assert "Critical pair: m=47" in r.output
    assert "64 interpolated" in r.output


def test_freqs_target_len_sets_k():
    data = json.loads(run("freqs", "--d", "64", "--train-len", "2048", "--target-len", "8192", "--method", "pi", "--json").output)
    assert data["factor"] == 4.0 and data["pairs"][0]["factor"] == 4.0


def test_freqs_none_extrapolates():
    data = json.loads(run("freqs", "--d", "64", "--k", "4", "--method", "none", "--json").output)
    assert {p["status"] for p in data["pairs"]} == {"extrapolated"}
    assert not all(p["in_range"] for p in data["pairs"])


def test_digits_rope_mode():
    r = run("digits", "--n", "759", "--d", "16", "--k", "8", "--method", "mixed", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    p = data["pairs"][2]  # m = 3
    # by hand: beta = 1e4^(2/16) = sqrt(10), beta^2 = 10, so n / beta^2 = 75.9;
    # digit = floor(75.9) mod sqrt(10) = 75 - 23 * 3.16227766016838 = 2.26761381612726
    # angle = 75.9 rad = 12.07986... turns, fraction 0.0798670...
    assert p["digit"] == pytest.approx(2.26761381612726, rel=1e-9)
    assert p["turn_fraction"] == pytest.approx(75.9 / (2 * 3.141592653589793) - 12, rel=1e-9)
    assert run("digits", "--n", "759", "--d", "16").exit_code == 0


def test_digits_integer_illustration_of_seed_002():
    data = json.loads(run("digits", "--n", "1749", "--radix", "10", "--width", "3", "--k", "2", "--also-radix", "16", "--json").output)
    by_radix = {s["radix"]: s for s in data["schemes"] if s["scheme"].startswith("base conversion")}
    assert by_radix[16]["digits"] == [6, 13, 5]  # Su, "RoPE is a beta-base encoding": 1749 -> [6, 13, 5] in hex
    assert 13 in by_radix and by_radix[13]["fits"]  # ceil(2000^(1/3)) = 13
    assert data["schemes"][0]["fits"] is False  # radix 10 needs a 4th digit


def test_schedule_json_csv_table():
    r = run("schedule", "--d", "8", "--k", "8", "--method", "pi,mixed", "--b", "0.5", "--json")
    data = json.loads(r.output)
    assert [s["label"] for s in data["schedules"]] == ["pi", "mixed(b=0.5)"]
    assert data["schedules"][1]["factors"][-1] == pytest.approx(8.0)
    r = run("schedule", "--d", "8", "--method", "mixed", "--b", "0.3", "--b", "0.7", "--csv")
    lines = r.output.strip().splitlines()
    assert lines[0] == "m,mixed(b=0.3)_factor,mixed(b=0.3)_lambda,mixed(b=0.7)_factor,mixed(b=0.7)_lambda"
    assert len(lines) == 5
    r = run("schedule", "--d", "8", "--method", "yarn,llama3")
    assert r.exit_code == 0 and "attention factor" in r.output


def test_schedule_csv_round_trips_through_longrope(tmp_path):
    csv_file = tmp_path / "f.csv"
    csv_file.write_text(run("schedule", "--d", "16", "--method", "mixed", "--b", "0.4", "--csv").output)
    a = json.loads(run("schedule", "--d", "16", "--method", "longrope", "--factors", str(csv_file), "--param", "attention_factor=1", "--json").output)
    b = json.loads(run("schedule", "--d", "16", "--method", "mixed", "--b", "0.4", "--json").output)
    np.testing.assert_allclose(a["schedules"][0]["factors"], b["schedules"][0]["factors"], rtol=1e-15)


def test_methods_lists_registry():
    data = json.loads(run("methods", "--json").output)
    assert {m["method"] for m in data if m["kind"] == "scaling method"} >= {"none", "pi", "ntk-old", "ntk-aware", "ntk-fixed",
                                                                        "mixed", "dynamic", "yarn", "llama3", "longrope"}
    assert {m["map"] for m in data if m["kind"] == "position map"} >= {"none", "selfextend", "rerope", "leaky-rerope"}


@pytest.mark.parametrize("kind", ["png", "svg"])
def test_plots(tmp_path, kind):
    out = tmp_path / f"f.{kind}"
    r = run("plot", "freqs", "--d", "64", "--k", "4", "--method", "pi,mixed", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 5000
    out2 = tmp_path / f"s.{kind}"
    r = run("plot", "schedule", "--method", "mixed", "--b", "0", "--b", "0.625", "--b", "1", "--out", str(out2))
    assert r.exit_code == 0, r.output
    assert out2.stat().st_size > 5000


BAD = [
    (["freqs", "--d", "127"], "even"),
    (["freqs", "--d", "-4"], "x>=1"),
    (["freqs", "--d", "0"], "x>=1"),
    (["freqs", "--k", "0.5"], "x>=1"),
    (["freqs", "--b", "17"], "outside [0, 16]"),
    (["freqs", "--base", "1"], "greater than 1"),
    (["freqs", "--method", "magic"], "unknown method 'magic'"),
    (["freqs", "--method", "longrope"], "needs its parameter 'factors'"),
    (["freqs", "--method", "pi", "--b", "0.5"], "fits none of the chosen methods"),
    (["freqs", "--k", "2", "--target-len", "8192"], "pass only one"),
    (["freqs", "--method", "pi,mixed"], "one method at a time"),
    (["digits", "--n", "-1"], "x>=0"),
    (["digits", "--n", "5", "--radix", "1"], "x>=2"),
    (["schedule", "--method", "longrope", "--factors", "/nonexistent/f.json"], "cannot read factor file"),
    (["schedule", "--method", "pi,mixed", "--format", "hf"], "one schedule"),
    (["schedule", "--format", "xml"], "is not one of"),
    (["freqs", "--model", "/nonexistent/model"], "no such file or folder"),
    (["freqs", "--rope-layers", "all"], "pass --model too"),
    (["freqs", "--d", "64", "--head-dim", "128"], "disagree"),
    (["plot", "--out", "x.gif"], "must end in"),
    (["schedule", "--method", "yarn", "--param", "beta_fast"], "KEY=VALUE"),
    (["plot", "freqs", "--out", "x.gif"], "must end in"),
    (["plot", "freqs", "--out", "/nonexistent/dir/x.png"], "does not exist"),
]


@pytest.mark.parametrize("args,fragment", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line(args, fragment):
    r = run(*args)
    assert r.exit_code != 0
    assert fragment in r.output
    assert "Traceback" not in r.output
    assert len([ln for ln in r.output.strip().splitlines() if ln.startswith("Error")]) == 1


def test_unreadable_factor_file(tmp_path):
    bad = tmp_path / "f.json"
    bad.write_text("{not json")
    r = run("schedule", "--method", "longrope", "--d", "8", "--factors", str(bad))
    assert r.exit_code == 1 and "not a list of numbers" in r.output


@pytest.mark.parametrize("switching", [False, True])
def test_schedule_hf_block_decodes_through_a_cache_as_one_pass(switching):
    """`schedule --format hf` writes the generation-safe block: the built-in model under it, fed a prompt shorter
    than L and decoded token by token through its KV cache past L, gives the logits of one forward pass. The
    switching form (`--switching`, short_factor = 1) does not: keys cached before L keep the unscaled rotation."""
    r = runner.invoke(app, ["schedule", "--model", "builtin", "--k", "2", "--method", "yarn", "--format", "hf",
                            *(["--switching"] if switching else [])], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    block = json.loads(r.stdout)
    assert (block["rope_parameters"]["short_factor"] == block["rope_parameters"]["long_factor"]) is not switching
    folder = PACKAGE_DIR / "builtin_model"
    config = AutoConfig.from_pretrained(folder)
    config.rope_parameters, config.max_position_embeddings = block["rope_parameters"], block["max_position_embeddings"]
    model = AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=torch.float32).eval()
    L, prompt, total = 256, 200, 320
    ids = torch.randint(0, config.vocab_size, (1, total), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        one_pass = model(ids).logits[0, prompt - 1:]
        out = model(ids[:, :prompt], use_cache=True)
        steps, cache = [out.logits[0, -1]], out.past_key_values
        for t in range(prompt, total):
            out = model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            steps.append(out.logits[0, -1])
            cache = out.past_key_values
    worst = (torch.stack(steps[:-1]) - one_pass[:-1]).abs().max().item()
    assert total > L > prompt
    assert (worst > 1e-2) if switching else (worst < 1e-4), worst
