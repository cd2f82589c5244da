"""Position maps: the registry's relative positions, and the mapped attention inside a tiny
model — exact where a map's near region covers the window, equal to an independent per-pair reference elsewhere,
the same through a KV cache as in one pass, refused in one line where it cannot be right."""

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, DynamicCache, MistralConfig, MistralForCausalLM
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.maps import map_run
from ropecli.maps.map_bands import CAUSAL, split_band
from ropecli.maps.map_pairs import relative_positions
from ropecli.maps.map_rules import selfextend_rule
from ropecli.maps.map_spelling import map_from_json, under_maps
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import MAPS, bind, map_params, map_regions
from ropecli.spec import Spec
from ropecli.tuning.candidates import default_candidates, map_rule

from helpers import reference_attention, rotate_at
from tiny_models import build


def test_relative_positions_follow_the_formulas():
    se = relative_positions("selfextend", {"G": 2, "W": 4}, 10)
    assert se[9].tolist() == [6, 6, 5, 5, 4, 4, 3, 2, 1, 0]  # floor(9/2) + 4 - 2 - floor(j/2) beyond W; true within
    assert relative_positions("rerope", {"w": 3}, 6)[5].tolist() == [3, 3, 3, 2, 1, 0]
    assert relative_positions("leaky-rerope", {"w": 3, "k": 2}, 8)[7].tolist() == [5, 4.5, 4, 3.5, 3, 2, 1, 0]
    # DCA, chunk 6, local 2 (c = 4): i = 9 sits in chunk 2 at 1; chunk 1's keys see the query at min(1 + 4, 6) = 5,
    # chunk 0's at min(2 * 4 - 1, 6) = 6 (ChunkLlama's qc_t clamped at chunk_size), keys at j mod 4
    assert relative_positions("dca", {"chunk": 6, "local": 2}, 10)[9].tolist() == [6, 5, 4, 3, 5, 4, 3, 2, 1, 0]
    assert np.nanmax(relative_positions("dca", {"chunk": 48, "local": 4}, 256)) <= 48  # never past the chunk size
    # STRING, S = 5, W = 2: d >= 5 becomes d - 3 (relative positions 2.. reused), the window below S as it is
    assert relative_positions("string", {"S": 5, "W": 2}, 9)[8].tolist() == [5, 4, 3, 2, 4, 3, 2, 1, 0]
    for name, params in (("selfextend", {"G": 4, "W": 8}), ("rerope", {"w": 8}), ("leaky-rerope", {"w": 8, "k": 4})):
        rel = relative_positions(name, params, 64)
        low = np.tril(np.ones((64, 64), bool))
        assert np.all(np.diff(rel[low.nonzero()[0].max()][: 64]) <= 0)  # farther keys never come nearer
        assert np.nanmax(rel) < 64 and np.isnan(rel[~low]).all()


