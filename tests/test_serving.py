"""A workload per runtime (`compare --workload --runtime`): the expected loss is each length evaluated
alone under the schedule written here by hand for each runtime's rule; the rule agrees with what
`verify` reads back from every export type; bad workloads fail in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ropecli.cli.app import app
from ropecli.evaluation.evaluator import Evaluator
from ropecli.export.registry import record
from ropecli.export.runtimes.llamacpp import gguf_applied
from ropecli.export.runtimes.transformers import transformers_applied
from ropecli.export.runtimes.vllm import vllm_applied
from ropecli.export.served import served
from ropecli.models.config import BUILTIN_DIR
from ropecli.spec import make_spec
from ropecli.tuning.advise_exports import runtime_pick
from ropecli.tuning.workload import parse_workload

from helpers import runner

SHARES = {128: 0.5, 256: 0.3, 512: 0.2}  # the built-in model: L = 256; the target 512 = 2L
MIX = ",".join(f"{n}:{w}" for n, w in SHARES.items())



@pytest.fixture(scope="module")
def served_out():
    r = runner.invoke(app, ["compare", "--method", "yarn,ntk-fixed,dynamic", "--len", "512", "--workload", MIX,
                            "--samples", "3", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def by_hand(builtin, runtime: str, method: str, consistent: bool, n: int):
    """The schedule `runtime` applies at n, written from docs/guide/export.md's table, not from export/served.py."""
    geom = builtin.rope.geometry(2.0)
    own = make_spec(method, factor=2.0)
    if method == "dynamic":
        if runtime == "transformers":
            return make_spec("dynamic")  # at the request's own length
        frozen = make_spec("dynamic").schedule(geom, 512)  # vLLM: the base fixed once, at k*L
        return make_spec("longrope", {"factors": tuple(frozen.factors), "attention_factor": 1.0}, factor=2.0)
    if runtime == "transformers" and not consistent and n <= 256:  # short_factor = 1, attention_factor kept
        return make_spec("longrope", {"factors": (1.0,) * 32, "attention_factor": own.schedule(geom).attention_factor},
                         factor=2.0)
    return own


@pytest.mark.parametrize("runtime", ["transformers", "vllm", "llamacpp"])
def test_expected_loss_is_each_length_evaluated_alone_under_the_runtime_rule(served_out, builtin, runtime):
    ev = Evaluator.over(builtin, samples=3)
    rows = served_out["serving"]["runtimes"][runtime]["rows"]
    assert {(r["candidate"].split("(")[0], r["consistent"]) for r in rows} == (
        {("yarn", False), ("yarn", True), ("ntk-fixed", False), ("ntk-fixed", True), ("dynamic", True)}
        if runtime == "transformers" else {("yarn", True), ("ntk-fixed", True), ("dynamic", True)})
    for r in rows:
        method = r["candidate"].split("(")[0]
        if runtime == "llamacpp" and method == "dynamic":
            assert r["unservable"] == "llama.cpp has no dynamic NTK"
            continue
        alone = {n: ev.evaluate(by_hand(builtin, runtime, method, r["consistent"], n), n, span=max(SHARES))  # the same windows' first n tokens
                 for n in SHARES}
        tokens = {n: w * n / sum(v * m for m, v in SHARES.items()) for n, w in SHARES.items()}  # each served token weighs the same
        # abs 5e-5: compare may score a request in its own pass where `alone` reads the prefix of the longest one, equal
        # up to fp32 rounding (measured: 3.5e-5 nats/token at 128 tokens of a window without BOS, 1e-6 with one)
        assert r["expected_nll"] == pytest.approx(sum(w * alone[n].nll for n, w in tokens.items()), abs=5e-5)
        per_window = [sum(w * alone[n].values[i] for n, w in tokens.items()) for i in range(3)]
        assert np.allclose(r["values"], per_window, atol=1e-4)


def test_a_switching_export_differs_from_the_consistent_one_below_L_only(served_out):
    rows = {(r["candidate"], r["consistent"]): r for r in served_out["serving"]["runtimes"]["transformers"]["rows"]}
    for name in ("yarn(beta_fast=32, beta_slow=1)", "ntk-fixed"):
        switch, always = rows[(name, False)], rows[(name, True)]
        assert switch["ppl"]["512"] == always["ppl"]["512"]
        assert switch["ppl"]["128"] != always["ppl"]["128"]
    vllm = {r["candidate"]: r for r in served_out["serving"]["runtimes"]["vllm"]["rows"]}
    assert vllm["ntk-fixed"]["ppl"] == rows[("ntk-fixed", True)]["ppl"]  # vLLM: the schedule at every length


