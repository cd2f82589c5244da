"""Every evaluating command under torchrun: 2 CPU ranks (gloo) on the built-in model give the
numbers of one process exactly, compute each window once, print once; a killed rank ends the run
quickly and the rerun resumes from the cache; bad setups are one line."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ropecli.errors import RopeCliError
from ropecli.evaluation.distributed import gpu_group, setup

from helpers import run

# both runs get the same numeric environment: torchrun gives each rank one thread unless told otherwise
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def single(args, cache):
    """The command in one process: this one, on one thread (what torchrun gives each rank), so that the two runs'
    sums are the same to the last bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        r = run(*args, "--json", "--cache-dir", cache)
    finally:
        torch.set_num_threads(threads)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), r.stderr


def torchrun(args, cache, nproc=2, extra_env=None, **kw):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port", str(_port()),
           "-m", "ropecli", *args, "--json", "--cache-dir", str(cache)]
    return subprocess.run(cmd, env={**ENV, **(extra_env or {})}, capture_output=True, text=True, timeout=600, **kw)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_entries(cache: Path) -> dict:
    """Entry name (the hash of its key) -> result, without the wall time it took."""
    out = {}
    for p in sorted(cache.glob("*.json")):
        result = json.loads(p.read_text())["result"]
        result.pop("seconds")
        out[p.name] = result
    return out


@pytest.mark.parametrize("args", [
    ["ppl", "--len", "256", "--len", "512", "--method", "mixed", "--k", "2", "--samples", "3"],  # one pass scores both lengths
    ["compare", "--len", "512", "--method", "none,ntk-fixed", "--samples", "2"],
    ["search-b", "--len", "512", "--samples", "2", "--tol", "0.15"],
], ids=["ppl", "compare", "search-b"])
def test_two_ranks_equal_one_process(args, tmp_path):
    one, _ = single(args, tmp_path / "one")
    r = torchrun(args, tmp_path / "two")
    assert r.returncode == 0, r.stderr
    two = json.loads(r.stdout)  # stdout is exactly one JSON document: printed once
    assert r.stderr.count("model builtin:") == 1
    rows = lambda d: d.get("results") or d["evaluations"]  # noqa: E731
    for a, b in zip(rows(one), rows(two)):
        assert a["ppl"] == b["ppl"]  # identical, not merely close: the same sums in the same order
        if "window_nll" in a:
            assert a["window_nll"] == b["window_nll"]
    if args[0] == "search-b":
        assert one["best_b"] == two["best_b"] and one["references"] == two["references"]
        assert two["forward_passes"] == one["forward_passes"]  # each window computed once across ranks
    if "--k" in args:  # a static schedule at two lengths: one pass per window scores both, across ranks too
        assert one["forward_passes"] == two["forward_passes"] == 3
    computed = one["forward_passes"] if "forward_passes" in one else sum(len(a["window_nll"]) for a in one["results"])
    assert two["world_size"] == 2 and min(two["windows_per_rank"]) > 0
    assert sum(two["windows_per_rank"]) == computed  # every window once, across both ranks
    assert cache_entries(tmp_path / "one") == cache_entries(tmp_path / "two")  # the same cache entries


def test_a_task_on_two_ranks_equals_one_process(tmp_path):
    """RULER task prompts are split across ranks and gathered back: the same per-prompt scores and cache."""
    args = ["compare", "--len", "1024", "--task", "niah-single", "--method", "none,yarn", "--samples", "2", "--depths", "0,1"]
    one, _ = single(args, tmp_path / "one")
    r = torchrun(args, tmp_path / "two")
    assert r.returncode == 0, r.stderr
    two = json.loads(r.stdout)
    for a, b in zip(one["results"], two["results"]):
        assert a["prompt_answer_nll"] == b["prompt_answer_nll"] and a["prompt_gain"] == b["prompt_gain"]
    assert sum(two["windows_per_rank"]) == 8 and min(two["windows_per_rank"]) > 0  # 2 methods x 4 prompts, once
    assert cache_entries(tmp_path / "one") == cache_entries(tmp_path / "two")


def test_more_ranks_than_windows_idle_ranks_said_once(tmp_path):
    args = ["ppl", "--len", "256", "--method", "none", "--samples", "1"]
    one, _ = single(args, tmp_path / "one")
    r = torchrun(args, tmp_path / "two")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("stay idle") == 1
    two = json.loads(r.stdout)
    assert two["results"][0]["ppl"] == one["results"][0]["ppl"] and two["windows_per_rank"] == [1, 0]


