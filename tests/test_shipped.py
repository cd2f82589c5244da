"""The model as shipped: the shipped schedule read from every form (real models' config fields), `native`
equal to the unpatched transformers model, the composed family's arithmetic, and native's exports."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from ropecli.backends.load import causal_lm_from_pretrained, load_model
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.models.chunked_scoring import window_nll
from ropecli.models.config import read_rope_config, rope_from_config
from ropecli.models.packaged import BUILTIN_FOLDERS
from ropecli.models.patch import find_rotary_slots, original_inv_freq, select_slots
from ropecli.rope.geometry import Geometry
from ropecli.rope.shipped import read_shipped
from ropecli.spec import make_spec

from architectures import ARCHS, L0, build_arch, save_arch
from gguf_models import write_llama_gguf
from tiny_models import build

SHIPPED = [a for a in ARCHS if a.shipped]


def _ramp(n: int) -> list[float]:
    return [1.0 + i / n for i in range(n)]


# The fields of real models' config.json (hub files, as of their releases), trimmed to what RoPE reads.
REAL = {
    "Llama-3.1-8B": ({"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                      "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
                     (128, 500000.0, 8192, 131072, "llama3", 8.0)),
    "Llama-3.2-1B": ({"hidden_size": 2048, "num_attention_heads": 32, "head_dim": 64, "max_position_embeddings": 131072,
                      "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                               "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
                     (64, 500000.0, 8192, 131072, "llama3", 32.0)),
    "Qwen3-8B + YaRN": ({"hidden_size": 4096, "num_attention_heads": 32, "head_dim": 128, "max_position_embeddings": 40960,
                         "rope_theta": 1000000.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                                   "original_max_position_embeddings": 32768}},
                        (128, 1e6, 32768, 131072, "yarn", 4.0)),
    "Phi-3-mini-128k": ({"hidden_size": 3072, "num_attention_heads": 32, "max_position_embeddings": 131072,
                         "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
                         "rope_scaling": {"type": "longrope", "short_factor": _ramp(48), "long_factor": _ramp(48)}},
                        (96, 1e4, 4096, 131072, "longrope", 32.0)),
    "gpt-oss-20b": ({"hidden_size": 2880, "num_attention_heads": 64, "head_dim": 64, "max_position_embeddings": 131072,
                     "rope_theta": 150000, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                                            "original_max_position_embeddings": 4096, "rope_type": "yarn",
                                                            "truncate": False}},
                    (64, 150000.0, 4096, 131072, "yarn", 32.0)),
    "DeepSeek-V3": ({"hidden_size": 7168, "num_attention_heads": 128, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                     "max_position_embeddings": 163840, "rope_theta": 10000,
                     "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                                      "original_max_position_embeddings": 4096, "type": "yarn"}},
                    (64, 1e4, 4096, 163840, "yarn", 40.0)),
    "gemma-3-4b (text_config)": ({"model_type": "gemma3", "text_config": {
        "hidden_size": 2560, "num_attention_heads": 8, "head_dim": 256, "max_position_embeddings": 131072,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}},
                                 (256, 1e6, 16384, 131072, "linear", 8.0)),
    "Qwen2.5-7B (plain)": ({"hidden_size": 3584, "num_attention_heads": 28, "max_position_embeddings": 32768,
                            "rope_theta": 1000000.0, "rope_scaling": None}, (128, 1e6, 32768, 32768, None, None)),
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_configs_read_right(name):
    cfg, (d, base, L0_, Ls, rope_type, factor) = REAL[name]
    rope = rope_from_config(name, cfg, None)
    assert (rope.rotary_dim, rope.base, rope.train_len, rope.shipped_len) == (d, base, L0_, Ls)
    assert (rope.shipped and rope.shipped.rope_type) == rope_type
    assert (rope.shipped and rope.shipped.factor) == factor


def test_gemma3_scaling_applies_to_the_global_layers_only():
    cfg = REAL["gemma-3-4b (text_config)"][0]
    assert rope_from_config("g", cfg, None).shipped.method == "pi"
    sliding = rope_from_config("g", cfg, "sliding_attention")
    assert sliding.shipped is None and sliding.base == 1e4


def test_unknown_rope_type_is_refused_in_one_line():
    with pytest.raises(RopeCliError, match="rope_type 'xpos'.*does not know"):
        read_shipped({"rope_type": "xpos", "factor": 2.0}, max_len=100)


@pytest.mark.parametrize("arch", SHIPPED, ids=[a.name for a in SHIPPED])
def test_shipped_schedule_is_what_transformers_applies(arch):
    """Shipped.at(n) against the rotary module of the unpatched model after a forward pass of n tokens
    (transformers' own code: its dynamic and longrope updates included), within L0, up to Ls and past it."""
    model = build_arch(arch)
    rope = rope_from_config(arch.name, model.config.to_dict(), None)
    slot = select_slots(find_rotary_slots(model), rope.scaled_types)[0]
    for n in (L0 // 2, arch.Ls, 2 * arch.Ls):
        with torch.no_grad():
            model(torch.zeros(1, n, dtype=torch.long))
        theirs = original_inv_freq(slot) / slot.inv_freq.double().numpy()
        attention = getattr(slot.module, slot.prefix + "attention_scaling")
        ours, ours_attention = rope.shipped.at(rope.rotary_dim, rope.base, n)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, err_msg=f"{arch.name} at n={n}")
        assert ours_attention == pytest.approx(attention, rel=1e-6)


@pytest.mark.parametrize("arch", SHIPPED, ids=[a.name for a in SHIPPED])
def test_native_equals_the_unpatched_model(tmp_path, arch):
    """`native` through ropecli's backend (after another schedule ran and was restored) gives the unpatched
    model's NLL within 1e-5 at every length; `none` does not (the test can fail)."""
    folder = save_arch(arch, tmp_path / "m")
    lm = load_model(str(folder), device="cpu", dtype="fp32")
    plain = causal_lm_from_pretrained(str(folder), {"dtype": torch.float32}).eval()
    rng = np.random.default_rng(0)
    for n in (L0 // 2, arch.Ls, 2 * arch.Ls):
        ids = rng.integers(2, 90, size=n).astype(np.int64)
        geom = lm.rope.geometry(max(1.0, n / lm.rope.train_len))
        with lm.scaled(make_spec("yarn").schedule(geom, n), False):  # something else first: native must restore
            lm.window_nll(ids, None, None)
        with lm.scaled(make_spec("native").schedule(geom, n), False):
            ours = lm.window_nll(ids, None, None)[0]
        with lm.scaled(make_spec("none").schedule(geom, n), False):
            unscaled = lm.window_nll(ids, None, None)[0]
        theirs = window_nll(plain, torch.from_numpy(ids)[None])[0]
        assert ours == pytest.approx(theirs, rel=1e-5), f"{arch.name} at n={n}"
        if n > L0:
            assert abs(unscaled - theirs) > 100 * abs(ours - theirs) + 1e-3, f"none is not the model as shipped ({arch.name}, n={n})"


def test_composed_is_the_shipped_schedule_times_the_extra_one():
    rope = rope_from_config("l", REAL["Llama-3.1-8B"][0], None)
    Ls, N = rope.shipped_len, 4 * rope.shipped_len
    geom = rope.geometry(N / rope.train_len)
    composed = make_spec("native+yarn").schedule(geom)
    shipped, _ = rope.shipped.at(rope.rotary_dim, rope.base)
    extra = make_spec("yarn").schedule(Geometry(rope.rotary_dim, rope.base, Ls, N / Ls))
    np.testing.assert_allclose(composed.factors, shipped * extra.factors)
    assert composed.attention_factor == pytest.approx(extra.attention_factor)  # llama3 ships attention factor 1
    at_Ls = make_spec("native+yarn").schedule(rope.geometry(Ls / rope.train_len))  # k' = 1: the model as shipped
    np.testing.assert_allclose(at_Ls.factors, shipped)
    rederived = make_spec("llama3").schedule(geom)  # llama3 x32 from L0: not the composed one
    assert not np.allclose(rederived.factors, composed.factors)


def test_composed_attention_factors_multiply():
    rope = rope_from_config("q", REAL["Qwen3-8B + YaRN"][0], None)
    geom = rope.geometry(4 * rope.shipped_len / rope.train_len)
    s = make_spec("native+yarn").schedule(geom)
    assert s.attention_factor == pytest.approx((0.1 * np.log(4) + 1) ** 2)
    assert s.method == "native+yarn" and make_spec("native+yarn").label.startswith("native+yarn(")


def test_native_export_writes_nothing_and_says_so(tmp_path):
    folder = save_arch(SHIPPED[0], tmp_path / "m")
    r = CliRunner().invoke(app, ["export", "--model", str(folder), "--method", "native", "--len", "512", "--to", "hf",
                                 "--out", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["native"] and out["block"] is None and "nothing to export" in out["lines"][0]
    assert not (tmp_path / "out").exists()


def test_an_export_that_replaces_the_shipped_schedule_within_Ls_is_flagged(tmp_path):
    folder = save_arch(SHIPPED[0], tmp_path / "m")
    run = CliRunner().invoke
    kept = json.loads(run(app, ["export", "--model", str(folder), "--method", "native+yarn", "--len", "512", "--json",
                                "--switching"]).stdout)
    assert "replaces_shipped" not in kept  # transformers --switching: the shipped short_factor up to Ls
    rp = kept["block"]["rope_parameters"]
    assert rp["original_max_position_embeddings"] == SHIPPED[0].Ls and rp["short_factor"] != [1.0] * 8
    assert kept["switching"]["total_len"] > SHIPPED[0].Ls  # … and its decode damage across Ls measured
    for extra in ([], ["--consistent"], ["--to", "vllm"]):  # the default is consistent
        out = json.loads(run(app, ["export", "--model", str(folder), "--method", "native+yarn", "--len", "512", "--json",
                                   *extra]).stdout)
        assert "replaces" in out["replaces_shipped"]


@pytest.mark.parametrize("case", ["yarn keys", "rope_freqs", "longrope tensors", "plain"])
def test_gguf_shipped_schedule(tmp_path, case):
    """A GGUF's `{arch}.rope.scaling.*` keys and rope factor tensors, as llama.cpp's converter writes them."""
    pytest.importorskip("gguf")


    model = build("llama")  # d = 16, L = 64 (its max_position_embeddings: the GGUF's context_length)
    keys, tensors = {}, {}
    if case == "yarn keys":
        keys = {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": 16}
    elif case == "rope_freqs":  # Llama 3.1 converted: the llama3 factors as per-pair divisors, no scaling type
        tensors = {"rope_freqs.weight": [1.0, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0]}
    elif case == "longrope tensors":
        keys = {"rope.scaling.attn_factor": 1.25, "rope.scaling.original_context_length": 16}
        tensors = {"rope_factors_long.weight": [1.0 + i for i in range(8)], "rope_factors_short.weight": [1.0] * 8}
    path = tmp_path / "m.gguf"
    write_llama_gguf(model, path, rope_keys=keys, rope_tensors=tensors)
    rope = read_rope_config(str(path))
    if case == "plain":
        assert rope.shipped is None and rope.train_len == 64
        return
    sh = rope.shipped
    factors, attention = sh.at(rope.rotary_dim, rope.base)
    if case == "yarn keys":
        assert (sh.method, sh.factor, rope.train_len, rope.shipped_len) == ("yarn", 4.0, 16, 64)
        assert attention == pytest.approx(0.1 * np.log(4) + 1)
    elif case == "rope_freqs":
        assert (sh.rope_type, rope.train_len, rope.shipped_len) == ("rope_freqs", 16, 64)  # L0 = Ls / k, said as assumed
        np.testing.assert_allclose(factors, tensors["rope_freqs.weight"])
    else:
        assert (sh.method, rope.train_len, attention) == ("longrope", 16, pytest.approx(1.25))
        np.testing.assert_allclose(factors, tensors["rope_factors_long.weight"])
        np.testing.assert_allclose(sh.at(rope.rotary_dim, rope.base, 16)[0], 1.0)  # short factors up to L0


def test_native_is_the_prescaled_builtin_model_as_it_loads():
    """The pre-scaled built-in model (llama3 x4 shipped): native equals the unpatched model at 2 x Ls; none does not."""
    lm = load_model("builtin-llama3", device="cpu", dtype="fp32")
    assert (lm.rope.train_len, lm.rope.shipped_len, lm.rope.shipped.rope_type) == (256, 1024, "llama3")
    plain = AutoModelForCausalLM.from_pretrained(BUILTIN_FOLDERS["builtin-llama3"], dtype=torch.float32).eval()
    ids = np.random.default_rng(0).integers(5, 4000, size=2048).astype(np.int64)
    geom = lm.rope.geometry(2048 / 256)
    with lm.scaled(make_spec("native").schedule(geom, 2048), False):
        ours = lm.window_nll(ids, None, None)[0]
    with lm.scaled(make_spec("none").schedule(geom, 2048), False):
        unscaled = lm.window_nll(ids, None, None)[0]
    theirs = window_nll(plain, torch.from_numpy(ids)[None])[0]
    assert ours == pytest.approx(theirs, rel=1e-5) and abs(unscaled - theirs) > 1e-3 * abs(theirs)