def test_prefix_scoring_keeps_a_three_length_workload_cheap(tmp_path):
    """A 3-length workload costs what the target alone costs where the runtime applies one schedule (llama.cpp:
    every length a prefix of the 512 pass), and in transformers one more pass per window: the unscaled
    model below L, shared by every candidate, plus YaRN's attention factor on the unscaled frequencies."""
    args = ["compare", "--method", "yarn,ntk-fixed", "--len", "512", "--samples", "3", "--json"]
    single = json.loads(runner.invoke(app, [*args, "--cache-dir", str(tmp_path / "a")]).stdout)
    runs = {rt: json.loads(runner.invoke(app, [*args, "--workload", MIX, "--runtime", rt, "--cache-dir",
                                                 str(tmp_path / rt)]).stdout) for rt in ("llamacpp", "transformers")}
    assert single["forward_passes"] == 6
    # + decode across L: one window for an export that runs one schedule at every step, every window for a switching
    # one; + the model as shipped at L, the reference of the cost within L (transformers: the unscaled model it serves
    # below L already)
    assert runs["llamacpp"]["forward_passes"] == 6 + 2 + 3
    assert runs["transformers"]["forward_passes"] == 6 + 3 + 3 + 2 + 2 * 3  # + none below L, + yarn's short_factor = 1


@pytest.mark.parametrize("method", ["yarn", "ntk-fixed", "mixed", "llama3", "dynamic"])
def test_the_rule_is_what_verify_reads_back_from_each_export(builtin, tmp_path, method):
    spec, geom = make_spec(method), builtin.rope.geometry(2.0)
    for to, consistent in (("hf", False), ("hf", True), ("vllm", False)):
        out = tmp_path / f"{to}-{consistent}.json"
        flags = ["export", "--model", str(BUILTIN_DIR), "--method", method, "--len", "512", "--to", to, "--out", str(out)]
        r = runner.invoke(app, flags + (["--consistent"] if consistent else ["--switching"]))
        assert r.exit_code == 0, r.output
        block = json.loads(out.read_text())
        for n in (128, 512):
            got = served(record("vllm" if to == "vllm" else "transformers"), spec, n, builtin.rope, 2.0, consistent).spec
            read = (vllm_applied(block, 512, 64) if to == "vllm" else transformers_applied(block, n, (), 64))[0]
            sched = got.schedule(geom, n)
            assert np.allclose(sched.factors, read.factors, rtol=1e-5), (to, consistent, n)
            assert sched.attention_factor == pytest.approx(read.attention_factor, rel=1e-6)


def test_the_llamacpp_rule_is_what_verify_reads_back_from_the_gguf(builtin, builtin_gguf, tmp_path):
    for method in ("yarn", "ntk-fixed", "llama3"):
        out = tmp_path / f"{method}.gguf"
        r = runner.invoke(app, ["export", "--model", str(builtin_gguf), "--method", method, "--len", "512", "--to", "gguf",
                                "--out", str(out)])
        assert r.exit_code == 0, r.output
        for n in (128, 512):
            got = served(record("llamacpp"), make_spec(method), n, builtin.rope, 2.0).spec.schedule(builtin.rope.geometry(2.0), n)
            read = gguf_applied(out, n)[0]
            assert np.allclose(got.factors, read.factors, rtol=1e-6) and got.attention_factor == pytest.approx(read.attention_factor)


@pytest.mark.parametrize("args, needle", [
    (["--workload", "2048"], "LENGTH:SHARE"),
    (["--workload", "128:0"], "positive share"),
    (["--len", "256", "--workload", "128:0.5,512:0.5"], "past the target length 256"),
    (["--runtime", "vllm"], "add one, e.g. --workload"),
])
def test_bad_workloads_are_one_line(args, needle):
    r = runner.invoke(app, ["compare", "--method", "yarn", *args])
    assert r.exit_code != 0 and needle in r.output and "Traceback" not in r.output, r.output


