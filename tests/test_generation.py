"""Generation is what is served: an export must stay right while a runtime decodes through its KV cache.

The oracle is transformers itself: the exported folder loaded with plain `from_pretrained`, a prompt prefilled, the
continuation fed one token at a time with the cache (teacher-forced), against one forward pass of the same tokens.
"""

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from ropecli.cli.app import app
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.decode_across import DecodePlan
from ropecli.evaluation.evaluator import Evaluator
from ropecli.export.registry import record
from ropecli.export.served import decode_damage
from ropecli.models.cached_decoding import cache_keyword
from ropecli.spec import make_spec

from helpers import runner

PROMPT, TOTAL = 200, 600  # the built-in model's L = 256: a prompt shorter than L, decoded well past it


@pytest.fixture(scope="module")
def window(builtin):
    ev = Evaluator.over(builtin, samples=1, cache=EvalCache(enabled=False))
    return torch.from_numpy(ev.inputs.windows(TOTAL).ids[0])[None]


def export(tmp_path, name, *flags):
    out = tmp_path / name
    r = runner.invoke(app, ["export", "--model", "builtin", "--len", "1024", "--to", "transformers", "--out", str(out),
                            *flags])
    assert r.exit_code == 0, r.output
    return out, r.output


@torch.inference_mode()
def transformers_decoding(folder, ids):
    """(mean NLL of the continuation decoded token by token with the cache, the same tokens in one forward pass),
    and the largest difference of one token, in nats: transformers alone, on the exported folder."""
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    full = torch.log_softmax(model(ids).logits[0].float(), -1)
    one = -full[PROMPT - 1:-1].gather(1, ids[0, PROMPT:, None])[:, 0]
    cache = DynamicCache(config=model.config)
    kw = {cache_keyword(model): cache}
    logits = [model(ids[:, :PROMPT], use_cache=True, **kw).logits[0, -1]]
    for t in range(PROMPT, ids.shape[1] - 1):
        logits.append(model(ids[:, t:t + 1], use_cache=True, **kw).logits[0, -1])
    decoded = -torch.log_softmax(torch.stack(logits).float(), -1).gather(1, ids[0, PROMPT:, None])[:, 0]
    return decoded.mean().item(), one.mean().item(), (decoded - one).abs().max().item()


EXPORTS = {"yarn": ["--method", "yarn"], "yarn --switching": ["--method", "yarn", "--switching"],
           "dynamic": ["--method", "dynamic"]}


@pytest.fixture(scope="module")
def decodings(tmp_path_factory, window):
    """{export: (its folder, what `export` printed, transformers_decoding of it)}: each export of EXPORTS decoded once
    by transformers, for every test that reads it."""
    base = tmp_path_factory.mktemp("exports")
    out = {}
    for name, flags in EXPORTS.items():
        folder, said = export(base, name.replace(" ", ""), *flags)
        out[name] = folder, said, transformers_decoding(folder, window)
    return out


def test_the_default_export_decodes_across_L_as_one_forward_pass(decodings):
    """YaRN at 4L exported by default, a 200-token prompt continued to 600 tokens through the cache equals one forward
    pass within 1e-4 nats per token; the switching export (short_factor = 1 up to L) does not, by far, and says so when
    it is written."""
    _, _, (decoded, one, _) = decodings["yarn"]
    assert abs(decoded - one) < 1e-4, (decoded, one)
    _, output, (decoded, one, worst) = decodings["yarn --switching"]
    assert decoded - one > 0.2 and worst > 3, (decoded, one, worst)  # stale keys past the switch
    text = " ".join(output.split())
    assert "warning: --switching" in text and "nats/token through the cache against" in text  # the damage, printed


@pytest.mark.parametrize("name", list(EXPORTS))
def test_ropecli_decodes_as_transformers_does(builtin, decodings, name):
    """ropecli's decode measurement (the runtime's segments, `decode_segments`) is transformers' own token-by-token
    decoding of the exported folder: the switch at L, dynamic NTK's base growing at every token past L."""
    _, _, (want, one, _) = decodings[name]
    ev = Evaluator.over(builtin, samples=1, cache=EvalCache(enabled=False))
    got = decode_damage(ev, record("transformers"), make_spec(name.split()[0]), 4.0, "--switching" not in name,
                        DecodePlan(PROMPT, TOTAL))
    assert got["decode_nll"] == pytest.approx(want, abs=1e-4) and got["one_pass_nll"] == pytest.approx(one, abs=1e-4)


