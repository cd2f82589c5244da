"""Memory before the run, from the model's files alone (no torch, no weights loaded): the weights at the
compute dtype and the KV cache a runtime holds for one sequence of N tokens.

KV cache, layer by layer (`layer_cache_bytes`): K and V of N tokens on a full-attention layer, of at most the window
or chunk on sliding and chunked layers, MLA's compressed latent, a fixed state on linear-attention layers; checked
against what transformers allocates, per architecture of the matrix, in tests/test_memory.py.
DeepSeek V4's compressed attention cache beside its sliding window (`compressed_state_bytes`), as transformers 5.24
holds it (modeling_deepseek_v4.py: `DeepseekV4HCACache`, `DeepseekV4CSACache`), for N tokens: HCA (heavily compressed,
rate r) one compressed entry per r tokens (head_dim wide) and the N mod r tokens not yet compressed buffered with their
gates (2 x head_dim each); CSA (compressed sparse, rate r) the same for its compressor, whose projections are 2 x
head_dim wide (two overlapping series), and for its indexer (index_head_dim), plus each one's overlap state (r x width,
values and gates) once a first window has closed. Checked against the allocation on the matrix's DeepSeek V4 row.
Weights: the parameter count from the safetensors headers (or the GGUF's tensor shapes, which transformers
dequantizes) times the bytes of the compute dtype; unknown for a hub id until it is downloaded.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropecli.deferred import deferred
from ropecli.models.config import BUILTIN, BUILTIN_DIR, gguf_metadata, gguf_parameters, read_rope_config
from ropecli.models.gguf_families import gguf_layer_types
from ropecli.models.packaged import resolve_model

torch = deferred("torch")

LOGIT_BUDGET_BYTES = 1 << 28  # 256 MiB of fp32 logits per chunk (`models.chunked_scoring`: the LM head's rows at a time)
BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


@dataclass(frozen=True)
class MemoryPlan:
    weights: int | None  # bytes at the compute dtype; None: not known before loading
    kv_cache: int  # bytes for one sequence of `length` tokens
    length: int  # N
    dtype: str
    layers: int
    kv_per_token: int  # bytes a full-attention token adds over all layers
    map_extra: int = 0  # bytes a position map's attention may hold beyond the model's own, at `length` (`map_working_set`)
    key_pairs_extra: int = 0  # the same under a selection of key pairs (DPE's top < 1: keys rotated per query head)
    activations: int = 0  # bytes a scoring forward pass holds at `length` beyond weights and cache (`activation_bytes`)
    process: int = 0  # bytes this process held when the plan was made (Python, torch, transformers), measured

    @property
    def scoring_cache(self) -> bool:
        """Whether a scoring pass holds the KV cache: ropecli's transformers scoring runs with the cache off
        (`models.chunked_scoring`); llama.cpp always fills its cache (a plan with no activation estimate is that one)."""
        return not self.activations

    @property
    def total(self) -> int | None:
        """Bytes a scoring pass needs at `length`: weights, its activations and this process (the KV cache too where
        scoring fills one: llama.cpp)."""
        if self.weights is None:
            return None
        return self.weights + self.activations + self.process + (self.kv_cache if self.scoring_cache else 0)

    def run_peak(self, load_peak: int | None, held: int | None) -> int | None:
        """A CPU run's peak from what loading measured: its own peak (a GGUF is dequantized through temporaries), or
        what loading left resident (`held`, allocator slack included) plus what a scoring pass adds (llama.cpp's KV
        cache is allocated with its context, at loading: in `held`). None on a GPU (`held` not measured there)."""
        if load_peak is None or held is None:
            return None
        return max(load_peak, held + self.activations)

    def describe(self, available: int | None = None, load_peak: int | None = None, held: int | None = None) -> str:
        """The plan in one line; with `load_peak` and `held` (measured once the model is loaded) the whole run's peak,
        loading included: the number to size a machine by."""
        weights = "weights not known before loading" if self.weights is None else f"weights {human(self.weights)}"
        if self.scoring_cache:
            line = f"memory: {weights} ({self.dtype}) + KV cache at {self.length:,} tokens {human(self.kv_cache)}"
        else:
            line = f"memory: {weights} ({self.dtype}) + activations at {self.length:,} tokens {human(self.activations)}"
        if self.process:
            line += f" + this process {human(self.process)}"
        if self.total is not None:
            line += f" = {human(self.total)}"
        if not self.scoring_cache:
            line += f" to score; decoding (generation, decode across L) also holds the KV cache at {self.length:,} " \
                    f"tokens, {human(self.kv_cache)}"
        if self.map_extra:
            line += f"; under a position map up to {human(self.map_extra)} more"
            if self.key_pairs_extra > self.map_extra:
                line += f" ({human(self.key_pairs_extra)} with DPE's key pairs)"
        if (peak := self.run_peak(load_peak, held)) is not None:
            line += (f"; measured: loading peaked at {human(load_peak)} and left {human(held)} resident, so this run "
                     f"needs about {human(peak)}")
        return line + (f"; {human(available)} available" if available else "")

    def to_json(self) -> dict[str, Any]:
        return {"weights_bytes": self.weights, "kv_cache_bytes": self.kv_cache, "length": self.length, "dtype": self.dtype,
                "layers": self.layers, "kv_bytes_per_token": self.kv_per_token, "total_bytes": self.total,
                "map_extra_bytes": self.map_extra, "key_pairs_extra_bytes": self.key_pairs_extra,
                "activation_bytes": self.activations, "process_bytes": self.process}


def human(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def kv_cache_bytes(text: dict[str, Any], length: int, dtype_bytes: int) -> tuple[int, int, int]:
    """(bytes for one sequence of `length` tokens, layers, bytes a token adds over the layers whose cache grows with it)
    from a (text) config dict as transformers reads it, layer by layer (`layer_cache_bytes`)."""
    layers = int(text.get("num_hidden_layers") or text.get("n_layer") or 0)
    types = text.get("layer_types")
    window = text.get("sliding_window")
    if not types:
        sliding_all = window and text.get("use_sliding_window", True) is not False
        types = ["sliding_attention" if sliding_all else "full_attention"] * layers
    total = per_token = 0
    for i, t in enumerate(types[:layers]):
        fixed, token, cap = layer_cache_bytes(text, i, t, dtype_bytes)
        total += fixed + token * (length if cap is None else min(length, cap)) + compressed_state_bytes(text, t, length, dtype_bytes)
        per_token += token if cap is None else 0
    return total, layers, per_token


def layer_cache_bytes(text: dict[str, Any], i: int, kind: str, dtype_bytes: int) -> tuple[int, int, int | None]:
    """(fixed bytes, bytes per cached token, most tokens cached or None) of layer i of `kind`, as transformers 5 caches it:
    - full attention: K and V of every token, 2 x KV heads x head dim (a layer's own head dim and KV heads where the
      config gives them per layer: Gemma 4's global layers, `per_layer_config`);
    - sliding / chunked attention: the last sliding_window - 1 / attention_chunk_size - 1 tokens
      (`DynamicSlidingWindowLayer`; Llama 4's chunked layers use it with the chunk);
    - MLA (DeepSeek-V2/V3, Mistral 4): the compressed latent, kv_lora_rank + qk_rope_head_dim per token, no heads;
    - linear attention (Qwen3.5 / Qwen3-Next's gated delta net, `LinearAttentionLayer`): a fixed state, the causal
      conv's (2 x key dim + value dim) x kernel plus the recurrent value heads x key head dim x value head dim;
    - LFM2's convolution layers: a fixed hidden x conv_L_cache; Falcon-H1: a Mamba-2 state beside every attention;
    - DeepSeek V4's compressed layers: one shared K = V head over the window, and `compressed_state_bytes`."""
    if kind == "conv":  # LFM2's short convolution: hidden x conv_L_cache
        return int(text.get("hidden_size") or 0) * int(text.get("conv_L_cache") or 0) * dtype_bytes, 0, None
    if kind == "linear_attention":
        nk, nv = int(text.get("linear_num_key_heads") or 0), int(text.get("linear_num_value_heads") or 0)
        hk, hv = int(text.get("linear_key_head_dim") or 0), int(text.get("linear_value_head_dim") or 0)
        conv = (2 * nk * hk + nv * hv) * int(text.get("linear_conv_kernel_dim") or 0)
        return (conv + nv * hk * hv) * dtype_bytes, 0, None
    if text.get("kv_lora_rank") and text.get("qk_rope_head_dim"):  # MLA: transformers caches the latent
        token = (int(text["kv_lora_rank"]) + int(text["qk_rope_head_dim"])) * dtype_bytes
    elif kind in COMPRESSED:  # DeepSeek V4's compressed layers: one shared K = V head over their window
        token = int(text["head_dim"]) * dtype_bytes
    else:
        heads = int(text.get("num_attention_heads") or text.get("n_head") or 1)
        own = (text.get("per_layer_config") or {}).get(str(i)) or {}
        kv_heads = int(own.get("num_key_value_heads") or text.get("num_key_value_heads") or heads)
        head_dim = own.get("head_dim") or text.get("head_dim") or int(text.get("hidden_size") or text.get("n_embd") or 0) // heads
        token = 2 * kv_heads * int(head_dim) * dtype_bytes
    span = text.get("sliding_window") if kind in ("sliding_attention", *COMPRESSED) else \
        text.get("attention_chunk_size") if kind == "chunked_attention" else None
    return parallel_ssm_bytes(text, dtype_bytes), token, (int(span) - 1 if span else None)


def parallel_ssm_bytes(text: dict[str, Any], dtype_bytes: int) -> int:
    """Falcon-H1's Mamba-2 beside the attention of every layer (`LinearAttentionAndFullAttentionLayer`): the conv state
    (d_ssm + 2 x groups x d_state) x d_conv and the SSM state heads x head dim x d_state; 0 for other models."""
    if not (text.get("mamba_n_heads") and text.get("mamba_d_state")):
        return 0
    d_ssm = int(text.get("mamba_d_ssm") or int(text.get("mamba_expand") or 2) * int(text.get("hidden_size") or 0))
    state = int(text["mamba_d_state"])
    conv = (d_ssm + 2 * int(text.get("mamba_n_groups") or 1) * state) * int(text.get("mamba_d_conv") or 4)
    return (conv + int(text["mamba_n_heads"]) * int(text.get("mamba_d_head") or 0) * state) * dtype_bytes


def safetensors_parameters(folder: Path) -> int | None:
    """Parameters stored in a folder's *.safetensors (header only), None where it has none."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    count = 0
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, info in header.items():
            if name != "__metadata__":
                size = 1
                for dim in info["shape"]:
                    size *= int(dim)
                count += size
    return count


def plan_memory(text: dict[str, Any], parameters: int | None, length: int, dtype: str) -> MemoryPlan:
    b = BYTES.get(dtype, 4)
    kv, layers, per_token = kv_cache_bytes(text, length, b)
    return MemoryPlan(None if parameters is None else parameters * b, kv, length, dtype, layers, per_token,
                      map_working_set(text, length, b), map_working_set(text, length, b, key_pairs=True),
                      activation_bytes(text, length, b), resident_bytes("VmRSS") or 0)


def activation_bytes(text: dict[str, Any], length: int, dtype_bytes: int) -> int:
    """Bytes one scoring forward pass of `length` tokens holds beyond the weights (`models.chunked_scoring`: the cache
    off, the LM head's logits LOGIT_BUDGET_BYTES at a time), the larger of two moments: inside a layer, the residual
    stream and the layer's input (2 x T x hidden) beside the larger of its attention (queries, keys and values
    projected, their rotated copies and the output: 3 x (H + H_kv) x T x head dim; a sliding layer bands its keys,
    `models.banded_attention`, and sdpa's fused kernel keeps no T x T) and its MLP (gate, up and their product:
    3 x T x intermediate); at the head, the final hidden states beside a chunk of fp32 logits and their log-softmax
    (2 x LOGIT_BUDGET_BYTES). Checked against the measured peak (`resident_bytes`) on Gemma 3 270M at 48k-64k and
    SmolLM2 at 16k (docs/measurements/gemma3.md)."""
    hidden = int(text.get("hidden_size") or text.get("n_embd") or 0)
    heads = int(text.get("num_attention_heads") or text.get("n_head") or 1)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // max(1, heads))
    inner = text.get("intermediate_size") or text.get("n_inner") or 4 * hidden
    inner = max(inner) if isinstance(inner, (list, tuple)) else int(inner)  # per-layer widths (OpenELM, Gemma 3n)
    attention = 3 * (heads + kv_heads) * head_dim
    layer = (2 * hidden + max(attention, 3 * inner)) * length * dtype_bytes
    vocab = int(text.get("vocab_size") or 0)
    rows = min(length, max(16, LOGIT_BUDGET_BYTES // (4 * vocab))) if vocab else 0  # a chunk of the head's rows
    head = hidden * length * dtype_bytes + 2 * rows * vocab * 4
    return max(layer, head)


def resident_bytes(field: str = "VmHWM") -> int | None:
    """This process's resident memory from /proc/self/status: VmRSS now, VmHWM its peak (Linux; None elsewhere)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak() -> bool:
    """Start VmHWM afresh (Linux: writing 5 to /proc/self/clear_refs), so the peak read after is the evaluation's own,
    not the model loading's (a GGUF is dequantized through temporaries); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def gguf_vocab(meta: dict[str, Any]) -> int | None:
    """The vocabulary of a GGUF's tokenizer (its token types or scores: the token strings may be left unread)."""
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.tokens"):
        if isinstance(meta.get(key), list):
            return len(meta[key])
    return None


def map_working_set(text: dict[str, Any], length: int, dtype_bytes: int, regions: int = 3, key_pairs: bool = False) -> int:
    """Bytes a position map's attention (`maps.mapped_attention`, `maps.flex_regions`) holds beyond the unpatched
    attention's, in the one layer that runs, at `length` tokens: a region's rotated queries and the merged output
    (T x H x D each), the key and value heads the fused causal kernel repeats for GQA (2 x T x (H - H_kv) x D), the
    rotated keys of up to `regions` regions (T x H_kv x D each) and two float32 log-sum-exps (T x H). An upper bound:
    on an H200 (1B shape, bf16, 16k-128k, benchmarks/bench_gpu_maps.py) the peak grew by at most 1 %, since a layer's
    MLP activations outweigh its attention's; the CPU blocks also keep up to MASK_CACHE_BYTES of masks. `key_pairs`: under
    a selection of key pairs (DPE's top < 1) the keys and values are repeated per query head in every kernel and every
    region's keys are rotated per query head twice (the map's positions and the true ones), each rotation with
    rotate-half's two temporaries, counted as if none were freed before the layer ends (5 x T x H x D per region):
    measured on SmolLM2 at 8k (benchmarks/bench_position_maps.py --model smollm2 --len 8192 --only dpe, the selection
    made in a process of its own) the peak grew by 330 MB, under this bound's 346 MB; the bound without key pairs is
    82 MB, which the grouped DPE alone exceeded there (90 MB)."""
    heads = int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or (int(text.get("hidden_size") or 0) // max(1, heads)))
    rotated_keys = regions * 5 * heads if key_pairs else regions * kv_heads
    per_token = (2 * heads + 2 * (heads - kv_heads) + rotated_keys) * head_dim * dtype_bytes + 2 * heads * 4
    return length * per_token


def available_memory(device: str) -> int | None:
    """Bytes free where the model will live: the GPU's free memory for cuda, else the machine's available RAM."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_before_loading(name: str | None, gguf_file: str | None, dtype: str, length: int | None,
                          gguf_as_is: bool = False) -> MemoryPlan | None:
    """What `name` will need (`plan_memory`) at `length` tokens (default: 8 x L0, the default target), read from its
    config.json / safetensors headers or GGUF header; None where nothing can be read without a download. `gguf_as_is`:
    a GGUF runs as the file is, with an f16 KV cache (llama.cpp's backend), not dequantized to `dtype`."""
    name = name or BUILTIN
    path = BUILTIN_DIR if name == BUILTIN else Path(resolve_model(name) or name)
    rope = read_rope_config(name, gguf_file)
    length = length or 8 * rope.train_len
    if gguf_file is not None:
        path = path / gguf_file
    if path.suffix == ".gguf" and path.is_file():
        meta = gguf_metadata(path)
        arch = meta.get("general.architecture", "")
        text = {"num_hidden_layers": meta.get(f"{arch}.block_count"), "num_attention_heads": meta.get(f"{arch}.attention.head_count"),
                "num_key_value_heads": meta.get(f"{arch}.attention.head_count_kv"),
                "head_dim": meta.get(f"{arch}.attention.key_length") or (meta.get(f"{arch}.embedding_length") or 0)
                // max(1, meta.get(f"{arch}.attention.head_count") or 1),
                "sliding_window": meta.get(f"{arch}.attention.sliding_window"),
                "layer_types": gguf_layer_types(meta, arch), "hidden_size": meta.get(f"{arch}.embedding_length"),
                "intermediate_size": meta.get(f"{arch}.feed_forward_length"), "vocab_size": gguf_vocab(meta)}
        if gguf_as_is:  # the quantized file as it is; llama.cpp's KV cache is f16 by default
            kv, layers, per_token = kv_cache_bytes(text, length, 2)
            return MemoryPlan(path.stat().st_size, kv, length, "gguf + f16 KV", layers, per_token)
        return plan_memory(text, gguf_parameters(path), length, dtype)
    if path.is_dir() and (path / "config.json").is_file():
        cfg = json.loads((path / "config.json").read_text())
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
        return plan_memory(text, safetensors_parameters(path), length, dtype)
    return None


COMPRESSED = ("compressed_sparse_attention", "heavily_compressed_attention")


def compressed_state_bytes(text: dict[str, Any], kind: str, length: int, dtype_bytes: int) -> int:
    """Bytes of a DeepSeek V4 layer's compressed state at `length` tokens; 0 for any other layer."""
    rate = (text.get("compress_rates") or {}).get(kind)
    if kind not in COMPRESSED or not rate:
        return 0
    entries, left = divmod(length, int(rate))
    series = [(int(text["head_dim"]), 1)] if kind == "heavily_compressed_attention" else \
        [(int(text["head_dim"]), 2), (int(text.get("index_head_dim") or 0), 2)]  # (entry width, series overlapped)
    total = 0
    for width, overlap in series:
        total += entries * width + 2 * left * width * overlap  # entries; buffered values and gates
        if overlap > 1 and entries:
            total += 2 * int(rate) * width  # the last window's first series, values and gates
    return total * dtype_bytes