def longlm_relative(G: int, W: int, n: int, divide) -> np.ndarray:
    """LongLM's Self-Extend, transliterated (datamllab/LongLM @ cdbbb06, self_extend_patch/Llama_4_40.py): the prefill
    (:130-132, the neighbour mask for d < W) with `divide` for W over G, and the decode step (:266-268) at every query;
    (n, n) relative positions, NaN above the diagonal. Returns (prefill, decode)."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    re_w = 0 if n - 1 < W else W  # _re_group_size_2: the longest query below W groups nothing
    prefill = np.where(i - j < W, i - j, (i // G + re_w - divide(re_w, G)) - j // G).astype(float)
    decode = np.full((n, n), np.nan)
    for p in range(n):  # position_ids[:, -1] = p, keys 0..p; the last W keys neighbours, the rest grouped
        keys = np.arange(p + 1)
        re_w = 0 if p < W else W
        group = p // G - keys // G + (re_w - re_w // G)
        decode[p, : p + 1] = np.concatenate([group[: max(0, p + 1 - W)], (p - keys)[max(0, p + 1 - W):]])
    prefill[i < j] = np.nan
    return prefill, decode


def test_selfextend_follows_the_authors_rule_where_G_does_not_divide_W():
    # G = 5, W = 1,024 is LongLM's README example; 64 over 32 is docs/methods.md's measured pair
    for G, W in ((5, 12), (3, 10), (64, 32), (4, 8)):
        n = 3 * W + 2 * G + 7
        fixed, decode = longlm_relative(G, W, n, lambda w, g: w // g)
        ours = relative_positions("selfextend", {"G": G, "W": W}, n)
        np.testing.assert_array_equal(ours, fixed)  # the prefill as fixed (715c1e3)
        np.testing.assert_array_equal(ours, decode)  # and every decode step: one rule for the prompt and the answer
        floated, _ = longlm_relative(G, W, n, lambda w, g: w / g)  # the flash prefills' '/'
        assert np.array_equal(ours, floated, equal_nan=True) == (W % G == 0)


def test_bad_parameters_are_one_line():
    with pytest.raises(RopeCliError, match="G = 0 is outside"):
        map_params("selfextend", {"G": 0, "W": 8})
    with pytest.raises(RopeCliError, match="selfextend needs W"):
        map_params("selfextend", {"G": 2})
    with pytest.raises(RopeCliError, match="has no parameter q"):
        map_params("rerope", {"w": 4, "q": 1})
    with pytest.raises(RopeCliError, match="unknown position map 'yarn'"):
        map_params("yarn", {})
    assert set(MAPS) >= {"none", "selfextend", "rerope", "leaky-rerope", "dca"}
    with pytest.raises(RopeCliError, match="W = 8 must be below S = 8"):
        relative_positions("string", {"S": 8, "W": 8}, 16)
    with pytest.raises(RopeCliError, match="local = 8 must be below chunk = 8"):
        relative_positions("dca", {"chunk": 8, "local": 8}, 16)


def nll(model, ids) -> float:
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float()
    return torch.nn.functional.cross_entropy(logits, ids[0, 1:]).item()


@pytest.mark.parametrize("family", ["llama", "qwen2"])  # GQA: 4 query heads on 2 key heads
def test_a_map_whose_near_region_covers_the_window_is_the_model(family):
    model, ids = build(family), torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(0))
    plain = nll(model, ids)
    for name, params in (("none", {}), ("selfextend", {"G": 4, "W": 48}), ("rerope", {"w": 48}),
                         ("leaky-rerope", {"w": 48, "k": 8}), ("dca", {"chunk": 56, "local": 4}),
                         ("string", {"S": 48, "W": 8, "t": 1}), ("selfextend-llamacpp", {"G": 4, "W": 48})):
        with mapped(model, bind(name, params), block=16):  # three query blocks
            assert abs(nll(model, ids) - plain) < 1e-5, name
    assert "forward" not in model.model.__dict__  # put back
    with mapped(model, bind("string", {"S": 48, "W": 8})):  # STRING's own temperature (t = 1.069 on cos and sin) is felt
        assert abs(nll(model, ids) - plain) > 1e-4
    with mapped(model, bind("selfextend", {"G": 4, "W": 8})):
        assert abs(nll(model, ids) - plain) > 1e-3  # the map does change the scores beyond W


class PairReference:
    """An independent reference: each pair's score from the map's relative position alone, the query rotated by
    rel[i, j] and the key at 0 (no regions, no masks beyond causality)."""

    def __init__(self, rel: np.ndarray, rotary):
        self.rel, self.rotary = torch.tensor(rel), rotary

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        B, H, T, D = query.shape
        groups = H // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        k0 = rotate_at(key, torch.zeros(T), self.rotary)
        scores = torch.full((B, H, T, T), float("-inf"))
        for i in range(T):
            qi = rotate_at(query[:, :, i:i + 1].expand(B, H, i + 1, D), self.rel[i, : i + 1], self.rotary)  # (B, H, i+1, D)
            scores[:, :, i, : i + 1] = (qi * k0[:, :, : i + 1]).sum(-1) * scaling
        return torch.matmul(torch.softmax(scores, -1), value).transpose(1, 2).contiguous(), None


@pytest.mark.parametrize(("name", "params"), [("selfextend", {"G": 3, "W": 5}), ("rerope", {"w": 6}),
                                              ("leaky-rerope", {"w": 4, "k": 3}), ("dca", {"chunk": 8, "local": 2}),
                                              ("dca", {"chunk": 20, "local": 2}),  # chunks of 18: its intra- and
                                              # successive-chunk regions batched (`chunk_attention`)
                                              ("string", {"S": 9, "W": 3, "t": 1}),
                                              ("selfextend-llamacpp", {"G": 2, "W": 6})])
def test_the_mapped_attention_equals_a_per_pair_reference(name, params):
    model, ids = build("llama"), torch.randint(0, 96, (1, 24), generator=torch.Generator().manual_seed(1))
    with mapped(model, bind(name, params), block=7):
        got = nll(model, ids)
    with reference_attention(model, lambda rotary: PairReference(relative_positions(name, params, 24), rotary)):
        want = nll(model, ids)
    assert abs(got - want) < 1e-5 and abs(got - nll(model, ids)) > 1e-4, (got, want)


@pytest.mark.parametrize(("name", "params"), [("selfextend", {"G": 3, "W": 5}), ("dca", {"chunk": 8, "local": 2}),
                                              ("dca", {"chunk": 20, "local": 2})])
def test_the_fused_kernel_and_its_explicit_twin_agree(name, params, monkeypatch):
    """The CPU path runs torch's flash kernel (its log-sum-exp merges the regions); other devices the explicit scores."""
    model, ids = build("qwen2"), torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(4))
    with mapped(model, bind(name, params), block=16), torch.no_grad():
        assert map_run._flash_kernel(ids.float(), None) is not None
        fused = model(ids).logits
        monkeypatch.setattr(map_run, "_FUSED", None)
        twin = model(ids).logits
    assert torch.allclose(fused, twin, atol=1e-5), (fused - twin).abs().max()


