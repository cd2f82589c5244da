"""ropecli's chunked scoring against the naive `model(ids, labels=ids)`, on LLaMA-architecture models
with random weights (no download: a GPU machine here cannot fetch weights), measured in the same run.

    python benchmarks/bench_gpu.py                 # GPU: 1B and 7B shapes, bf16, sdpa, 8k/16k/32k tokens
    python benchmarks/bench_gpu.py --cpu-smoke     # CPU: tiny shapes, fp32, the same code path (CI runs this)

Per shape and length, after one untimed call of each path at that length, it prints tokens/s and model FLOPs utilization (MFU) of both, their time ratio,
and peak GPU memory of both (`torch.cuda.max_memory_allocated`, reset before each), with "OOM" where
the naive path runs out of memory. MFU = forward FLOPs / time / the GPU's dense bf16 peak, with
    forward FLOPs = 2 * N_params * T + 2 * n_layers * T^2 * d_model     (causal attention: half of 4*T^2*d)
Goals (issue "Scale out"): >= 40 % MFU for the 1B shape at 16k, time <= 1.05x naive, peak memory
<= 0.5x naive at 32k (or naive OOM).
"""

from __future__ import annotations

import argparse
import time

import torch

# dense bf16 tensor-core peaks (FLOP/s), by a substring of torch.cuda.get_device_name()
BF16_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12, "RTX 4090": 165e12}

SHAPES = {  # LLaMA-2-style shapes
    "1B": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4),
    "7B": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32),
    "smoke": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    # sliding-window families (Gemma 3's five sliding layers to one global, window 1,024; the map runs on the global ones)
    "1B-swa": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=4,
                   head_dim=64, sliding_window=1024),
    "smoke-swa": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, sliding_window=32),
    # Gemma 3 270M as its config ships (google/gemma-3-270m: 18 layers, 5 sliding of 512 to 1 global, 4 heads of 256,
    # one key-value head, vocab 262,144, L = 32k), random weights
    "270M-swa": dict(hidden_size=640, intermediate_size=2048, num_hidden_layers=18, num_attention_heads=4,
                     num_key_value_heads=1, head_dim=256, sliding_window=512, vocab_size=262144, rope_theta=1e6),
    # multi-head latent attention (DeepSeek V3's attention dims: 128 heads -> 16 here, q_lora 1536, kv_lora 512,
    # qk_nope 128 + qk_rope 64, v 128; dense layers only: the MLP is not what a map changes)
    "mla": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
                num_key_value_heads=16, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                v_head_dim=128, first_k_dense_replace=16, n_routed_experts=2, num_experts_per_tok=1, n_group=1, topk_group=1),
    "smoke-mla": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                      first_k_dense_replace=2, n_routed_experts=2, num_experts_per_tok=1, n_group=1, topk_group=1),
}


def build(shape: str, device: str, dtype: torch.dtype, max_len: int):
    """A LLaMA of `shape`; a "-swa" shape is Gemma 3's text model (sliding and global layers, RoPE per layer type), its
    sliding layers banded as ropecli loads it (`ropecli.models.banded_attention`); an "mla" shape DeepSeek V3's."""
    from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                              LlamaForCausalLM)

    from ropecli.models.banded_attention import banded_model

    config, model_class = ((Gemma3TextConfig, Gemma3ForCausalLM) if shape.endswith("-swa") else
                           (DeepseekV3Config, DeepseekV3ForCausalLM) if shape.endswith("mla") else
                           (LlamaConfig, LlamaForCausalLM))
    kw = {"vocab_size": 512 if shape.startswith("smoke") else 32000, **SHAPES[shape]}
    cfg = config(max_position_embeddings=max_len, attn_implementation="sdpa", **kw)
    with torch.device(device):
        model = model_class(cfg).to(dtype)
    banded_model(model)
    return model.eval()


def forward_flops(model, T: int) -> float:
    cfg = model.config
    n = sum(p.numel() for p in model.parameters())
    return 2 * n * T + 2 * cfg.num_hidden_layers * T * T * cfg.hidden_size


def timed(fn, device: str, repeats: int) -> tuple[float, float | None]:
    """(median seconds, peak bytes or None on CPU); raises torch.OutOfMemoryError through."""
    times = []
    peak = None
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2], peak


def main() -> None:
    from ropecli.models.chunked_scoring import naive_window_nll, window_nll

    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU: checks the code path, measures nothing useful")
    ap.add_argument("--shapes", default="1B,7B")
    ap.add_argument("--lengths", default="8192,16384,32768")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    if args.cpu_smoke:
        device, dtype, shapes, lengths, peak_flops = "cpu", torch.float32, ["smoke"], [128, 256], None
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: run with --cpu-smoke, or on a GPU machine")
        device, dtype = "cuda", torch.bfloat16
        shapes, lengths = args.shapes.split(","), [int(x) for x in args.lengths.split(",")]
        name = torch.cuda.get_device_name()
        peak_flops = next((v for k, v in BF16_PEAK.items() if k in name), None)
        print(f"GPU: {name}; bf16 dense peak {peak_flops / 1e12:.0f} TFLOP/s" if peak_flops else f"GPU: {name}; peak unknown, no MFU")
    print("forward FLOPs = 2 * N_params * T + 2 * n_layers * T^2 * d_model")
    header = f"{'shape':6s} {'T':>6s} | {'chunked tok/s':>13s} {'MFU':>6s} {'peak GiB':>9s} | {'naive tok/s':>11s} {'MFU':>6s} {'peak GiB':>9s} | {'time x':>6s} {'mem x':>6s} {'|dNLL|':>8s}"
    print(header)
    print("-" * len(header))
    for shape in shapes:
        model = build(shape, device, dtype, max(lengths))
        vocab = model.config.vocab_size
        for T in lengths:
            ids = torch.randint(0, vocab, (1, T), device=device)
            flops = forward_flops(model, T)
            res = {}
            for name, fn in (("chunked", lambda: window_nll(model, ids)), ("naive", lambda: naive_window_nll(model, ids))):
                try:
                    out = {}
                    fn()  # each path's own warm-up at this length (kernels chosen, the allocator's pools grown): untimed
                    sec, peak = timed(lambda: out.setdefault("nll", fn()), device, args.repeats)
                    res[name] = (sec, peak, out["nll"][0] / out["nll"][1])
                except torch.OutOfMemoryError:
                    res[name] = None
                    torch.cuda.empty_cache()

            def cols(r):
                if r is None:
                    return f"{'OOM':>13s} {'':>6s} {'':>9s}"
                sec, peak, _ = r
                mfu = f"{100 * flops / sec / peak_flops:5.1f}%" if peak_flops else "   n/a"
                mem = f"{peak / 2**30:9.2f}" if peak is not None else f"{'n/a':>9s}"
                return f"{T / sec:13.0f} {mfu:>6s} {mem}"

            c, n = res["chunked"], res["naive"]
            ratio_t = f"{c[0] / n[0]:6.3f}" if c and n else "   n/a"
            ratio_m = f"{c[1] / n[1]:6.3f}" if c and n and c[1] and n[1] else ("naive OOM" if c and n is None else "   n/a")
            dnll = f"{abs(c[2] - n[2]):8.1e}" if c and n else "     n/a"
            print(f"{shape:6s} {T:6d} | {cols(c)} | {cols(n)} | {ratio_t} {ratio_m:>6s} {dnll}")
        model = None  # free it before the next shape
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