def _rank_pids(launcher: int) -> dict[int, int]:
    """rank -> pid of torchrun's worker processes (read from /proc: RANK in each child's environment)."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            env = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == launcher:
            for item in env:
                if item.startswith(b"RANK="):
                    out[int(item[5:])] = int(proc.name)
    return out


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find the ranks")
def test_killed_rank_ends_the_run_and_the_rerun_resumes(tmp_path):
    cache = tmp_path / "c"
    args = ["search-b", "--len", "1024", "--samples", "4", "--tol", "0.05"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_port()),
           "-m", "ropecli", *args, "--json", "--cache-dir", str(cache)]
    launcher = subprocess.Popen(cmd, env={**ENV, "ROPECLI_DIST_TIMEOUT": "30"}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and len(list(cache.glob("*.json"))) < 2:  # let two evaluations finish
        time.sleep(0.2)
    finished = len(list(cache.glob("*.json")))
    assert finished >= 2, launcher.communicate(timeout=60)
    os.kill(_rank_pids(launcher.pid)[1], signal.SIGKILL)
    t0 = time.time()
    _, err = launcher.communicate(timeout=90)
    assert time.time() - t0 < 60 and launcher.returncode != 0
    assert "Traceback" not in "\n".join(ln for ln in err.splitlines() if "ropecli" in ln)
    assert sum(ln.startswith("Error:") for ln in err.splitlines()) <= 1  # ropecli's ranks say it at most once
    kept = len(list(cache.glob("*.json")))
    r = torchrun(args, cache)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["cache"]["hits"] >= kept >= finished  # what finished before the kill was not computed again


# A rank as ropecli runs one: join the group, load the model (transformers imports torch.distributed.fsdp
# then, and with it the module whose default arguments used to pin the group), gather, leave.
RANK_SCRIPT = """
import json, sys
from ropecli.evaluation.distributed import group_threads, leave, setup, shutdown
from ropecli.backends.load import load_model
dist, device = setup("cpu", None)
load_model(None, device=device)
during = group_threads()
dist.gather(dist.rank)
if sys.argv[1] == "pin":  # someone else keeps the default group: shutdown says so, leave() still exits cleanly
    import torch.distributed as tdist
    PINNED = tdist.distributed_c10d._get_default_group()
ok = shutdown(clean=True)
sys.stdout.write(json.dumps({"rank": dist.rank, "during": during, "ok": ok, "after": group_threads()}) + "\\n")
sys.stdout.flush()  # one write per rank: the two ranks share torchrun's stdout
if not ok:
    leave(0)
"""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to name the process's threads")
@pytest.mark.parametrize("case", ["plain", "pin"])
def test_group_threads_end_before_the_interpreter_does(case, tmp_path):
    """Gloo's threads alive at interpreter exit abort a rank in some runs; after `shutdown` none
    are left, and where a caller still holds the group, `leave` ends the rank without finalization."""
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_port()),
           str(script), case]
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    found = re.findall(r'\{"rank": \d+[^{}]*\}', r.stdout)  # each rank's object, even if two lines interleave
    lines = sorted((json.loads(obj) for obj in found), key=lambda x: x["rank"])
    assert [x["rank"] for x in lines] == [0, 1], r.stdout
    for x in lines:
        assert any(t.startswith("gloo") for t in x["during"])  # the check can see the threads it looks for
        if case == "plain":
            assert x["ok"] and x["after"] == []
        else:
            assert not x["ok"] and x["after"]


def test_bad_distributed_setups_are_one_line(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("ROPECLI_DIST_BACKEND", "nccl")
    with pytest.raises(RopeCliError, match="nccl needs CUDA"):
        setup("auto", None)
    monkeypatch.delenv("ROPECLI_DIST_BACKEND")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RopeCliError, match="--device-map auto with 2 ranks per node but 1 GPU"):
        setup("auto", "auto")
    with pytest.raises(RopeCliError, match="2 ranks per node but 1 GPU"):
        setup("auto", None)


def test_gpu_benchmark_cpu_smoke_runs():
    """`benchmarks/bench_gpu.py --cpu-smoke`: the GPU benchmark's code path on tiny CPU shapes."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"
    out = subprocess.run([sys.executable, str(script), "--cpu-smoke", "--repeats", "1"], env=ENV, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [ln for ln in out.stdout.splitlines() if ln.startswith("smoke")]
    assert len(rows) == 2
    assert all(float(r.split()[-1]) < 1e-4 for r in rows)  # chunked and naive agree on the NLL


@pytest.mark.parametrize("kernel", ["blocks", "flex"])
def test_gpu_map_benchmark_cpu_smoke_runs(kernel):
    """`benchmarks/bench_gpu_maps.py --cpu-smoke`: the map benchmark's code path on tiny CPU shapes, with the fused
    blocks and with flex attention (eager here: the code the GPU compiles); the identity map's NLL is the unpatched one."""
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu_maps.py"
    out = subprocess.run([sys.executable, str(script), "--cpu-smoke", "--repeats", "1", "--kernel", kernel], env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "FAIL" not in out.stdout and "OOM" not in out.stdout, out.stdout
    rows = [[c.split() for c in ln.split("|")] for ln in out.stdout.splitlines() if ln.startswith("smoke")]
    assert len(rows) == 30 and {r[0][2] for r in rows} == {"unpatched", "none", "selfextend", "dca", "rerope"}
    assert {r[0][0] for r in rows} == {"smoke", "smoke-swa", "smoke-mla"}  # sliding-window and MLA beside the LLaMA
    assert all(float(r[2][-1]) < 1e-4 for r in rows if r[0][2] == "none")  # the identity map is the model


def test_gpu_groups_of_ranks_with_device_map():
    assert [gpu_group(r, 2, 8) for r in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [gpu_group(r, 4, 8) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert gpu_group(0, 1, 2) == [0, 1]