@pytest.mark.parametrize(("name", "params"), [("selfextend", {"G": 2, "W": 8}), ("rerope", {"w": 6}),
                                              ("leaky-rerope", {"w": 6, "k": 4}), ("dca", {"chunk": 12, "local": 2}),
                                              ("string", {"S": 10, "W": 3}), ("selfextend-llamacpp", {"G": 2, "W": 8})])
def test_decoding_through_the_cache_follows_the_map(name, params):
    """Keys stay unrotated in the cache: a prefill then one token at a time, across the map's window (and DCA's chunks)
    and across the model's L = 64, gives one pass's logits: decoding serves what the forward pass measured."""
    model, ids = build("llama"), torch.randint(0, 96, (1, 80), generator=torch.Generator().manual_seed(2))
    with mapped(model, bind(name, params)), torch.no_grad():
        whole = model(ids).logits[0]
        cache = DynamicCache()
        steps = [model(ids[:, :56], cache=cache, use_cache=True).logits[0]]
        for t in range(56, 80):
            steps.append(model(ids[:, t:t + 1], cache=cache, use_cache=True).logits[0])
    assert torch.allclose(torch.cat(steps), whole, atol=1e-4), (torch.cat(steps) - whole).abs().max()


def test_passkey_at_4L_selfextend_reads_what_the_best_schedule_misses():
    """Through the command: the built-in model (L = 256) at 4L = 1,024, ropecli's real-text prompts.
    Self-Extend G = 8, W = 64 on the unscaled model retrieves at every depth (the probe: 100 %, answer NLL 0.01);
    llama3 x4, the best frequency schedule, loses the far keys (the probe: 25 % at depth 0, NLL 1.87)."""
    r = CliRunner().invoke(app, ["passkey", "--len", "1024", "--method", "none,llama3", "--map", "none",
                                 "--map", "selfextend:G=8,W=64", "--samples", "2", "--json", "--text"])
    assert r.exit_code == 0, r.output
    rows = {row["method"] + ("@" + row["position_map"]["name"] if row["position_map"] else ""): row
            for row in json.loads(r.stdout)["results"]}
    se, llama3 = rows["none@selfextend"], rows["llama3"]
    assert [d["accuracy"] for d in se["by_depth"]] == [1.0] * 5 and se["answer_nll"] < 0.1, se["by_depth"]
    assert llama3["answer_nll"] > 10 * se["answer_nll"] and rows["none"]["accuracy"] < 0.5
    assert se["vs_best"]["best"] and se["position_map"] == {"name": "selfextend", "params": {"G": 8.0, "W": 64.0}}


