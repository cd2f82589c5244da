"""A model's own attention, its sliding layers run over their band of keys: memory O(T x window), never the
T x T mask transformers builds for a sliding layer past its window.

transformers 5 (masking_utils.py, `create_sliding_window_causal_mask` -> `sdpa_mask` / `eager_mask`) materialises a
(B, 1, T_q, T_k) mask for every sliding layer once T_k exceeds the window (about 2.4 GB in bool at 49k, and the CPU
kernel turns it into a float bias per call), so Gemma 3 270M (5 sliding layers per global one, window 512) cannot be
scored past its L = 32k on a 24 GB machine. Loaded models whose layers slide (`banded_model`; their layers full or
sliding attention, nothing chunked or compressed) run under an attention implementation registered here instead of
sdpa or eager:
- the mask function answers None where the mask would be the plain causal (or sliding causal) one: no padding, no
  overlay (packed sequences, bidirectional image tokens), queries the last T_q of T_k contiguous keys (a prefill, a
  dynamic cache, a sliding cache); anything else (left padding, a static cache's empty slots) gets the model's own mask;
- the attention function runs the model's own (sdpa or eager) on what it is given where a mask came, and where none
  came: a global layer whose queries are all the keys under sdpa's own causal skip (the fused kernel, no mask, as the
  unpatched model runs it), every other case (a sliding layer past its window, a cached continuation of several tokens,
  eager) query block by query block over the keys each block reaches — for a sliding layer its band of window + block
  keys — under a (block, band) mask in the implementation's own format (bool for sdpa, an additive bias for eager).
Exact: every query attends to the same keys as under the model's own mask (transformers' `sliding_window_overlay`: key
j reaches query i where i - window < j <= i). A position map (`ropecli.maps.mapped_attention`) opened on such a model
takes this implementation as the one its unmapped layers run, so they are banded under the map too.
"""

from __future__ import annotations

import sys

from ropecli.deferred import deferred

masking_utils = deferred("transformers.masking_utils")
modeling_utils = deferred("transformers.modeling_utils")
torch = deferred("torch")

BLOCK = 512  # queries per block: a sliding layer's block attends to (BLOCK, BLOCK + window - 1) keys
BANDED = {"sdpa": "ropecli_banded_sdpa", "eager": "ropecli_banded_eager"}  # the implementation it wraps -> its name
# the layer types whose mask is the plain causal or sliding one: a model with any other (Llama 4's chunked layers,
# DeepSeek V4's compressed ones, which append entries to the keys and extend the mask) runs as shipped
PLAIN_TYPES = {"full_attention", "sliding_attention"}


def sliding_layers(text) -> bool:
    """Whether a (text) config has a layer that attends within a sliding window (`layer_types` with sliding_attention,
    or a window on every layer where the config has no layer types and uses it: Mistral, not Qwen2's unused one)."""
    window = getattr(text, "sliding_window", None)
    if not window:
        return False
    types = getattr(text, "layer_types", None)
    if isinstance(types, (list, tuple)) and types:
        return "sliding_attention" in types
    return getattr(text, "use_sliding_window", True) is not False


def banded_model(model) -> str | None:
    """Switch a loaded transformers model whose layers slide to the banded implementation of its own (sdpa or eager);
    returns the name set, None where nothing changed (no sliding layer, or another implementation: FlashAttention and
    flex never build the T x T mask). Not saved with the model: `_attn_implementation` is not in its config.json."""
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    own = model.config._attn_implementation
    types = set(getattr(text, "layer_types", None) or [])
    if own not in BANDED or not sliding_layers(text) or not types <= PLAIN_TYPES:
        return None
    register()
    for cfg in {id(c): c for c in (model.config, text)}.values():
        cfg._attn_implementation = BANDED[own]
    return BANDED[own]


def register() -> None:
    """Register the banded implementations in transformers' attention and mask interfaces (idempotent)."""
    for own, name in BANDED.items():
        if name not in modeling_utils.ALL_ATTENTION_FUNCTIONS._global_mapping:
            modeling_utils.ALL_ATTENTION_FUNCTIONS.register(name, BandedAttention(own))  # the global mappings: transformers'
            masking_utils.ALL_MASK_ATTENTION_FUNCTIONS.register(name, BandedMask(own))  # mask code looks its name up there


