"""What a position map costs on a GPU: the mapped forward's time and peak memory against the unpatched sdpa
forward (`window_nll`, ropecli's chunked scoring) of the same model and window, measured in the same run, per length
and map. LLaMA shapes with random weights built in-process (a GPU machine here fetches nothing): they time speed, not
quality.

    python benchmarks/bench_gpu_maps.py                                   # GPU: the 1B shape, bf16, 8k ... 128k
    python benchmarks/bench_gpu_maps.py --shapes 1B,7B --lengths 16384,32768 --kernel blocks   # the old path, to compare
    python benchmarks/bench_gpu_maps.py --shapes 1B-swa                   # a sliding-window family (Gemma 3's layout)
    python benchmarks/bench_gpu_maps.py --shapes 270M-swa,mla --lengths 65536,131072 --L 32768   # Gemma 3 270M, MLA
    python benchmarks/bench_gpu_maps.py --cpu-smoke                       # CPU: tiny shapes, the same code (the suite)

Each map runs under `ropecli.maps.mapped_attention.mapped` with its `--kernel` (auto: flex attention on CUDA); its
parameters scale with the shape's L0 (Self-Extend G = 8, W = L0/4; DCA chunk = 3 L0/4, local = L0/16; ReRoPE w = L0/2).
"time x" and "mem x" are the mapped run's median time and peak memory over the unpatched run's at that length; "|dNLL|"
of the identity map (`none`) against the unpatched run checks the path; "first s" is the untimed first call (the
compile, the block masks). OOM and a failed compile are said in the row, not raised. Goals:
Self-Extend, DCA and ReRoPE at most 1.5x (aim 1.2x) in time at 16k and 32k, peak memory at most 1.2x, 128k runs."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpu import SHAPES, build, timed  # noqa: E402  (the sibling benchmark's shapes and timer)

L0 = 4096  # the shapes' training length (max_position_embeddings the maps are scaled to)


def maps_for(L: int) -> dict[str, tuple[str, dict]]:
    return {"none": ("none", {}), "selfextend": ("selfextend", {"G": 8, "W": L // 4}),
            "dca": ("dca", {"chunk": 3 * L // 4, "local": L // 16}), "rerope": ("rerope", {"w": L // 2}),
            # DPE: Self-Extend per pair group, window L/8, the factors Llama-3-8B-Instruct's config has (per-pair rotation)
            "dpe": ("dpe", {"W": L // 8, **{f"G{g}": G for g, G in enumerate((2, 8, 2, 8, 32, 32, 32, 4), 1)}})}


def main() -> None:
    from ropecli.maps.mapped_attention import mapped
    from ropecli.maps.position_maps import bind
    from ropecli.models.chunked_scoring import window_nll

    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU: checks the code path, measures nothing useful")
    ap.add_argument("--shapes", default="1B")
    ap.add_argument("--lengths", default="8192,16384,32768,65536,131072")
    ap.add_argument("--maps", default="none,selfextend,dca,rerope")
    ap.add_argument("--kernel", default="auto", choices=("auto", "flex", "blocks"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--L", type=int, default=L0, help="the shapes' training length, which the maps' parameters scale "
                    "with (Gemma 3 270M: 32768)")
    args = ap.parse_args()
    if args.cpu_smoke:
        device, dtype, shapes, lengths, L = "cpu", torch.float32, ["smoke", "smoke-swa", "smoke-mla"], [256, 384], 128
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --cpu-smoke, or on a GPU machine")
        device, dtype, L = "cuda", torch.bfloat16, args.L
        shapes, lengths = args.shapes.split(","), [int(x) for x in args.lengths.split(",")]
        print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; kernel {args.kernel}")
    maps = {k: v for k, v in maps_for(L).items() if k in args.maps.split(",")}
    header = f"{'shape':9s} {'T':>7s} {'map':11s} | {'seconds':>8s} {'peak GiB':>9s} | {'time x':>7s} {'mem x':>6s} {'|dNLL|':>8s} | {'first s':>7s}"
    print(header)
    print("-" * len(header))
    for shape in shapes:
        model = build(shape, device, dtype, L)
        for T in lengths:
            ids = torch.randint(0, model.config.vocab_size, (1, T), device=device)
            window_nll(model, ids[:, :64])  # warm-up (kernels, allocator)
            rows = {}
            for label, (name, params) in [("unpatched", (None, None)), *maps.items()]:
                def run(name=name, params=params):
                    with torch.no_grad():
                        if name is None:
                            return window_nll(model, ids)
                        with mapped(model, bind(name, params), kernel=args.kernel):
                            return window_nll(model, ids)
                try:
                    out = {}
                    first = time.perf_counter()
                    run()  # the first call compiles (flex) and builds the block masks: not timed, said apart
                    first = time.perf_counter() - first
                    sec, peak = timed(lambda: out.setdefault("nll", run()), device, args.repeats)
                    rows[label] = (sec, peak, out["nll"][0] / out["nll"][1])
                except torch.OutOfMemoryError:
                    rows[label] = "OOM"
                    torch.cuda.empty_cache()
                except Exception as exc:  # noqa: BLE001  a map that fails to compile is a row, not the end of the run
                    rows[label] = f"FAIL {type(exc).__name__}: {str(exc)[:300]}"
                base, r = rows["unpatched"], rows[label]
                if isinstance(r, str):
                    print(f"{shape:9s} {T:7d} {label:11s} | {r}", flush=True)
                    continue
                base = None if isinstance(base, str) else base
                mem = f"{r[1] / 2 ** 30:9.2f}" if r[1] is not None else f"{'n/a':>9s}"
                tx = f"{r[0] / base[0]:7.2f}" if base else f"{'n/a':>7s}"
                mx = f"{r[1] / base[1]:6.2f}" if base and r[1] and base[1] else f"{'n/a':>6s}"
                dn = f"{abs(r[2] - base[2]):8.1e}" if base and label == "none" else f"{'':>8s}"
                print(f"{shape:9s} {T:7d} {label:11s} | {r[0]:8.3f} {mem} | {tx} {mx} {dn} | {first:7.1f}", flush=True)
        model = None
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    assert "smoke" in SHAPES
    main()
