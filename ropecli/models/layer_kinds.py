"""What each layer of a model does with positions, read from its config, and what that means for extending it.

A 2026 model is rarely one RoPE on every layer: Llama 4 rotates in 8,192-token chunks on three layers of four and
leaves every fourth without RoPE (NoPE, `no_rope_layers[i] == 0`, attending globally: `Llama4TextAttention`); SmolLM3
leaves every fourth without RoPE; Gemma 3/4, OLMo 3, EXAONE 4 and gpt-oss mix sliding-window and full layers;
Qwen3.5 / Qwen3-Next put linear-attention layers (no positions at all) between full ones, LFM2 convolutions, Falcon-H1
a Mamba-2 beside the attention of every layer. A
frequency schedule changes only the RoPE layers, and on chunked or sliding ones only distances below the chunk or
window; the header says so (`describe`) and --json carries the counts (`to_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# layer_types values without positions (no RoPE, no attention over positions)
POSITIONLESS = {"linear_attention": "linear attention", "conv": "convolution", "mamba": "Mamba", "mamba2": "Mamba"}
# DeepSeek V4: a sliding window plus compressed entries (one per `compress_rates[type]` tokens), rotated by its
# `compress` rope block (modeling_deepseek_v4.py: CSA picks top-k entries by an indexer, HCA attends to all)
COMPRESSED_KINDS = {"compressed_sparse_attention": "sliding + CSA", "heavily_compressed_attention": "sliding + HCA"}


@dataclass(frozen=True)
class LayerKinds:
    """(kind, layers) in the order of first appearance; kind is `RoPE full`, `RoPE sliding`, `RoPE chunked`,
    `NoPE full`, `linear attention` …; `span`: the window or chunk of sliding / chunked layers, in tokens."""
    counts: tuple[tuple[str, int], ...]
    sliding: int | None = None
    chunk: int | None = None
    rates: tuple[int, ...] = ()  # DeepSeek V4's compression rates (CSA, HCA)

    @property
    def mixed(self) -> bool:
        return len(self.counts) > 1 or any(kind != "RoPE full" for kind, _ in self.counts)

    def summary(self) -> str:
        """`36 RoPE chunked (8192 tokens), 12 NoPE full`."""
        def span(kind: str) -> str:
            n = self.chunk if "chunked" in kind else self.sliding if "sliding" in kind else None
            return f" ({n} tokens)" if n else ""
        return ", ".join(f"{n} {kind}{span(kind)}" for kind, n in self.counts)

    def extension_notes(self) -> list[str]:
        """What a frequency schedule can and cannot change on these layers, one sentence each."""
        kinds = dict(self.counts)
        notes = []
        if any("chunked" in k for k in kinds):
            notes.append(f"the RoPE layers attend within chunks of {self.chunk} tokens: a frequency schedule changes "
                         f"distances below {self.chunk} only; the long range is the NoPE layers' (and their temperature)")
        if any(k.startswith("NoPE") for k in kinds):
            notes.append("NoPE layers rotate nothing: no schedule changes them")
        compressed = [k for k in kinds if "CSA" in k or "HCA" in k]
        if compressed:
            notes.append(f"the compressed layers attend to the last {self.sliding} tokens and to one compressed entry per "
                         f"{'/'.join(str(r) for r in self.rates)} tokens, rotated by the 'compress' rope: the long range "
                         "is theirs, and a schedule on 'compress' (the default --rope-layers) changes it")
        elif any("sliding" in k for k in kinds):
            notes.append(f"sliding layers see {self.sliding} tokens back at most: the long range is the full layers'")
        if any("Mamba" in k for k in kinds):
            notes.append("each layer's Mamba half has no positions: only its attention half is extended")
        quiet = [k for k in kinds if not k.startswith(("RoPE", "NoPE"))]
        if quiet:
            notes.append(f"{' and '.join(quiet)} layers have no positions: only the attention layers are extended")
        return notes

    def to_json(self) -> dict[str, Any]:
        return {"counts": dict(self.counts), "sliding_window": self.sliding, "chunk": self.chunk}


def read_layer_kinds(text: dict[str, Any]) -> LayerKinds | None:
    """The layer kinds of a (text) config dict; None for a model with one RoPE on every layer (or that states nothing)."""
    n = text.get("num_hidden_layers")
    types = text.get("layer_types")
    if not isinstance(n, int) or n <= 0:
        return None
    types = list(types) if isinstance(types, list) and len(types) == n else ["full_attention"] * n
    rope_on = rope_flags(text, types)
    counts: dict[str, int] = {}
    parallel_ssm = bool(text.get("mamba_n_heads") and text.get("mamba_d_state"))  # Falcon-H1: Mamba beside every attention
    for t, r in zip(types, rope_on):
        if t in POSITIONLESS:
            kind = POSITIONLESS[t]
        elif t in COMPRESSED_KINDS:
            kind = f"RoPE {COMPRESSED_KINDS[t]} 1:{(text.get('compress_rates') or {}).get(t)}"
        else:
            kind = ("RoPE " if r else "NoPE ") + str(t).removesuffix("_attention") + (" + Mamba" if parallel_ssm else "")
        counts[kind] = counts.get(kind, 0) + 1
    chunk = text.get("attention_chunk_size") if any("chunked" in k for k in counts) else None
    sliding = text.get("sliding_window") if any("sliding" in k for k in counts) else None
    rates = tuple(int(r) for t, r in (text.get("compress_rates") or {}).items() if t in types)
    kinds = LayerKinds(tuple(counts.items()), sliding, chunk, rates)
    return kinds if kinds.mixed else None


def rope_flags(text: dict[str, Any], types: list[str]) -> list[int]:
    """Per layer 1 where it rotates with RoPE, 0 where not: `no_rope_layers` (Llama 4, SmolLM3: `use_rope =
    no_rope_layers[i]`); EXAONE 4 rotates only its sliding layers when it has them (modeling_exaone4.py,
    `Exaone4Attention.forward`: `if self.sliding_window is None or self.is_sliding`), its global layers are NoPE."""
    n = len(types)
    rope_on = text.get("no_rope_layers")
    if isinstance(rope_on, list) and len(rope_on) == n:
        return list(rope_on)
    if text.get("model_type") == "exaone4" and text.get("sliding_window"):
        return [int(t == "sliding_attention") for t in types]
    return [1] * n
