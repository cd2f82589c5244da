"""The architecture matrix: tiny random models of many RoPE architectures, built in-process from transformers'
own config classes (seconds, no download), each with what ropecli must read from it (d, base, L0, Ls, the
shipped schedule). Plain, partial rotary, MLA, per-layer-type and NoPE-layer architectures, and every shipped
rope type in the form its real model ships it (`Arch.v4`: the transformers-4 `rope_scaling` spelling, written
into config.json as the hub's files have it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from tiny_models import char_tokenizer

VOCAB = 96
L0 = 32  # every tiny model's original length


@dataclass(frozen=True)
class Arch:
    name: str  # the row's name in the docs' table
    model_type: str  # transformers' model_type (AutoConfig.for_model)
    like: str  # the real models it stands for
    kwargs: dict = field(default_factory=dict)  # config arguments beyond the common ones
    rope: dict | None = None  # the shipped rope block (None: plain RoPE at base `base`)
    base: float = 10000.0
    d: int = 16  # rotary dim ropecli must read
    Ls: int = L0  # the shipped length ropecli must read
    shipped: str | None = None  # the rope_type ropecli must name
    v4: bool = False  # write the rope block as transformers-4 `rope_scaling` + `rope_theta` in config.json
    per_type: bool = False  # RoPE per layer type (Gemma 3 style)
    blocks: tuple[str, str] = ("full_attention", "sliding_attention")  # per_type: (the block `rope` is, the plain one)
    model_class: str | None = None  # the transformers class where AutoModelForCausalLM has no entry (Mistral 4)
    layers: str = ""  # the layer kinds ropecli must read (`LayerKinds.summary`), "" for one RoPE on every layer
    temperature: str | None = None  # the position temperature ropecli must read (`Temperature.kind`)
    map_refused: str | None = None  # why a position map cannot run here (in its one-line refusal); None: it runs


def _ramp(lo: float, hi: float, n: int = 8) -> list[float]:
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


LLAMA3 = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": L0}
SLIDING = "1 RoPE sliding (16 tokens), 1 RoPE full"
ARCHS = [
    Arch("llama", "llama", "LLaMA 1/2, SmolLM2", {"num_key_value_heads": 2, "head_dim": 16}),
    Arch("mistral", "mistral", "Mistral 7B", {"num_key_value_heads": 2, "head_dim": 16}, base=1e6),
    Arch("qwen2", "qwen2", "Qwen2/2.5 (short configs)", {"num_key_value_heads": 2}, base=1e6),
    Arch("olmo2", "olmo2", "OLMo 2", {"num_key_value_heads": 2}, base=5e5),
    Arch("granite", "granite", "Granite 3", {"num_key_value_heads": 2}),
    Arch("cohere", "cohere", "Command-R", {"num_key_value_heads": 2}),
    Arch("starcoder2", "starcoder2", "StarCoder2", {"num_key_value_heads": 2}, base=1e5),
    Arch("phi (partial)", "phi", "Phi-2: partial rotary 0.5", {"partial_rotary_factor": 0.5}, d=8),
    Arch("gpt_neox (partial)", "gpt_neox", "Pythia: rotary_pct 0.25", {"partial_rotary_factor": 0.25}, d=4),
    Arch("stablelm (partial)", "stablelm", "StableLM 2: partial 0.25", {"partial_rotary_factor": 0.25, "num_key_value_heads": 4},
         d=4),
    Arch("smollm3 (NoPE layers)", "smollm3", "SmolLM3: every 4th layer without RoPE",
         {"num_key_value_heads": 2, "no_rope_layer_interval": 2}, layers="1 RoPE full, 1 NoPE full"),
    Arch("gemma2", "gemma2", "Gemma 2 (one RoPE, sliding layers)",
         {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": 16}, layers=SLIDING),
    Arch("llama3 (Llama 3.1)", "llama", "Llama 3.1/3.2/3.3: llama3 x8 / x32 from 8k", {"num_key_value_heads": 2, "head_dim": 16},
         rope={**LLAMA3}, base=5e5, Ls=4 * L0, shipped="llama3"),
    Arch("qwen3 + yarn (v4)", "qwen3", "Qwen3 long-context config: rope_scaling yarn x4 from 32k",
         {"num_key_value_heads": 2, "head_dim": 16},
         rope={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}, base=1e6, Ls=4 * L0,
         shipped="yarn", v4=True),
    Arch("phi3 + longrope (v4)", "phi3", "Phi-3/3.5 128k: longrope short/long factors",
         {"num_key_value_heads": 4, "original_max_position_embeddings": L0},
         rope={"type": "longrope", "short_factor": _ramp(1.0, 1.5), "long_factor": _ramp(1.0, 6.0)},
         Ls=4 * L0, shipped="longrope", v4=True),
    Arch("gpt_oss + yarn", "gpt_oss", "gpt-oss: yarn x32, truncate false, sliding/full layers",
         {"num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 2, "num_experts_per_tok": 1, "sliding_window": 16},
         rope={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
               "original_max_position_embeddings": L0}, base=1.5e5, Ls=4 * L0, shipped="yarn", layers=SLIDING),
    Arch("deepseek_v3 (MLA) + yarn", "deepseek_v3", "DeepSeek-V3: MLA, yarn x40 with mscale",
         {"num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
          "v_head_dim": 8, "n_routed_experts": 2, "num_experts_per_tok": 1, "n_shared_experts": 1, "first_k_dense_replace": 1,
          "moe_intermediate_size": 32, "n_group": 1, "topk_group": 1},
         rope={"type": "yarn", "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1,
               "original_max_position_embeddings": L0}, Ls=4 * L0, d=8, shipped="yarn", v4=True,
         ),
    Arch("gemma3 + linear (v4)", "gemma3_text", "Gemma 3 >= 4B: linear x8 on the global layers only",
         {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]},
         rope={"rope_type": "linear", "factor": 4.0}, base=1e6, Ls=4 * L0, shipped="linear", v4=True, per_type=True,
         layers=SLIDING),
    Arch("llama + dynamic", "llama", "dynamic NTK (transformers 'dynamic')", {"num_key_value_heads": 2, "head_dim": 16},
         rope={"rope_type": "dynamic", "factor": 2.0}, shipped="dynamic"),
    Arch("hunyuan + ntk-alpha", "hunyuan_v1_dense", "HunYuan: 'dynamic' with a fixed alpha (base x alpha^(d/(d-2)))",
         {"num_key_value_heads": 2, "head_dim": 16}, rope={"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0},
         shipped="ntk_alpha"),
    Arch("mistral4 (MLA, partial 0.5) + yarn", "mistral4", "Mistral 4: MLA, qk_rope 16 of a 32-wide head, yarn",
         {"num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
          "v_head_dim": 16, "n_routed_experts": 2, "num_experts_per_tok": 1, "n_shared_experts": 1, "first_k_dense_replace": 1,
          "moe_intermediate_size": 32, "n_group": 1, "topk_group": 1, "partial_rotary_factor": 0.5},
         rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0, "beta_fast": 32.0, "beta_slow": 1.0,
               "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1},
         Ls=4 * L0, shipped="yarn", model_class="Mistral4ForCausalLM", temperature="mistral4",
         ),
    Arch("llama4 (chunked, NoPE layers)", "llama4_text", "Llama 4: RoPE layers in chunks, NoPE global layers",
         {"num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 2, "intermediate_size_mlp": 96,
          "attention_chunk_size": 16, "no_rope_layers": [1, 0], "floor_scale": 8, "attn_scale": 0.1}, base=5e5,
         layers="1 RoPE chunked (16 tokens), 1 NoPE full", temperature="llama4", map_refused="no layer to map"),
    Arch("qwen3_5 (hybrid, partial 0.5)", "qwen3_5_text", "Qwen3.5: linear-attention layers between partial-rotary ones",
         {"num_key_value_heads": 2, "head_dim": 16, "partial_rotary_factor": 0.5,
          "layer_types": ["linear_attention", "full_attention"]}, base=1e7, d=8, layers="1 linear attention, 1 RoPE full"),
    Arch("gemma4 (p-RoPE 0.25)", "gemma4_text", "Gemma 4: p-RoPE on the global layers (a quarter of a 32-wide head rotates)",
         {"num_key_value_heads": 2, "head_dim": 16, "global_head_dim": 32, "sliding_window": 16,
          "layer_types": ["sliding_attention", "full_attention"]},
         rope={"rope_type": "proportional", "partial_rotary_factor": 0.25}, base=1e6, d=32, per_type=True, layers=SLIDING),
    Arch("apertus + llama3", "apertus", "Apertus: llama3 x8 at rope_theta 12M", {"num_key_value_heads": 2, "head_dim": 16},
         rope={**LLAMA3}, base=1.2e7, Ls=4 * L0, shipped="llama3"),
    Arch("ernie4_5", "ernie4_5", "ERNIE 4.5 (dense)", {"num_key_value_heads": 2, "head_dim": 16}, base=5e5),
    Arch("exaone4 (sliding)", "exaone4", "EXAONE 4: sliding and full layers",
         {"num_key_value_heads": 2, "head_dim": 16, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]},
         base=1e6, layers="1 RoPE sliding (16 tokens), 1 NoPE full", map_refused="no layer to map"),
    Arch("glm4_moe (partial 0.5)", "glm4_moe", "GLM-4.5: partial rotary 0.5, MoE",
         {"num_key_value_heads": 2, "head_dim": 16, "partial_rotary_factor": 0.5, "n_routed_experts": 2, "num_experts_per_tok": 1,
          "moe_intermediate_size": 32, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}, base=1e6, d=8),
    Arch("seed_oss", "seed_oss", "Seed-OSS", {"num_key_value_heads": 2, "head_dim": 16}, base=1e7),
    Arch("minimax_m2", "minimax_m2", "MiniMax-M2 (MoE)",
         {"num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 2, "num_experts_per_tok": 1}, base=5e6),
    Arch("olmo3 + yarn (full layers)", "olmo3", "OLMo 3: yarn on the full layers only, sliding layers plain",
         {"num_key_value_heads": 2, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"]},
         rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}, base=5e5, Ls=4 * L0, shipped="yarn",
         per_type=True, layers=SLIDING),
    Arch("qwen3_next (hybrid, partial 0.5)", "qwen3_next", "Qwen3-Next: linear attention between partial-rotary full layers",
         {"num_key_value_heads": 2, "head_dim": 16, "partial_rotary_factor": 0.5, "layer_types": ["linear_attention", "full_attention"],
          "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
          "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8},
         d=8, layers="1 linear attention, 1 RoPE full"),
    Arch("lfm2 (conv layers)", "lfm2", "LFM2: short convolutions between attention layers",
         {"num_key_value_heads": 2, "layer_types": ["conv", "full_attention"], "full_attn_idxs": [1]}, base=1e6,
         layers="1 convolution, 1 RoPE full"),
    Arch("falcon_h1 (parallel Mamba)", "falcon_h1", "Falcon-H1: attention and Mamba side by side in every layer",
         {"num_key_value_heads": 2, "head_dim": 16, "mamba_d_ssm": 32, "mamba_n_heads": 4, "mamba_d_head": 8, "mamba_d_state": 8,
          "mamba_n_groups": 1, "mamba_chunk_size": 16}, base=1e11, layers="2 RoPE full + Mamba"),
    Arch("deepseek_v4 (compressed) + yarn", "deepseek_v4", "DeepSeek V4: sliding + compressed layers, 'main' / 'compress' ropes",
         {"num_hidden_layers": 3, "head_dim": 32, "qk_rope_head_dim": 8, "partial_rotary_factor": 0.25, "moe_intermediate_size": 32,
          "n_routed_experts": 2, "num_experts_per_tok": 1, "n_shared_experts": 1, "sliding_window": 16, "index_n_heads": 2,
          "index_head_dim": 16, "index_topk": 4, "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
          "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]},
         rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}, base=1.6e5, d=8, Ls=4 * L0,
         shipped="yarn", per_type=True, blocks=("compress", "main"),
         layers="1 RoPE sliding (16 tokens), 1 RoPE sliding + CSA 1:4 (16 tokens), 1 RoPE sliding + HCA 1:8 (16 tokens)",
         map_refused="compressed_sparse_attention"),
    Arch("mistral + linear (v4 'type')", "mistral", "a linear x4 fine-tune in transformers-4 form",
         {"num_key_value_heads": 2, "head_dim": 16}, rope={"type": "linear", "factor": 4.0}, Ls=4 * L0, shipped="linear",
         v4=True),
]


def build_arch(arch: Arch, seed: int = 0):
    """The tiny model of `arch`: 2 layers, hidden 64, 4 heads, float32, eval mode, weights scaled up so that RoPE
    differences show in the loss."""
    torch.manual_seed(seed)
    kw = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=arch.Ls if arch.rope and arch.shipped != "dynamic" else L0,
              bos_token_id=0, eos_token_id=1, pad_token_id=1, tie_word_embeddings=False) | arch.kwargs
    rope = dict(arch.rope or {})
    rope.setdefault("rope_type", rope.pop("type", "default"))
    rope["rope_theta"] = arch.base
    if "partial_rotary_factor" in arch.kwargs:
        rope["partial_rotary_factor"] = arch.kwargs["partial_rotary_factor"]
    if arch.per_type:
        plain = {"rope_type": "default", "rope_theta": 1e4} | ({"partial_rotary_factor": rope["partial_rotary_factor"]}
                                                              if "partial_rotary_factor" in rope else {})
        kw["rope_parameters"] = {arch.blocks[0]: rope, arch.blocks[1]: plain}
    else:
        kw["rope_parameters"] = rope
    cfg = AutoConfig.for_model(arch.model_type, **kw)
    # the class by its static name: AutoModelForCausalLM.from_config would give a map folder's remote class where one
    # was loaded earlier in this process (trust_remote_code registers it for the config's type, process-wide)
    model = getattr(transformers, arch.model_class or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[arch.model_type])(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model.float().eval()


def save_arch(arch: Arch, path: Path) -> Path:
    """The model of `arch` saved as a folder with a character tokenizer; `v4` rows rewritten into the
    transformers-4 config form (rope_theta + rope_scaling; Gemma 3's rope_local_base_freq) that hub files have."""
    build_arch(arch).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    if arch.v4:
        cfg_path = Path(path) / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.pop("rope_parameters", None)
        cfg["rope_theta"] = arch.base
        cfg["rope_scaling"] = dict(arch.rope)
        if arch.per_type:
            cfg["rope_local_base_freq"] = 1e4
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return Path(path)


def docs_table() -> str:
    """The matrix as docs/architectures.md shows it (tests/test_architecture_matrix.py checks the two agree)."""
    rows = ["| architecture | stands for | d | base | L0 | Ls | ships | layers | temperature | position map |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for a in ARCHS:
        ships = "plain RoPE" if not a.shipped else f"{a.shipped} ({'rope_scaling' if a.v4 else 'rope_parameters'})"
        mapped = f"refused: {a.map_refused}" if a.map_refused else "the RoPE full layers" if a.layers else "every layer"
        rows.append(f"| {a.name} | {a.like} | {a.d} | {a.base:g} | {L0} | {a.Ls} | {ships} | {a.layers or 'RoPE on every layer'} "
                    f"| {a.temperature or '—'} | {mapped} |")
    return "\n".join(rows)