def test_a_file_of_request_lengths_is_histogrammed(tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("100\n130\n250\n260\n1000\n")
    w = parse_workload(str(f), 1024)
    assert w.shares == {128: 0.4, 256: 0.4, 1024: 0.2}
    assert w.token_shares == pytest.approx({128: 51.2 / 358.4, 256: 102.4 / 358.4, 1024: 204.8 / 358.4})
    assert parse_workload(None, 512).shares == {512: 1.0}


def test_advise_serves_its_candidates_per_runtime_and_exports_to_match(tmp_path):
    """advise --workload: a serving section over the candidates (on the first round's held-out windows), its
    tables in report.md, and each runtime's export the candidate and variant `runtime_pick` chose."""
    out = tmp_path / "a"
    r = runner.invoke(app, ["advise", "--len", "512", "--candidates", "none,yarn,ntk-fixed,dynamic", "--samples", "2",
                            "--workload", MIX, "--runtime", "transformers,vllm", "--out", str(out)])
    assert r.exit_code == 0, r.output
    advice = json.loads((out / "advice.json").read_text())
    runtimes = advice["serving"]["runtimes"]
    assert set(runtimes) == {"transformers", "vllm"}
    assert {row["name"] for row in runtimes["vllm"]["rows"]} == {"none", "yarn", "ntk-fixed", "dynamic"}
    for runtime, e in zip(("transformers", "vllm"), advice["exports"]):
        pick = runtime_pick(runtimes[runtime], advice["winner"])
        assert e["ok"] and f"--method {pick['method']}" in e["command"]
        assert ("--switching" in e["command"]) == (not pick["consistent"])
    report = (out / "report.md").read_text()
    assert "## Served over your workload" in report and "### vllm" in report and (out / "serving.png").is_file()


def test_runtime_pick_keeps_the_winner_unless_it_is_shown_worse():
    def row(name, nll, verdict, consistent=True, safe=None):
        return {"name": name, "expected_nll": nll, "consistent": consistent, "vs_best": {"best": verdict == "best", "verdict": verdict},
                **({"generation_safe": safe} if safe is not None else {})}

    block = {"rows": [row("a", 3.0, "best"), row("w", 3.05, "undecided", False, True), row("w", 3.1, "undecided")]}
    assert not runtime_pick(block, "w")["consistent"]  # undecided: the winner stays, in its better safe export
    block = {"rows": [row("a", 3.0, "best"), row("w", 3.2, "worse"), row("w", 3.3, "worse", False, True)]}
    assert runtime_pick(block, "w")["name"] == "a"
    # a switching export whose decode damage is not shown harmless is never picked, however well it scores in one pass
    block = {"rows": [row("w", 3.0, "best", False, False), row("w", 3.1, "undecided")]}
    assert runtime_pick(block, "w")["consistent"]
    block = {"rows": [row("w", 3.0, "best", False)]}  # switching, decode not measured: not safe
    assert runtime_pick(block, "w") is None
    assert runtime_pick(None, "w") is None


def test_shorter_lengths_come_from_a_cached_window_kept_nll(tmp_path):
    """A window cached at 512 with every prediction's NLL kept gives its 128- and 256-token prefixes with no
    forward pass; they agree with a fresh forward pass to 2e-4 nats at 128 tokens (float16-kept NLL: the
    rounding averages out as 1/sqrt(n); the verdicts' margin is 0.01)."""
    base = ["compare", "--method", "yarn", "--k", "2", "--samples", "2", "--json"]
    first = json.loads(runner.invoke(app, [*base, "--len", "512", "--cache-dir", str(tmp_path / "c")]).stdout)
    lengths = ["--len", "128", "--len", "256", "--len", "512"]
    derived = json.loads(runner.invoke(app, [*base, *lengths, "--cache-dir", str(tmp_path / "c")]).stdout)
    fresh = json.loads(runner.invoke(app, [*base, *lengths, "--cache-dir", str(tmp_path / "d")]).stdout)
    assert first["forward_passes"] == 2 and derived["forward_passes"] == 0 and fresh["forward_passes"] == 2
    for a, b in zip(derived["results"], fresh["results"]):
        assert a["len"] == b["len"] and a["nll"] == pytest.approx(b["nll"], abs=2e-4)
        assert np.allclose(a["window_nll"], b["window_nll"], atol=3e-4)