def plain_causal(q_length: int, kv_length: int, q_offset: int = 0, kv_offset: int = 0, attention_mask=None,
                 allow_is_causal_skip: bool = True, **_) -> bool:
    """Whether the mask transformers asks for is the plain (sliding) causal one over contiguous keys: no overlay (it
    turns the causal skip off for packed sequences and bidirectional blocks), no padding, and the queries the last
    q_length of the kv_length keys (a static cache has empty slots after them)."""
    if not allow_is_causal_skip or q_offset + q_length != kv_offset + kv_length:
        return False
    return attention_mask is None or bool(attention_mask.all())


class BandedMask:
    """The mask function: None where `plain_causal` (the attention bands the layer itself), else the model's own."""

    def __init__(self, own: str):
        self.own = own

    def __call__(self, **kwargs):
        if plain_causal(**kwargs):
            return None
        return masking_utils.ALL_MASK_ATTENTION_FUNCTIONS[self.own](**kwargs)


class BandedAttention:
    """The attention function: `__call__(module, query (B, H, T_q, D), key, value (B, H_kv, T_k, D), attention_mask,
    ...)` -> (output (B, T_q, H, D), None), the model's own implementation on each block."""

    def __init__(self, own: str):
        self.own = own

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        fn = own_function(module, self.own)
        if attention_mask is not None:  # padding, a static cache, an overlay: the model's own mask as given
            return fn(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        Tq, Tk = query.shape[2], key.shape[2]
        window = layer_window(module, kwargs)
        reaches_all = window is None or Tk <= window  # the last query reaches every key: only causality masks
        if reaches_all and (Tq == 1 or (Tq == Tk and self.own == "sdpa")):  # one query; sdpa's own causal skip
            return fn(module, query, key, value, None, scaling=scaling, dropout=dropout, **kwargs)
        outs = []
        kj = torch.arange(Tk, device=query.device)
        for s in range(0, Tq, BLOCK):
            qi = torch.arange(Tk - Tq + s, Tk - Tq + min(Tq, s + BLOCK), device=query.device)  # (n,) their positions
            lo = max(0, int(qi[0]) - window + 1) if window else 0
            hi = int(qi[-1]) + 1
            allowed = kj[None, lo:hi] <= qi[:, None]  # (n, hi - lo)
            if window:
                allowed &= kj[None, lo:hi] > qi[:, None] - window
            mask = allowed if self.own == "sdpa" else \
                torch.zeros(allowed.shape, dtype=query.dtype, device=query.device).masked_fill_(
                    ~allowed, torch.finfo(query.dtype).min)
            out, _ = fn(module, query[:, :, s:s + len(qi)], key[:, :, lo:hi], value[:, :, lo:hi], mask[None, None],
                        scaling=scaling, dropout=dropout, **kwargs)
            outs.append(out)  # (B, n, H, D)
        return torch.cat(outs, dim=1), None


def layer_window(module, kwargs: dict) -> int | None:
    """The sliding window of the layer `module` belongs to, None for a global layer: the window its attention hands
    the attention function (Gemma, Mistral, Qwen2, gpt-oss: `sliding_window=`), else its own attribute, else its
    config's layer type (Qwen2-MoE, PhiMoE, Doge build the sliding mask without handing the window on)."""
    if "sliding_window" in kwargs:
        return kwargs["sliding_window"] or None
    if getattr(module, "sliding_window", None):
        return int(module.sliding_window)
    cfg, idx = getattr(module, "config", None), getattr(module, "layer_idx", None)
    if cfg is None or not sliding_layers(cfg):
        return None
    types = getattr(cfg, "layer_types", None)
    if isinstance(types, (list, tuple)) and types and idx is not None:
        return int(cfg.sliding_window) if types[idx] == "sliding_attention" else None
    return int(cfg.sliding_window)


def own_function(module, own: str):
    """The implementation the model would run: transformers' registered sdpa, or the modeling file's own
    `eager_attention_forward` (eager is not in the attention interface)."""
    if own in modeling_utils.ALL_ATTENTION_FUNCTIONS._global_mapping:
        return modeling_utils.ALL_ATTENTION_FUNCTIONS[own]
    return getattr(sys.modules[type(module).__module__], "eager_attention_forward")
