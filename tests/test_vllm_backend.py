"""`--backend vllm` against `--backend transformers` on the built-in model (fp32, this CPU): every evaluating command
gives the same numbers (each window's and prompt's within 1e-4 nats), the same verdicts and rankings and the same
generated answers, for a schedule (YaRN) and under Self-Extend, DCA and LaMPE; KL from the two engines' whole
distributions; tensor parallelism 2 scores what one rank scores; the refusals are one line each.

Every command here runs in this process, so they share one vLLM process (`Worker.shared`): vLLM is imported once and
an engine is started per model and schedule or map, 1-2 s each at the KV cache a block needs (`kv_cache_bytes`).
Skipped, with the reason, where no vLLM environment is found (.venv-vllm, made by .ci/run; $ROPECLI_VLLM_PYTHON)."""

import json
import os
from importlib.util import find_spec

import pytest

from ropecli.export.runtimes.vllm import checkout_vllm_python
from ropecli.export.vllm_backend import kv_cache_bytes, thread_binding

from helpers import run

PYTHON = checkout_vllm_python()
pytestmark = pytest.mark.skipif(PYTHON is None, reason="no vLLM environment (.venv-vllm or ROPECLI_VLLM_PYTHON; "
                                                      ".ci/run makes one)")
TOL = 1e-4  # nats: a window's mean NLL, a prompt's answer NLL
N = 512  # 2L of the built-in model: every map's far region in play
MAPS = ["none", "selfextend:G=8,W=64", "dca:chunk=192,local=16", "lampe:head=16,tail=6"]
COMMANDS = {  # name: the command's arguments (both backends run each, --json)
    "compare": ["compare", "--len", N, "--method", "yarn", *[x for m in MAPS for x in ("--map", m)], "--samples", 2,
                "--metric", "ppl,passkey", "--task", "niah-single", "--generate", "--prompts", 2],
    "kl": ["kl", "--k", 4, "--method", "yarn,mixed", "--samples", 2],
    "search": ["search", "--method", "yarn", "--vary", "beta_fast=8:64", "--budget", 4, "--len", N, "--samples", 2],
    "search-b": ["search-b", "--len", N, "--samples", 2],
    "advise": ["advise", "--len", N, "--samples", 2, "--candidates", "yarn,selfextend,dca", "--budget", 8],
}
SKIP = {"seconds", "cached", "runtime", "model_fingerprint", "memory", "device", "dtype", "cache", "commands", "exports",
        "written", "forward_passes", "elapsed_s", "position_vs_best"}  # position_vs_best: a tie broken by 1e-7
# an interval's width and ends: t times a standard error, and t of 2 windows (1 degree of freedom) is 12.7: the
# numbers under them agree within TOL, these within 20 TOL (relative); the verdicts they give are compared exactly
WIDE = {"half_width", "se", "lower", "upper"}


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """{command: {backend: its JSON}}, every command on both backends, one cache each."""
    base = tmp_path_factory.mktemp("backends")
    before = {k: os.environ.get(k) for k in ("ROPECLI_VLLM_PYTHON", "ROPECLI_CACHE_DIR")}
    os.environ["ROPECLI_VLLM_PYTHON"] = PYTHON
    out: dict = {}
    try:
        for backend in ("transformers", "vllm"):
            os.environ["ROPECLI_CACHE_DIR"] = str(base / backend / "cache")
            for name, args in COMMANDS.items():
                extra = ["--out", base / backend / name, "--force"] if name == "advise" else []
                r = run(*args, *extra, "--backend", backend, "--json")
                assert r.exit_code == 0, (name, backend, r.output[-2000:])
                out.setdefault(name, {})[backend] = json.loads(r.stdout)
                out.setdefault("said", {})[(name, backend)] = r.stderr
        os.environ["ROPECLI_CACHE_DIR"] = str(base / "tp2" / "cache")  # two ranks, the Self-Extend cell on its own
        r = run("ppl", "--len", N, "--method", "yarn", "--map", MAPS[1], "--samples", 2, "--backend", "vllm",
                "--tensor-parallel", 2, "--json")
        assert r.exit_code == 0, r.output[-2000:]
        out["tp2"] = json.loads(r.stdout)
    finally:
        for k, v in before.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return out


