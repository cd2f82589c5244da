"""What the exported map folder costs a user: prefill, time per decoded token and peak memory of the folder
`export --to transformers --method none --map MAP` writes, against the same model exported with a schedule (`--method
yarn`, the folder with no modeling file of its own), same prompt, same tokens decoded, measured in one run. Each folder
runs in its own fresh process (peak RSS after loading reset through /proc/self/clear_refs, so the peak is the
generation's), fp32 on the CPU, the prompt one window of held-out Shakespeare: a prefill through a DynamicCache, then
--tokens greedy steps through it, as `generate()` runs them; the best of --repeats runs in each of --rounds processes per
folder, the folders alternating. Targets: prefill, per token
and peak memory each <= 1.3x the schedule's.

    python benchmarks/bench_map_folder.py                                      # built-in model at 8L: 1,920 + 64
    python benchmarks/bench_map_folder.py --model smollm2 --len 16384 --prompt 16000 --tokens 16 --repeats 1 \\
        --rounds 1 --map selfextend:G=4,W=2048                                            # SmolLM2 at 2L (about 15 min)
    python benchmarks/bench_map_folder.py --map dca:chunk=192,local=16         # any map
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def child(folder: str, prompt: int, tokens: int, repeats: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

    from ropecli.evaluation.bos_policy import lead_ids
    from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents

    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    docs, _ = load_documents(None)
    windows = sample_windows(docs, tokenize_documents(docs, tokenizer), prompt, 1, 0, lead_ids(tokenizer, "auto"))
    ids = torch.as_tensor(windows.ids[0][:prompt])[None]
    with open("/proc/self/clear_refs", "w") as f:  # the peak from here on: the generation's, not the loading's
        f.write("5")
    best_prefill = best_step = float("inf")
    said = None
    for _ in range(repeats):
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            t0 = time.perf_counter()
            out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
            prefill = time.perf_counter() - t0
            nxt, new = out.logits[:, -1].argmax(-1, keepdim=True), []
            t0 = time.perf_counter()
            for _ in range(tokens):
                new.append(int(nxt))
                out = model(input_ids=nxt, cache=out.past_key_values, use_cache=True, logits_to_keep=1)
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            step = (time.perf_counter() - t0) / tokens
        best_prefill, best_step, said = min(best_prefill, prefill), min(best_step, step), new
    print(json.dumps({"prefill_s": best_prefill, "step_s": best_step, "peak_mib": peak_kib() / 1024, "tokens": said}))


def export(model: str, length: int, out: Path, method: str, position_map: str | None) -> None:
    cmd = [sys.executable, "-m", "ropecli", "export", "--model", model, "--method", method, "--len", str(length),
           "--to", "transformers", "--out", str(out)] + (["--map", position_map] if position_map else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"export failed: {' '.join(cmd)}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--len", type=int, default=2048, help="the length both folders are exported for")
    ap.add_argument("--prompt", type=int, default=1920)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--map", default="selfextend:G=8,W=64")
    ap.add_argument("--schedule", default="yarn", help="the schedule folder the map folder is compared with")
    ap.add_argument("--repeats", type=int, default=3, help="prefill + decode runs per process (the best is kept)")
    ap.add_argument("--rounds", type=int, default=2, help="processes per folder, alternating (the best is kept)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        folder, prompt, tokens, repeats = args.child
        return child(folder, int(prompt), int(tokens), int(repeats))
    rows: dict[str, dict] = {}
    folders = ((f"schedule ({args.schedule})", args.schedule, None), (f"map ({args.map})", "none", args.map))
    with tempfile.TemporaryDirectory() as tmp:
        for label, method, pmap in folders:
            export(args.model, args.len, Path(tmp) / label.split()[0], method, pmap)
        for _ in range(args.rounds):  # the two folders in turn, each round a fresh process: drift hits both alike
            for label, _, _ in folders:
                r = subprocess.run([sys.executable, __file__, "--child", str(Path(tmp) / label.split()[0]),
                                    str(args.prompt), str(args.tokens), str(args.repeats)], capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"{label} failed:\n{r.stderr[-3000:]}")
                got = json.loads(r.stdout.strip().splitlines()[-1])
                rows[label] = {k: min(v, rows[label][k]) if k in ("prefill_s", "step_s", "peak_mib") else v
                               for k, v in got.items()} if label in rows else got
    (base, b), (mapl, m) = rows.items()
    print(f"{args.model}: a {args.prompt}-token prompt, {args.tokens} greedy tokens, folders exported for {args.len} "
          f"(fp32, CPU, {os.cpu_count()} cores, best of {args.repeats} runs x {args.rounds} alternating processes)")
    print("| folder | prefill (s) | per token (ms) | peak memory (MiB) |")
    print("|---|---|---|---|")
    for label, r in rows.items():
        print(f"| {label} | {r['prefill_s']:.2f} | {1000 * r['step_s']:.1f} | {r['peak_mib']:.0f} |")
    print(f"| map / schedule | {m['prefill_s'] / b['prefill_s']:.2f}x | {m['step_s'] / b['step_s']:.2f}x | "
          f"{m['peak_mib'] / b['peak_mib']:.2f}x |")


if __name__ == "__main__":
    main()
