"""A LLaMA-architecture GGUF written from an in-process transformers model with the `gguf` package,
the way llama.cpp's convert_hf_to_gguf.py lays it out (tensor names, q/k row permutation), with the
tokenizer stored as `no_vocab` (enough for ropecli's export to read, copy and extend), or, given a
byte-level BPE `tokenizer.json` (the built-in model's), as a `gpt2` vocabulary llama.cpp loads."""

from __future__ import annotations

import json

import gguf
import numpy as np


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: HF's rotate-half q/k rows to llama.cpp's interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf(model, path, arch: str = "llama", tokenizer_json=None, rope_keys: dict | None = None,
                     rope_tensors: dict | None = None) -> None:
    """`rope_keys`: extra `{arch}.rope.*` metadata (name after `{arch}.` -> value), as llama.cpp's converter writes
    a shipped scaling; `rope_tensors`: e.g. {"rope_freqs.weight": factors} (float32). arch "qwen2" is laid out as
    convert_hf_to_gguf's Qwen2Model does it: q/k rows as HF has them (llama.cpp runs qwen2 with NEOX rotation, HF's
    rotate-half) and q/k/v biases (zero: the built-in LLaMA has none)."""
    cfg = model.config
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    for key, value in (rope_keys or {}).items():
        if isinstance(value, str):
            w.add_string(f"{arch}.{key}", value)
        elif isinstance(value, int):
            w.add_uint32(f"{arch}.{key}", value)
        else:
            w.add_float32(f"{arch}.{key}", float(value))
    if tokenizer_json is None:
        w.add_tokenizer_model("no_vocab")
    else:
        tok = json.loads(open(tokenizer_json).read())
        vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
        special = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list([t for t, _ in vocab])
        w.add_token_types([3 if i in special else 1 for _, i in vocab])  # 3: control, 1: normal
        w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
        w.add_bos_token_id(cfg.bos_token_id)
        w.add_eos_token_id(cfg.eos_token_id)
    for name, values in (rope_tensors or {}).items():
        w.add_tensor(name, np.asarray(values, dtype=np.float32))
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "qwen2":
            for name, rows in (("q", q.shape[0]), ("k", k.shape[0]), ("v", sd[p + "self_attn.v_proj.weight"].shape[0])):
                w.add_tensor(f"blk.{i}.attn_{name}.bias", np.zeros(rows, dtype=np.float32))
        else:
            q, k = _permute(q, cfg.num_attention_heads), _permute(k, cfg.num_key_value_heads)
        w.add_tensor(f"blk.{i}.attn_q.weight", q)
        w.add_tensor(f"blk.{i}.attn_k.weight", k)
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