def differences(vllm, transformers, path="") -> list[str]:
    """Where two JSON answers differ: a number by more than TOL (relative above 1), anything else at all."""
    if isinstance(vllm, dict):
        return [d for k in vllm if k not in SKIP for d in differences(vllm[k], transformers.get(k), f"{path}.{k}")]
    if isinstance(vllm, list) and isinstance(transformers, list) and len(vllm) == len(transformers):
        return [d for i, (a, b) in enumerate(zip(vllm, transformers)) for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(vllm, float) and isinstance(transformers, float):
        tol = TOL * (20 if path.rsplit(".", 1)[-1].split("[")[0] in WIDE else 1)
        return [] if abs(vllm - transformers) <= tol * max(1.0, abs(transformers)) else [f"{path}: {vllm} vs {transformers}"]
    return [] if vllm == transformers else [f"{path}: {str(vllm)[:80]} vs {str(transformers)[:80]}"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_evaluating_command_gives_the_transformers_numbers_verdicts_and_answers(answers, command):
    got = answers[command]
    assert got["vllm"]["runtime"] == "vllm" and got["transformers"]["runtime"] == "transformers"
    found = differences(got["vllm"], got["transformers"])
    assert not found, "\n".join(found)


def test_the_comparison_covers_a_schedule_and_three_maps_on_both_scores(answers):
    """What the equality above is over: every cell measured, the generated answers there (and not all alike)."""
    rows = answers["compare"]["vllm"]["results"]
    assert {r["position_map"] and r["position_map"]["name"] for r in rows} == {None, "selfextend", "dca", "lampe"}
    assert {r["metric"] for r in rows} == {"ppl", "passkey", "niah-single"}
    said = [s for r in rows if r["metric"] == "passkey" for s in r["prompt_said"]]
    assert len(said) == 4 * 10 and len(set(said)) > 10  # 10 prompts a cell, greedy, different answers
    assert all(r["vs_best"] is None or r["vs_best"]["verdict"] for r in rows)


def test_kl_in_vllm_is_the_whole_distributions_kl(answers):
    rows = answers["kl"]["vllm"]["results"]
    assert all(r["kl_mean"] > 0.01 and 50 < r["top1_agreement"] < 100 for r in rows)  # a schedule's real cost


def test_two_tensor_parallel_ranks_score_what_one_rank_scores(answers):
    one = next(r for r in answers["compare"]["vllm"]["results"]
               if r["metric"] == "ppl" and (r["position_map"] or {}).get("name") == "selfextend")
    two = answers["tp2"]["results"][0]
    assert abs(two["nll"] - one["nll"]) <= TOL and len(two["window_nll"]) == 2
    assert all(abs(a - b) <= TOL for a, b in zip(two["window_nll"], one["window_nll"]))


def test_a_search_sets_each_schedule_in_one_running_engine(answers):
    """search-b's schedules (and its references) differ in their factors alone: one engine, rescheduled."""
    said = answers["said"][("search-b", "vllm")].splitlines()
    line = next(x for x in said if "engine(s) started" in x)  # the engine the command before left may serve the first
    assert line.split(": ")[1].split(" engine")[0] in ("0", "1") and "schedule(s) set in a running engine" in line, line


def test_the_advice_reproduces_with_the_engine_it_was_measured_in(answers):
    command = answers["advise"]["vllm"]["commands"][0]
    assert "--backend vllm" in command and "--candidates yarn,selfextend,dca" in command


@pytest.mark.parametrize("args, said", [
    (["ppl", "--len", 512, "--tensor-parallel", 2], "--tensor-parallel is vLLM's: add --backend vllm"),
    (["ppl", "--len", 512, "--backend", "vllm", "--max-model-len", 300], "--len 512 is beyond --max-model-len 300"),
    (["ppl", "--len", 512, "--backend", "vllm", "--log-n"], "log-n under --backend vllm"),
    (["ppl", "--len", 512, "--backend", "vllm", "--device-map", "auto"], "--device-map does not apply to --backend vllm"),
])
def test_what_vllm_cannot_run_is_one_line(args, said, monkeypatch):
    monkeypatch.setenv("ROPECLI_VLLM_PYTHON", PYTHON)
    r = run(*args)
    assert r.exit_code != 0 and said in r.output and "Traceback" not in r.output


def test_without_vllm_the_backend_says_how_to_install_it(monkeypatch):
    if find_spec("vllm") is not None:
        pytest.skip("vLLM imports in this environment: the backend runs it here")
    monkeypatch.delenv("ROPECLI_VLLM_PYTHON", raising=False)
    r = run("ppl", "--len", 512, "--backend", "vllm")
    assert r.exit_code != 0 and "ROPECLI_VLLM_PYTHON" in r.output and "pip install vllm" in r.output


def test_a_cpu_engine_holds_the_kv_cache_a_block_needs():
    assert kv_cache_bytes(8192, 576) == 256 << 20  # the built-in model at 2L: the floor
    assert kv_cache_bytes(8192 * 64, 16384) == 2 * 16384 * 8192 * 64  # 2 full-length sequences (CONCURRENT)
    assert kv_cache_bytes(8192 * 32, 16384, 10 << 30) == int(0.4 * (10 << 30))  # 40 % of 10 GiB available, not 8 GiB
    assert kv_cache_bytes(8192 * 8, 16384, 1 << 30) == 1 << 30  # never under one sequence (1 GiB)
    assert thread_binding(2, 2) == "0|1" and thread_binding(16, 2) == "0-7|8-15"
