"""What a position map costs: the mapped forward's wall time and peak memory against the unpatched forward at
the same length, as ratios measured in one run. Each mode runs in its own fresh process (peak RSS of the forward
alone: the kernel's high-water mark is reset after loading via /proc/self/clear_refs), on one window of held-out
Shakespeare, fp32 on the CPU, best of --repeats. The mapped attention runs each region over the band of keys it
reaches from a block of 512 queries (torch's fused CPU kernel, merged by log-sum-exp), where the unpatched model runs
its own causal sdpa: the ratios say what the regions and the block loop cost.

    python benchmarks/bench_position_maps.py                                  # built-in model at 4L = 1,024
    python benchmarks/bench_position_maps.py --model smollm2 --len 16384      # SmolLM2 at 2L (every map: ~30 min)
    python benchmarks/bench_position_maps.py --model smollm2 --len 16384 --repeats 1 --only selfextend-llamacpp
    python benchmarks/bench_position_maps.py --repeats 3 --only selfextend,dpe   # DPE with and without its key pairs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

TRAINED = {"builtin": 256, "smollm2": 8192}  # the models' L (max_position_embeddings): the maps' parameters scale with it


def modes(L: int) -> dict[str, str | None]:
    """The maps at their sources' proportions of L (W = L/4, ReRoPE's w = L/2, DCA's chunk = 3L/4, DPE's window L/8 with
    the factors of Llama-3-8B-Instruct's config …), as --map spells them; at the built-in model's L = 256 the values
    this benchmark has always used."""
    w, half = L // 4, L // 2
    spelled = [f"selfextend:G=8,W={w}", f"selfextend-llamacpp:G=8,W={w}", f"rerope:w={half}",
               f"leaky-rerope:w={half},k=16", f"dca:chunk={3 * L // 4},local={L // 16}", f"string:S={L // 3},W={L // 16}",
               f"dpe:W={L // 8}," + ",".join(f"G{g}={G}" for g, G in enumerate((2, 8, 2, 8, 32, 32, 32, 4), 1))]
    spelled.append(spelled[-1] + ",top=0.75")  # DPE's key pairs: 48 of 64 per head moved, keys repeated per query head
    return {"unpatched": None, "none (mapped identity)": "none", **{m: m for m in spelled}}


def peak_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def child(model: str, length: int, pmap: str | None, repeats: int) -> None:
    import torch

    from ropecli.evaluation.bos_policy import lead_ids
    from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents
    from ropecli.backends.load import load_model
    from ropecli.maps.mapped_attention import mapped
    from ropecli.models.chunked_scoring import window_nll
    from ropecli.maps.map_spelling import parse_map
    from ropecli.maps.position_maps import bind

    torch.set_num_threads(os.cpu_count() or 1)
    lm = load_model(model, dtype="fp32", device="cpu")
    docs, _ = load_documents(None)
    windows = sample_windows(docs, tokenize_documents(docs, lm.tokenizer), length, 1, 0, lead_ids(lm.tokenizer, "auto"))
    ids = windows.ids[0]
    bound = (parse_map(pmap) or bind("none", {})) if pmap is not None else None
    calibration, selection = 0.0, None
    if bound and bound.share < 1.0:  # DPE's key pairs: chosen once per model, in a process of its own (the heap its
        out = subprocess.run([sys.executable, __file__, "--model", model, "--select", pmap],  # activations leave
                             capture_output=True, text=True, check=True)  # behind would count as the forward's peak)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        calibration, selection = got["seconds"], {int(k): np.asarray(v, dtype=bool) for k, v in got["pairs"].items()}
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    best, nll = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        with torch.no_grad():
            if pmap is None:
                out = window_nll(lm.model, torch.as_tensor(ids)[None], None)
            else:
                with mapped(lm.model, bound, selection=selection):
                    out = window_nll(lm.model, torch.as_tensor(ids)[None], None)
        best = min(best, time.perf_counter() - t0)
        nll = out[0] / out[1]
    print(json.dumps({"seconds": best, "peak_mib": peak_kib() / 1024, "nll": nll, "calibration_seconds": calibration}))


def select(model: str, pmap: str) -> None:
    """The key pairs of `pmap` on the model, as JSON {seconds, pairs: {layer: (heads, pairs) bool}}."""
    from ropecli.evaluation.corpus import training_plays
    from ropecli.backends.load import load_model
    from ropecli.maps.map_spelling import parse_map

    lm = load_model(model, dtype="fp32", device="cpu")
    t0 = time.perf_counter()
    pairs = lm.pair_selection(parse_map(pmap), training_plays)
    print(json.dumps({"seconds": time.perf_counter() - t0, "pairs": {k: v.tolist() for k, v in pairs.items()}}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--len", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", default=None)
    ap.add_argument("--select", default=None)
    ap.add_argument("--L", type=int, default=None, help="the model's training length (default: known for builtin, smollm2)")
    ap.add_argument("--only", default=None, help="comma-separated map names to run beside unpatched and identity "
                    "(e.g. selfextend-llamacpp: a 16k SmolLM2 forward takes minutes)")
    args = ap.parse_args()
    if args.select is not None:
        return select(args.model, args.select)
    if args.child is not None:
        return child(args.model, args.len, None if args.child == "-" else args.child, args.repeats)
    rows = {}
    if args.L is None and args.model not in TRAINED:
        raise SystemExit(f"--L: the training length of {args.model} (the maps' parameters scale with it)")
    only = None if args.only is None else args.only.split(",")
    for label, pmap in modes(args.L or TRAINED[args.model]).items():
        if only is not None and pmap not in (None, "none") and pmap.split(":")[0] not in only:
            continue
        out = subprocess.run([sys.executable, __file__, "--model", args.model, "--len", str(args.len), "--repeats",
                              str(args.repeats), "--child", pmap or "-"], capture_output=True, text=True, check=True)
        rows[label] = json.loads(out.stdout.strip().splitlines()[-1])
    base = rows["unpatched"]
    print(f"{args.model} at {args.len} tokens, fp32 CPU, best of {args.repeats}:")
    for label, r in rows.items():
        print(f"  {label:30s} {r['seconds']:8.2f} s ({r['seconds'] / base['seconds']:5.2f}x)   peak {r['peak_mib']:8.0f} MiB "
              f"({r['peak_mib'] / base['peak_mib']:5.2f}x)   NLL {r['nll']:.6f}"
              + (f"   (key pairs chosen in {r['calibration_seconds']:.1f} s, once)" if r["calibration_seconds"] > 0.05 else ""))
    print(f"identity check: |NLL(none mapped) - NLL(unpatched)| = {abs(rows['none (mapped identity)']['nll'] - base['nll']):.2e}")


if __name__ == "__main__":
    main()