def test_a_map_where_it_cannot_run_is_one_line():
    r = CliRunner().invoke(app, ["ppl", "--len", "256", "--map", "selfextend:G=0,W=8"])
    assert r.exit_code == 1 and "G = 0 is outside" in r.output.strip().splitlines()[-1], r.output
    r = CliRunner().invoke(app, ["compare", "--len", "512", "--map", "selfextend:G=4,W=64", "--workload", "256:0.5,512:0.5"])
    assert r.exit_code == 1 and "leave --map out of a --workload comparison" in r.output, r.output
    r = CliRunner().invoke(app, ["ppl", "--len", "256", "--map", "selfextend:G=4,W=256"])  # W >= the window: no map
    assert r.exit_code == 1 and "W = 256 reaches the whole 256-token window" in r.output.strip().splitlines()[-1], r.output


@pytest.mark.parametrize("v_head_dim", [16, 8])
def test_an_mla_model_decodes_under_a_map_as_one_pass(v_head_dim):
    """Multi-head latent attention: the rope part (each head's last qk_rope_head_dim dims, the shared k_rot)
    rotated per region, the latent part as is; the cache keeps k_rot unrotated, so decoding token by token past W gives
    the logits of one pass; values narrower than queries (v_head_dim 8 < 16) too."""
    cfg = DeepseekV3Config(vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None,
                           qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=v_head_dim, n_routed_experts=2,
                           num_experts_per_tok=1, n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1,
                           max_position_embeddings=64)
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(cfg).eval()
    ids = torch.randint(0, 96, (1, 40))
    with torch.no_grad(), mapped(model, bind("selfextend", {"G": 2, "W": 8})):
        whole = model(ids).logits[0]
        cache = DynamicCache(config=cfg)
        steps = [model(ids[:, :20], past_key_values=cache, use_cache=True).logits[0]]
        steps += [model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits[0] for t in range(20, 40)]
    assert (torch.cat(steps) - whole).abs().max() < 1e-4


def test_compare_gives_each_candidate_its_effective_length():
    """compare with passkey: a column and a line per candidate, against the model's own retrieval at Ls (its prompts
    there, run once); JSON: point estimate, shown length, and what each length's bound was."""
    args = ["compare", "--len", "1024", "--metric", "passkey-text", "--method", "none", "--map", "none",
            "--map", "selfextend:G=8,W=64", "--samples", "1"]
    out = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)["effective_length"]
    assert out["reference"]["len"] == 256 and out["threshold"] == 0.85
    assert out["candidates"]["none@selfextend(G=8,W=64)"]["point"] == 1024 and out["candidates"]["none"]["point"] is None
    table = CliRunner().invoke(app, args).output
    assert "eff. length (shown)" in table and "effective length (passkey-text accuracy at least 85%" in " ".join(table.split())


