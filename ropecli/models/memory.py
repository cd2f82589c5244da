"""Memory before the run, from the model's files alone (no torch, no weights loaded): the weights at the
compute dtype and the KV cache a runtime holds for one sequence of N tokens.

KV cache, per layer: 2 (K and V) x KV heads x head dim x bytes x tokens, where tokens is N on a full-attention
layer and min(N, sliding_window - 1) on a sliding-window layer (transformers' `DynamicSlidingWindowLayer` keeps
the last sliding_window - 1 tokens; checked against what transformers allocates in tests/test_memory.py).
MLA (DeepSeek-V2/V3): transformers caches K of qk_nope + qk_rope and V of v_head_dim per attention head.
Weights: the parameter count from the safetensors headers (or the GGUF's tensor shapes, which transformers
dequantizes) times the bytes of the compute dtype; unknown for a hub id until it is downloaded.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from ropecli.models.packaged import resolve_model

BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}


@dataclass(frozen=True)
class MemoryPlan:
    weights: int | None  # bytes at the compute dtype; None: not known before loading
    kv_cache: int  # bytes for one sequence of `length` tokens
    length: int  # N
    dtype: str
    layers: int
    kv_per_token: int  # bytes a full-attention token adds over all layers

    @property
    def total(self) -> int | None:
        return None if self.weights is None else self.weights + self.kv_cache

    def describe(self, available: int | None = None) -> str:
        weights = "weights not known before loading" if self.weights is None else f"weights {human(self.weights)}"
        line = f"memory: {weights} ({self.dtype}) + KV cache at {self.length:,} tokens {human(self.kv_cache)}"
        if self.total is not None:
            line += f" = {human(self.total)}"
        return line + (f"; {human(available)} available" if available else "")

    def to_json(self) -> dict[str, Any]:
        return {"weights_bytes": self.weights, "kv_cache_bytes": self.kv_cache, "length": self.length, "dtype": self.dtype,
                "layers": self.layers, "kv_bytes_per_token": self.kv_per_token, "total_bytes": self.total}


def human(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def kv_cache_bytes(text: dict[str, Any], length: int, dtype_bytes: int) -> tuple[int, int, int]:
    """(bytes for one sequence of `length` tokens, layers, bytes per token of a full-attention layer stack) from
    a (text) config dict as transformers reads it."""
    layers = int(text.get("num_hidden_layers") or text.get("n_layer") or 0)
    heads = int(text.get("num_attention_heads") or text.get("n_head") or 1)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    if text.get("kv_lora_rank") and text.get("qk_rope_head_dim"):  # MLA as transformers caches it
        k_dim = int(text.get("qk_nope_head_dim") or 0) + int(text["qk_rope_head_dim"])
        per_layer = heads * (k_dim + int(text.get("v_head_dim") or k_dim)) * dtype_bytes
    else:
        head_dim = text.get("head_dim") or int(text.get("hidden_size") or text.get("n_embd") or 0) // heads
        per_layer = 2 * kv_heads * int(head_dim) * dtype_bytes
    types = text.get("layer_types")
    window = text.get("sliding_window")
    if not types:
        sliding_all = window and text.get("use_sliding_window", True) is not False
        types = ["sliding_attention" if sliding_all else "full_attention"] * layers
    total = 0
    for t in types[:layers]:
        tokens = min(length, int(window) - 1) if t == "sliding_attention" and window else length
        total += per_layer * tokens
    return total, layers, per_layer * layers


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
    return MemoryPlan(None if parameters is None else parameters * b, kv, length, dtype, layers, per_token)


def available_memory(device: str) -> int | None:
    """Bytes free where the model will live: the GPU's free memory for cuda, else the machine's available RAM."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        import os

        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def memory_before_loading(name: str | None, gguf_file: str | None, dtype: str, length: int | None,
                          runtime: str = "transformers") -> MemoryPlan | None:
    """What `name` will need (`plan_memory`) at `length` tokens (default: 8 x L0, the default target), read from its
    config.json / safetensors headers or GGUF header; None where nothing can be read without a download."""
    from ropecli.models.config import (BUILTIN, BUILTIN_DIR, gguf_metadata, gguf_parameters, read_rope_config)

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
                "sliding_window": meta.get(f"{arch}.attention.sliding_window")}
        if runtime == "llamacpp":  # the quantized file as it is; llama.cpp's KV cache is f16 by default
            kv, layers, per_token = kv_cache_bytes(text, length, 2)
            return MemoryPlan(path.stat().st_size, kv, length, "gguf + f16 KV", layers, per_token)
        return plan_memory(text, gguf_parameters(path), length, dtype)
    if path.is_dir() and (path / "config.json").is_file():
        cfg = json.loads((path / "config.json").read_text())
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
        return plan_memory(text, safetensors_parameters(path), length, dtype)
    return None
