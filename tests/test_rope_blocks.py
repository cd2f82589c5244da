"""Hand-edited rope blocks: a block no runtime would serve is refused in one line naming the key and the
fix, before any weight is read; every block a real model ships still reads. A fuzz over such blocks: each bad
value of each key, and random mixes of them, in the transformers-5 and transformers-4 spellings."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import transformers

from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.models.config import rope_from_config
from ropecli.models.rope_block import check_config_blocks

from helpers import runner
from tiny_models import build, char_tokenizer

BASE = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "max_position_embeddings": 256}
GOOD = {  # one valid block per type: the fuzz mutates one key of these at a time
    "linear": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4},
    "ntk_alpha": {"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 1e4},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
             "rope_theta": 1e4},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "rope_theta": 5e5},
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 64, "short_factor": [1.0] * 8,
                 "long_factor": [2.0] * 8, "rope_theta": 1e4},
}
BAD = {  # key -> values no runtime would serve, and the words the refusal must contain
    "factor": ([-4.0, 0, "4", float("nan"), float("inf"), True, [4.0]], "factor="),
    "alpha": ([-1.0, 0, "1000", float("nan")], "alpha="),
    "original_max_position_embeddings": ([0, -64, "abc", 64.5, "64", float("inf")], "original_max_position_embeddings="),
    "rope_theta": ([1.0, 0, -1e4, "1e4", float("nan")], "rope_theta="),
    "beta_fast": (["32", float("nan")], "beta_fast="),
    "low_freq_factor": (["1"], "low_freq_factor="),
    "high_freq_factor": ([0.5, 1.0, "4"], "high_freq_factor="),
    "attention_factor": ([0, -1.0, "1.1"], "attention_factor="),
    "partial_rotary_factor": ([0, 1.5, -0.5, "0.5"], "partial_rotary_factor="),
    "long_factor": ([[1.0] * 7, [1.0] * 9, "2.0", [0.0] * 8, [-1.0] * 8, ["2"] * 8], "long_factor="),
    "short_factor": ([[1.0] * 3, [float("nan")] * 8], "short_factor="),
}
APPLIES = {"alpha": ("ntk_alpha",), "high_freq_factor": ("llama3",), "low_freq_factor": ("llama3",),
           "long_factor": ("longrope",), "short_factor": ("longrope",), "beta_fast": ("yarn",)}


def cases():
    """(type, key, value): every bad value of every key, on each block type it applies to."""
    for key, (values, _) in BAD.items():
        for kind in APPLIES.get(key, tuple(GOOD)):
            for v in values:
                yield kind, key, v


def config_with(kind: str, key: str | None, value, v4: bool = False) -> dict:
    block = dict(GOOD[kind])
    if key is not None:
        block[key] = value
    if v4:  # transformers 4: rope_theta at the top level, the block as rope_scaling with `type`
        theta = block.pop("rope_theta")
        block["type"] = block.pop("rope_type")
        return {**BASE, "rope_theta": theta, "rope_scaling": block}
    return {**BASE, "rope_parameters": block}


@pytest.mark.parametrize("kind", sorted(GOOD))
@pytest.mark.parametrize("v4", [False, True])
def test_every_valid_block_reads(kind, v4):
    rope = rope_from_config("m", config_with(kind, None, None, v4), None)
    assert rope.shipped is not None and rope.rotary_dim == 16


@pytest.mark.parametrize("kind,key,value", list(cases()), ids=lambda x: repr(x)[:24])
def test_a_bad_value_is_refused_naming_its_key(kind, key, value):
    for v4 in (False, True):
        if v4 and key == "rope_theta":
            continue  # the transformers-4 spelling keeps rope_theta at the top level: covered there (`where` = config)
        with pytest.raises(RopeCliError) as err:
            rope_from_config("m", config_with(kind, key, value, v4), None)
        msg = str(err.value)
        assert BAD[key][1] in msg and "\n" not in msg and "config.json" in msg, msg


def test_lengths_that_contradict_each_other_are_refused():
    for kind in ("linear", "llama3", "longrope"):
        cfg = config_with(kind, "original_max_position_embeddings", 512)  # above max_position_embeddings 256
        with pytest.raises(RopeCliError, match="original_max_position_embeddings=512 is above max_position_embeddings=256"):
            rope_from_config("m", cfg, None)
    rope_from_config("m", config_with("yarn", "original_max_position_embeddings", 512), None)  # yarn: Ls = L0 x factor
    for bad in (0, "8k", -1):
        with pytest.raises(RopeCliError, match="max_position_embeddings"):
            check_config_blocks({**BASE, "max_position_embeddings": bad})


def test_random_mixes_of_bad_keys_are_refused_in_one_line():
    rng = random.Random(49)
    pool = list(cases())
    for _ in range(200):
        kind = rng.choice(sorted(GOOD))
        picks = [c for c in rng.sample(pool, 3) if c[0] == kind] or [next(c for c in pool if c[0] == kind)]
        cfg = config_with(kind, None, None)
        for _, key, value in picks:
            cfg["rope_parameters"][key] = value
        with pytest.raises(RopeCliError) as err:
            rope_from_config("m", cfg, None)
        assert "\n" not in str(err.value) and any(BAD[key][1] in str(err.value) for _, key, _ in picks), (picks, err.value)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "model"
    build("llama").save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


@pytest.mark.parametrize("key,value", [("factor", -4), ("original_max_position_embeddings", "abc"),
                                       ("long_factor", [1.0, 1.0])])
def test_the_commands_refuse_before_any_weight_is_read(tiny_folder, tmp_path, monkeypatch, key, value):
    folder = tmp_path / "edited"
    shutil.copytree(tiny_folder, folder)
    cfg = json.loads((folder / "config.json").read_text())
    kind = "longrope" if key == "long_factor" else "yarn"
    cfg["rope_parameters"] = {**GOOD[kind], "short_factor": [1.0] * 8} if kind == "longrope" else dict(GOOD[kind])
    cfg["rope_parameters"][key] = value
    (folder / "config.json").write_text(json.dumps(cfg))

    def no_weights(*a, **k):
        raise AssertionError("weights were read before the block was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    for args in (["ppl", "--model", str(folder), "--len", "64", "--samples", "1"], ["freqs", "--model", str(folder)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 1, r.output
        err = r.stderr.strip()
        assert len(err.splitlines()) == 1 and err.startswith("Error: the model's rope_parameters") and f"{key}=" in err, err


def test_rope_blocks_not_per_layer_type_are_refused_in_one_line():
    """Rope blocks keyed by neither the layer types nor DeepSeek V4's rope kinds (main, compress) are refused, not
    misread; V4's are read, its compress block (the long range) scaled by default."""
    blocks = {"main": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.125},
              "compress": {"rope_type": "default", "rope_theta": 1.6e5, "partial_rotary_factor": 0.125}}
    cfg = {**BASE, "layer_types": ["heavily_compressed_attention"] * 2, "num_hidden_layers": 2, "rope_parameters": blocks}
    rope = rope_from_config("m", cfg, None)
    assert rope.scaled_types == ("compress",) and rope.base == 1.6e5 and rope.layer_bases["main"] == 1e4
    odd = {**cfg, "rope_parameters": {"local": blocks["main"], "global": blocks["compress"]}}
    with pytest.raises(RopeCliError, match=r"rope blocks \(global, local\) name neither its layer types"):
        rope_from_config("m", odd, None)