def test_export_serves_a_map_only_where_a_runtime_does(builtin_gguf, tmp_path):
    """Self-Extend goes to llama.cpp beside the schedule's GGUF as its -gan/-gaw flags for the builds that serve it (the
    runtime record names the maps; tests/test_llamacpp_selfextend.py checks the lines per build); transformers serves
    every per-pair map through its exported folder (tests/test_map_folder.py); a runtime that serves none, and a map it
    does not serve, is one line naming who does; llama.cpp's W % G == 0 is checked before writing."""
    def export(*args):
        return CliRunner().invoke(app, ["export", "--model", builtin_gguf, "--method", "yarn", "--len", "1024", *args])

    out = tmp_path / "se.gguf"
    r = export("--to", "llamacpp", "--out", str(out), "--map", "selfextend:G=8,W=64", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["position_map"] == {"name": "selfextend", "params": {"G": 8.0, "W": 64.0}} and out.exists()
    assert any(f"llama-completion -m {out} -c 1024 -gan 8 -gaw 64 -b 64" in line for line in got["lines"])
    assert "not recommended on current llama.cpp" in got["lines"][0]  # said first
    assert not any(line.startswith("llama.cpp: llama-server") for line in got["lines"])  # never the schedule alone
    r = export("--to", "llamacpp", "--out", str(tmp_path / "bad.gguf"), "--map", "selfextend:G=3,W=64")
    assert r.exit_code == 1 and "W a multiple of G" in r.output and not (tmp_path / "bad.gguf").exists()
    r = CliRunner().invoke(app, ["export", "--method", "yarn", "--len", "32768", "--to", "sglang", "--map", "selfextend:G=8,W=64"])
    assert r.exit_code == 1 and "transformers, vllm, llamacpp serve it" in r.output.strip().splitlines()[-1], r.output
    r = CliRunner().invoke(app, ["export", "--method", "yarn", "--len", "32768", "--to", "vllm", "--map", "selfextend:G=8,W=64"])
    assert r.exit_code == 1 and "pass --out DIR" in r.output.strip().splitlines()[-1], r.output  # a folder, as transformers
    r = export("--to", "llamacpp", "--out", str(tmp_path / "re.gguf"), "--map", "rerope:w=64")
    assert r.exit_code == 1 and "transformers, vllm serve it" in r.output, r.output
    records = {r["name"]: r["maps"] for r in json.loads(CliRunner().invoke(app, ["runtimes", "--json"]).stdout)}
    assert records["llamacpp"] == ["selfextend", "selfextend-llamacpp"] and records["sglang"] == ["dca"]
    assert records["vllm"] == records["transformers"] == list(MAPS)  # every registered map, in the registry's order
    #   # every registered map, in the registry's order


def test_dca_goes_to_sglang_as_its_config_block_and_backend(tmp_path):
    """SGLang's DCA: the override's dual_chunk_attention_config read back as the same map, the backend named in the
    launch line; refused for an architecture whose SGLang model does not pass the config, and under a schedule."""
    qwen = tmp_path / "qwen"
    build("qwen2").config.save_pretrained(qwen)
    run = lambda *a: CliRunner().invoke(app, ["export", *a, "--len", "1024", "--to", "sglang"])  # noqa: E731
    r = run("--model", str(qwen), "--method", "none", "--map", "dca:chunk=48,local=4", "--out", str(tmp_path / "o.json"),
            "--json")
    assert r.exit_code == 0, r.output
    got, block = json.loads(r.stdout), json.loads((tmp_path / "o.json").read_text())
    dca = block["dual_chunk_attention_config"]
    assert map_from_json({"name": "dca", "params": {"chunk": dca["chunk_size"], "local": dca["local_size"]}}) == \
        map_from_json(got["position_map"]) == bind("dca", {"chunk": 48, "local": 4})
    assert dca["original_max_position_embeddings"] == 0 and block["max_position_embeddings"] == 1024
    assert "--attention-backend dual_chunk_flash_attn --context-length 1024" in got["command"]
    assert CliRunner().invoke(app, ["verify", str(tmp_path / "o.json")]).exit_code == 0  # the manifest says what was measured
    (tmp_path / "o.json").write_text(json.dumps({**block, "dual_chunk_attention_config": {**dca, "local_size": 8}}))
    r = CliRunner().invoke(app, ["verify", str(tmp_path / "o.json")])
    assert r.exit_code == 1 and "local_size: expected 4, found 8" in r.output, r.output
    r = run("--model", str(qwen), "--method", "yarn", "--map", "dca:chunk=48,local=4")
    assert r.exit_code == 1 and "takes the model's plain RoPE" in r.output.strip().splitlines()[-1], r.output
    llama = tmp_path / "llama"
    build("llama").config.save_pretrained(llama)
    r = run("--model", str(llama), "--method", "none", "--map", "dca:chunk=48,local=4")
    assert r.exit_code == 1 and "never passes dual_chunk_attention_config" in r.output, r.output
    assert "sglang<=0.5.19" in r.output  # the last SGLang with the DCA backend
    assert got["lines"][0].startswith("SGLang serves Dual Chunk Attention in sglang<=0.5.19 only")


def test_search_varies_a_maps_parameters_rounded_to_tokens():
    """search under --map: the map's parameters are dims (--vary G=4:16), integer ones rounded before a point runs (the
    label and the cache key say what ran), the winner judged on held-out prompts beside the standard methods."""
    r = CliRunner().invoke(app, ["search", "--len", "512", "--method", "none", "--map", "selfextend:G=8,W=64",
                                 "--vary", "G=4:16", "--budget", "4", "--objective", "passkey", "--samples", "1",
                                 "--depths", "0,1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    labels = [e["label"] for e in out["evaluations"]]
    assert all(lab.startswith("none@selfextend(G=") and ",W=64)" in lab for lab in labels), labels
    assert all(float(e["params"]["G"]).is_integer() for e in out["evaluations"])
    assert 4 <= out["best_params"]["G"] <= 16 and "@selfextend" in out["best_label"] and out["held_out"]["rows"]
    r = CliRunner().invoke(app, ["search", "--method", "none", "--map", "selfextend:G=8,W=64", "--vary", "G"])
    assert r.exit_code == 1 and "give the map's parameter its range" in r.output


def test_what_a_map_cannot_do_yet_fails_before_the_work():
    """Review findings, each one line before any forward pass (or a point marked infeasible in a search)."""
    run = lambda *a: CliRunner().invoke(app, [str(x) for x in a])  # noqa: E731
    r = run("search", "--method", "none", "--map", "selfextend:G=8,W=64", "--vary", "G=2:16", "--export-config", "x.json")
    assert r.exit_code == 1 and "--export-config writes a transformers block" in r.output
    r = run("ppl", "--len", "64", "--len", "512", "--map", "selfextend:G=8,W=64", "--samples", "1")  # the prefix path too
    assert r.exit_code == 1 and "W = 64 reaches the whole 64-token window" in r.output
    r = run("search", "--len", "512", "--method", "none", "--map", "selfextend:G=8,W=64", "--vary", "W=32:1024",
            "--budget", "4", "--objective", "passkey", "--samples", "1", "--depths", "0", "--json")
    assert r.exit_code == 0, r.output  # points with W >= 512 are infeasible, not the end of the search

    assert any("reaches the whole" in e.get("infeasible", "") for e in json.loads(r.stdout)["evaluations"]) or \
        all(e["params"]["W"] < 512 for e in json.loads(r.stdout)["evaluations"])


def test_a_model_whose_every_layer_slides_is_refused_not_silently_unchanged():
    """Mistral with a window on every layer: no layer attends past the window, so no layer is mapped; said in one
    line rather than run as the unpatched model under the map's name. Without the window the same model maps."""
    cfg = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, max_position_embeddings=64)
    ids = torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(3))
    model = MistralForCausalLM(MistralConfig(**cfg, sliding_window=16))
    with pytest.raises(RopeCliError, match="no layer to map: this model's layers are RoPE sliding"):
        with mapped(model, bind("rerope", {"w": 8})), torch.no_grad():
            model(ids)
    plain = MistralForCausalLM(MistralConfig(**cfg, sliding_window=None))
    with mapped(plain, bind("rerope", {"w": 8})), torch.no_grad():
        assert plain(ids).logits.shape == (1, 40, 96)


def test_a_map_after_at_goes_on_the_methods_named_only():
    specs = [Spec("none"), Spec("yarn")]
    got = [s.label for s in under_maps(specs, ["none", "selfextend:G=4,W=2048@none"])]
    assert got == ["none", "none@selfextend(G=4,W=2048)", "yarn"]
    assert len(under_maps(specs, ["none", "rerope:w=64"])) == 4  # no @: every method under every map
    with pytest.raises(RopeCliError, match="llama3 is not among the methods compared"):
        under_maps(specs, ["rerope:w=64@none+llama3"])


def test_kl_within_L_measures_what_a_map_costs_there():
    """KL at L against the model as shipped (advise's cost within L): zero for no map, positive under a map active at L."""
    r = CliRunner().invoke(app, ["compare", "--len", "512", "--method", "none", "--map", "none", "--map", "rerope:w=64",
                                 "--metric", "kl", "--samples", "1", "--json"])
    assert r.exit_code == 0, r.output
    kl = {row["label"]: row["kl_mean"] for row in json.loads(r.stdout)["results"]}
    assert kl["none"] < 1e-6 < kl["none@rerope(w=64)"], kl


def llamacpp_completion(T: int, G: int, W: int, B: int) -> np.ndarray:
    """tools/completion/completion.cpp's Self-Extend, cell by cell: before each batch of B tokens, its while loop moves
    the cached cells' positions (seq_add: += delta in [p0, p1); seq_div: //= d in [p0, p1)); the batch's tokens then
    sit at n_past, n_past + 1, …; rel[i, j] = the query's position - the key's while query i's batch is decoded."""
    cells, rel, n_past, ga_i = [], np.full((T, T), np.nan), 0, 0

    def seq_add(p0, p1, delta):
        cells[:] = [p + delta if p0 <= p < p1 else p for p in cells]

    def seq_div(p0, p1, d):
        cells[:] = [p // d if p0 <= p < p1 else p for p in cells]

    for start in range(0, T, B):
        while n_past >= ga_i + W:
            ib, bd = (G * ga_i) // W, (W // G) * (G - 1)
            dd = (W // G) - ib * bd - W
            seq_add(ga_i, n_past, ib * bd)
            seq_div(ga_i + ib * bd, ga_i + ib * bd + W, G)
            seq_add(ga_i + ib * bd + W, n_past + ib * bd, dd)
            n_past -= bd
            ga_i += W // G
        batch = list(range(start, min(T, start + B)))
        cells += [n_past + t for t in range(len(batch))]
        for t, i in enumerate(batch):
            rel[i, : i + 1] = (n_past + t) - np.array(cells[: i + 1])
        n_past += len(batch)
    return rel


def test_selfextend_llamacpp_is_what_llamacpps_completion_tool_holds_in_its_cache():
    """The map is llama.cpp's cache bookkeeping (batches of W, as the export's -b W decodes them), which agrees with the
    paper's per-pair formula on few pairs, by less than W - W/G, and never reaches farther than it."""
    for T, G, W in ((40, 2, 4), (97, 4, 16), (130, 8, 32), (700, 4, 24)):  # the last: 29 batches, a steady state of grouping
        ours = relative_positions("selfextend-llamacpp", {"G": G, "W": W}, T)
        assert np.array_equal(ours, llamacpp_completion(T, G, W, W), equal_nan=True), (T, G, W)
        paper = relative_positions("selfextend", {"G": G, "W": W}, T)
        low = ~np.isnan(paper)
        assert 0 < (ours[low] == paper[low]).mean() < 0.7 and np.abs(ours - paper)[low].max() < W - W // G + 1
        assert np.nanmax(ours) <= np.nanmax(paper)
    longer = llamacpp_completion(130, 8, 32, 64)  # a batch longer than W: true positions past the paper's reach
    assert np.nanmax(longer) > np.nanmax(relative_positions("selfextend", {"G": 8, "W": 32}, 130))
    with pytest.raises(RopeCliError, match="W = 6 must be a multiple of G = 4"):
        relative_positions("selfextend-llamacpp", {"G": 4, "W": 6}, 16)


def test_advise_map_candidates_follow_their_sources_rules():
    """Self-Extend's group keeps the farthest pair's rotation distance below Ls, with W a multiple of G (llama.cpp);
    DCA takes ChunkLlama's 3Ls/4 and Ls/16; the maps join the default tournament only where they can run past Ls."""
    for Ls, T in ((256, 1024), (8192, 16384), (4096, 65536)):
        G, W = selfextend_rule(Ls, T).values()
        assert W % G == 0 and (T - 1) // G + W - W // G <= Ls - 1
        assert G == 2 or (T - 1) // (G - 1) + W - W // (G - 1) > Ls - 1 or W != Ls // 4 // (G - 1) * (G - 1)
        assert np.nanmax(relative_positions("selfextend", {"G": G, "W": W}, T)) <= Ls - 1 if T <= 1024 else True
    assert selfextend_rule(8192, 16384) == {"G": 3, "W": 2046}
    assert map_rule("dca", 8192, 16384) == bind("dca", {"chunk": 6144, "local": 512})
    assert {"selfextend", "dca"} <= set(default_candidates(False, maps=True))
    assert not {"selfextend", "dca", "selfextend-tuned"} & set(default_candidates(False, maps=False))
    assert "selfextend-tuned" not in default_candidates(True, maps=True)  # a search of mapped passes: asked for by name


def test_the_map_help_names_every_registered_map():
    text = " ".join(CliRunner().invoke(app, ["ppl", "--help"], env={"COLUMNS": "400"}).output.split())
    missing = [name for name in MAPS if f" {name}" not in text.split("--map", 1)[1].split("--", 1)[0]]
    assert not missing, missing


def test_no_code_branches_on_a_map_name():
    """Which maps a runtime or a backend serves is declared data (a record's `maps`, a module-level tuple); no function
    outside the map registry names a map: a new map is a registry record, never a search through the tree."""
    root = Path(__file__).parents[1] / "ropecli"
    registry = {"position_maps", "map_spelling", "map_pairs", "map_rules", "pair_selection",
                "llamacpp_positions"}  # the maps package's numpy half, where the maps are defined
    found = []
    for path in root.rglob("*.py"):
        part = path.relative_to(root).parts[0]
        if part == "rope" or (part == "maps" and path.stem in registry):
            continue
        for fn in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)):
            found += [f"{path.name}:{c.lineno} {c.value}" for c in ast.walk(fn)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in set(MAPS) - {"none"}]
    assert not found, found


@pytest.mark.parametrize(("name", "params"), [("none", {}), ("selfextend", {"G": 8, "W": 64}), ("rerope", {"w": 128}),
                                              ("leaky-rerope", {"w": 100, "k": 4}), ("dca", {"chunk": 192, "local": 16}),
                                              ("string", {"S": 85, "W": 16}), ("selfextend-llamacpp", {"G": 8, "W": 64})])
def test_the_kernel_calls_partition_every_regions_pairs(name, params):
    """The CPU path's parts of a region (`maps.map_bands.split_band`: full columns, causal diagonals, masked parts,
    halved by rows) cover each of its pairs from a block of queries exactly once, and compute at most 2x the pairs
    the map keeps: the kernel works on about what the map needs."""
    T, block, computed, kept = 900, 512, 0.0, 0
    kj = torch.arange(T)
    for r in map_regions(name, map_params(name, params), T):
        for start in range(0, T, block):
            qi = torch.arange(start, min(T, start + block))
            mask = r.where(qi[:, None], kj[None, :]) & (qi[:, None] >= kj[None, :])
            cover = torch.zeros_like(mask, dtype=torch.int)
            for r0, r1, lo, hi, part in split_band(mask):
                full = torch.ones(r1 - r0, hi - lo, dtype=torch.bool)
                cover[r0:r1, lo:hi] += full if part is None else full.tril() if part is CAUSAL else part
                computed += (r1 - r0) * (hi - lo) / (2 if part is CAUSAL else 1)
            assert torch.equal(cover, mask.int()), (name, start)
            kept += int(mask.sum())
    assert computed <= 2.0 * kept, computed / kept  # DCA: 1.7x (its chunks cross the 128-row halves)


def test_a_shifted_causal_triangle_runs_in_one_call():
    """The identity's region and Self-Extend's grouped one (d >= W) are one causal triangle over the window; its
    neighbour region and DCA's are not (`whole_triangles`)."""
    def whole(name, params, T=700):
        run = SimpleNamespace(regions=map_regions(name, map_params(name, params), T), period=None, block=512)
        pos = torch.arange(T)
        return map_run.row_plan(run, pos, pos, None, None, None, torch.float32)[0][1]

    assert whole("none", {}) == {0: (0, 0)}
    assert whole("selfextend", {"G": 4, "W": 64}) == {1: (64, 64)}  # grouped: rows from 64 on, keys 0 … i - 64
    assert whole("rerope", {"w": 64}) == {1: (64, 64)}  # capped: rows from 64 on, keys 0 … i - 64, one call
    assert whole("dca", {"chunk": 192, "local": 16}) == {}