def test_fixed_runtimes_decode_as_one_pass_and_switching_is_measured(builtin):
    """vLLM and llama.cpp apply one schedule to every step: decoding equals one pass (float rounding only); the
    switching export in transformers is shown damaged on held-out windows."""
    ev = Evaluator.over(builtin, samples=4, cache=EvalCache(enabled=False))
    plan = DecodePlan.across(256, 1024)
    assert (plan.prompt_len, plan.total_len) == (224, 320)
    for runtime in ("vllm", "llamacpp", "ollama"):
        r = decode_damage(ev, record(runtime), make_spec("yarn"), 4.0, False, plan)
        assert r["one_schedule"] and abs(r["damage"]["diff"]) < 1e-5 and r["windows"] == 1
    r = decode_damage(ev, record("transformers"), make_spec("yarn"), 4.0, False, plan)
    assert not r["one_schedule"] and r["windows"] == 4 and r["damage"]["verdict"] == "worse"
    assert [s["how"] for s in r["segments"]] == ["longrope short_factor", "longrope long_factor"]


def test_a_switching_export_never_reaches_a_user_silently(tmp_path):
    """Without a model to measure on, --switching still warns; with --json the measurement is in the output;
    dynamic NTK in transformers (which grows its base per token) is measured the same way."""
    r = runner.invoke(app, ["export", "--d", "64", "--base", "10000", "--train-len", "256", "--method", "yarn", "--len",
                            "1024", "--switching"])
    assert r.exit_code == 0 and "warning: --switching" in r.output and "not measured: pass --model" in r.output
    r = runner.invoke(app, ["export", "--model", "builtin", "--method", "dynamic", "--len", "1024", "--json"])
    out = json.loads(r.stdout)
    assert out["switching"]["damage"]["diff"] > 0 and any("grows its base" in line for line in out["lines"])
    r = runner.invoke(app, ["export", "--model", "builtin", "--method", "dynamic", "--len", "1024", "--to", "vllm", "--json"])
    assert "switching" not in json.loads(r.stdout)  # vLLM fixes dynamic NTK at start-up: nothing to warn about


def test_compare_workload_has_a_decode_row_per_runtime():
    r = runner.invoke(app, ["compare", "--method", "yarn", "--len", "512", "--samples", "3", "--workload",
                            "256:0.5,512:0.5", "--json"])
    serving = json.loads(r.stdout)["serving"]
    assert serving["decode"] == {"prompt_len": 224, "total_len": 320, "switch": 256}
    rows = {(rt, row["variant"]): row for rt, block in serving["runtimes"].items() for row in block["rows"]}
    assert set(rows) == {("transformers", "consistent (default)"), ("transformers", "--switching"),
                         ("vllm", "as exported"), ("llamacpp", "as exported")}
    assert not rows[("transformers", "--switching")]["generation_safe"]
    assert rows[("transformers", "--switching")]["decode"]["damage"]["diff"] > 0.1
    assert all(rows[k]["generation_safe"] for k in rows if k[1] != "--switching")
    assert np.isclose(rows[("vllm", "as exported")]["decode"]["damage"]["diff"], 0, atol=1e-5)


def test_verify_decodes_across_L(decodings):
    """verify's transformers run includes generation: the default export passes, a switching one fails in one line
    naming the damage."""
    folder, switching = decodings["yarn"][0], decodings["yarn --switching"][0]
    r = runner.invoke(app, ["verify", str(folder), "--json"])
    checks = {c["what"].split(" (")[0]: c for c in json.loads(r.stdout)["checks"]}
    assert r.exit_code == 0 and checks["decode across L"]["ok"], r.output
    r = runner.invoke(app, ["verify", str(switching)])
    assert r.exit_code == 1 and "MISMATCH: decode across L" in r.output and "go stale" in " ".join(r.output.split())
