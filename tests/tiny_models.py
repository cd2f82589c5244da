"""Tiny in-process models of several RoPE families, and a saved tiny model folder for CLI tests."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

VOCAB = 96
L = 64  # training length of every tiny model


def build(family: str, rope_parameters: dict | None = None, seed: int = 0):
    """A 2-layer model of `family` with RoPE `rope_parameters` (default: unscaled), float32, eval mode."""
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=L)
    if family == "llama":
        rp = {"rope_type": "default", "rope_theta": 10000.0, **(rope_parameters or {})}
        model = LlamaForCausalLM(LlamaConfig(**common, num_key_value_heads=2, head_dim=16, rope_parameters=rp))
    elif family == "qwen2":
        rp = {"rope_type": "default", "rope_theta": 1e6, **(rope_parameters or {})}
        model = Qwen2ForCausalLM(Qwen2Config(**common, num_key_value_heads=2, rope_parameters=rp))
    elif family == "gpt_neox":  # partial rotary: 50% of head_dim 16 -> rotary dim 8
        rp = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5, **(rope_parameters or {})}
        model = GPTNeoXForCausalLM(GPTNeoXConfig(**common, rope_parameters=rp))
    elif family == "gemma3":
        full = {"rope_type": "default", "rope_theta": 1e6, **(rope_parameters or {})}
        rp = {"full_attention": full, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
        cfg = Gemma3TextConfig(**{**common, "num_hidden_layers": 4}, num_key_value_heads=2, head_dim=16, rope_parameters=rp,
                               sliding_window=16, layer_types=["sliding_attention", "full_attention"] * 2,
                               final_logit_softcapping=30.0)
        model = Gemma3ForCausalLM(cfg)
    else:
        raise ValueError(family)
    # random init gives near-uniform logits; larger weights make RoPE differences visible
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model.eval()


def rotary_dim(family: str) -> int:
    return {"llama": 16, "qwen2": 16, "gpt_neox": 8, "gemma3": 16}[family]


def base_of(family: str) -> float:
    return {"llama": 1e4, "qwen2": 1e6, "gpt_neox": 1e4, "gemma3": 1e6}[family]


def char_tokenizer():
    """A character-level fast tokenizer (no download) with a BOS token."""
    chars = [chr(c) for c in range(32, 127)][: VOCAB - 2]
    vocab = {"<s>": 0, "<unk>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="<unk>")


def save_tiny(path, family: str = "llama"):
    model = build(family)
    model.save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def folder_batches_agree(folder, rows, prompt, new: int) -> None:
    """An exported map folder's generation: a left-padded batch of `rows` (1-D id tensors) gives each row what it
    gives alone, and the static cache what the dynamic one gives for `prompt` (1, T)."""
    n = max(len(r) for r in rows)
    batch, mask = torch.zeros(len(rows), n, dtype=torch.long), torch.zeros(len(rows), n, dtype=torch.long)
    for b, r in enumerate(rows):
        batch[b, n - len(r):], mask[b, n - len(r):] = r, 1
    with torch.no_grad():
        both = folder.generate(batch, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=0)
        for b, r in enumerate(rows):
            alone = folder.generate(r[None], max_new_tokens=new, do_sample=False, pad_token_id=0)
            assert torch.equal(both[b, n:], alone[0, len(r):]), (b, both[b, n:], alone[0, len(r):])
        static = folder.generate(prompt, max_new_tokens=new, do_sample=False, cache_implementation="static")
        dynamic = folder.generate(prompt, max_new_tokens=new, do_sample=False)
    assert torch.equal(static, dynamic)
