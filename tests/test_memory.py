"""Memory before the run (`ropecli.models.memory`): the estimate from the files against what transformers
allocates (weights, and the KV cache of one sequence), and a model that cannot fit refused before loading."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import ropecli.cli.session_opening as opening
from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.models.gguf_families import gguf_layer_types
from ropecli.models.memory import (
    LOGIT_BUDGET_BYTES,
    MemoryPlan,
    activation_bytes,
    kv_cache_bytes,
    map_working_set,
    memory_before_loading,
)

from architectures import ARCHS, build_arch


def allocated_kv(model, n: int) -> int:
    """Bytes of the cache transformers builds for one sequence of n tokens: keys and values, and the conv and recurrent
    states of linear-attention layers."""
    with torch.no_grad():
        cache = model(torch.zeros(1, n, dtype=torch.long), use_cache=True).past_key_values
    tensors = {}  # by storage: DeepSeek V4's values are its keys
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                tensors[t.data_ptr()] = t
        for name in ("conv_states", "recurrent_states", "buffer_kv", "buffer_gate", "compressed_kv", "overlap_kv",
                     "overlap_gate"):  # linear attention's states; DeepSeek V4's compressed entries and their buffers
            tensors |= {id(t): t for t in (getattr(layer, name, None) or {}).values() if isinstance(t, torch.Tensor)}
    return sum(t.numel() * t.element_size() for t in tensors.values())


@pytest.mark.parametrize("name", ["builtin", "builtin-llama3"])
def test_builtin_models_estimate_equals_allocation(name):
    n = 300
    plan = memory_before_loading(name, None, "float32", n)
    lm = load_model(name, device="cpu", dtype="fp32")
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    assert plan.weights == weights
    assert plan.kv_cache == allocated_kv(lm.model, n)


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.name)
def test_kv_cache_estimate_per_layer_kind(arch):
    """Every architecture of the matrix, per layer kind: sliding and chunked layers hold at most their window or chunk
    - 1 tokens (Gemma 3/4, gpt-oss, Llama 4), MLA its compressed latent (DeepSeek-V3, Mistral 4), Gemma 4's global
    layers their own head dim, linear-attention layers a fixed state (Qwen3.5); the others every token."""
    model = build_arch(arch)
    for n in (8, 100):
        text = model.config.get_text_config().to_dict()
        assert kv_cache_bytes(text, n, 4)[0] == allocated_kv(model, n), (arch.name, n)


def test_memory_in_the_header_and_json(tmp_path, text_file):
    r = CliRunner().invoke(app, ["ppl", "--len", "256", "--samples", "1", "--data", text_file, "--json",
                                 "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    mem = json.loads(r.stdout)["memory"]
    assert mem["length"] == 256 and mem["kv_cache_bytes"] == 4 * 2 * 4 * 64 * 4 * 256  # layers x K,V x heads x dim x fp32
    said = " ".join(r.stderr.split())  # the console wraps the line
    assert "memory: weights 17" in said and "KV cache at 256 tokens" in said and "activations at 256 tokens" in said
    # a map's extra: queries and output, GQA's repeated keys and values (none here: 4 of 4 heads), three
    # regions' rotated keys, two float32 log-sum-exps; printed with the estimate
    assert mem["map_extra_bytes"] == 256 * ((2 * 4 + 0 + 3 * 4) * 64 * 4 + 2 * 4 * 4)
    assert "under a position map up to" in said


def test_a_maps_extra_counts_the_heads_gqa_repeats():
    text = {"num_attention_heads": 32, "num_key_value_heads": 4, "hidden_size": 2048}  # the 1B shape of bench_gpu_maps
    assert map_working_set(text, 1000, 2) == 1000 * ((64 + 56 + 12) * 64 * 2 + 256)
    assert map_working_set(text | {"num_key_value_heads": 32}, 1000, 2) == 1000 * ((64 + 0 + 96) * 64 * 2 + 256)
    # DPE's key pairs: three regions' keys rotated per query head twice, each with rotate-half's two temporaries
    assert map_working_set(text, 1000, 2, key_pairs=True) == 1000 * ((64 + 56 + 3 * 5 * 32) * 64 * 2 + 256)


def test_a_model_that_cannot_fit_is_refused_before_loading(tmp_path, text_file, monkeypatch):
    monkeypatch.setattr(opening, "available_memory", lambda device: 1000)
    monkeypatch.setattr(opening, "load_model", lambda *a, **kw: pytest.fail("loaded a model that cannot fit"))
    r = CliRunner().invoke(app, ["ppl", "--len", "256", "--samples", "1", "--data", text_file, "--cache-dir", str(tmp_path)])
    assert r.exit_code == 1
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "needs 17" in err and "--dtype bf16" in err


def test_a_gguf_with_a_window_lays_out_its_sliding_layers_as_llama_cpp_does():
    """Gemma 3's GGUF states a window and no layer types: llama.cpp's pattern (every 6th layer global) decides which
    layers cache every token. Without it, all 18 layers of Gemma 3 270M counted as sliding (18.8 MB at 49k)."""
    meta = {"gemma3.block_count": 18, "gemma3.attention.sliding_window": 512}
    types = gguf_layer_types(meta, "gemma3")
    assert [i for i, t in enumerate(types) if t == "full_attention"] == [5, 11, 17]
    assert gguf_layer_types({"gemma2.block_count": 4, "gemma2.attention.sliding_window": 4096}, "gemma2") == \
        ["sliding_attention", "full_attention"] * 2
    assert gguf_layer_types({"llama.block_count": 4}, "llama") is None
    text = {"num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
            "sliding_window": 512, "layer_types": types}
    n = 49152
    assert kv_cache_bytes(text, n, 4)[0] == (3 * n + 15 * 511) * 2 * 256 * 4


def test_the_activation_estimate_grows_with_the_layer_not_the_square_of_the_length():
    """A scoring forward pass holds the residual stream and the wider of a layer's attention and MLP (linear in T:
    sliding layers banded, sdpa fused), or a chunk of logits at the head; doubling T at most doubles it."""
    text = {"hidden_size": 640, "intermediate_size": 2048, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 256, "vocab_size": 262144}
    a, b = activation_bytes(text, 32768, 4), activation_bytes(text, 65536, 4)
    assert a == (2 * 640 + 3 * 2048) * 32768 * 4 and b == 2 * a
    assert activation_bytes(text, 16, 4) == max((2 * 640 + 3 * 2048) * 16 * 4, 640 * 16 * 4 + 2 * 16 * 262144 * 4)
    assert activation_bytes(text, 4096, 4) == 640 * 4096 * 4 + 2 * LOGIT_BUDGET_BYTES  # the head's chunk, full


def test_the_memory_line_covers_loading_a_gguf(builtin_gguf, tmp_path):
    """Loading a GGUF dequantizes it through temporaries: Gemma 3 270M printed "2.79 GB to score" and peaked at 3.67 GB
    while loading alone peaked at 3.43 GB. The line printed once the model is loaded says the whole run's
    peak, measured loading included, and the JSON keeps it; what the run then measured exceeds it by 5 % at most (the
    tiny built-in model: a few MB of torch's own buffers beside its small activations; a real model's activation
    estimate is the larger, conservative part)."""
    r = CliRunner().invoke(app, ["ppl", "--model", str(builtin_gguf), "--len", "512", "--samples", "1", "--json",
                                 "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    memory = json.loads(r.stdout)["memory"]
    assert "measured: loading peaked at" in r.output and "so this run needs about" in r.output, r.output
    assert memory["run_peak_bytes"] >= memory["load_peak_bytes"]
    assert memory["run_peak_bytes"] >= 0.95 * memory["peak_bytes"], memory
    plan = MemoryPlan(weights=10, kv_cache=1, length=8, dtype="float32", layers=1, kv_per_token=1, activations=5, process=5)
    assert plan.run_peak(load_peak=100, held=30) == 100 and plan.run_peak(load_peak=20, held=30) == 35
