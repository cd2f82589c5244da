"""Which layers a position map changes (`plan_layers`), decided once for the length it runs at.

A map changes the layers that attend globally with RoPE ("RoPE full", also beside a Mamba; a sliding layer whose
window reaches every key of the call). Every other layer runs the model's own attention with its own arguments
(sliding window, soft-capping, its mask): a sliding layer whose window is below the context never sees a distance it
was not trained on, NoPE, linear-attention, convolution and Mamba layers have no positions (`maps.map_run` dispatches
per layer on these plans).
"""

from __future__ import annotations

from dataclasses import dataclass

from ropecli.errors import RopeCliError
from ropecli.models.layer_kinds import POSITIONLESS, rope_flags


@dataclass(frozen=True)
class LayerPlan:
    """What one layer of a model is under a map: `mapped` (RoPE attending globally), `rope` (its rotary slot index, None:
    no positions), `sliding` (its window, None: global)."""
    kind: str
    mapped: bool
    rope: int | None
    sliding: int | None = None


def plan_layers(text, slots, length: int | None = None) -> list[LayerPlan]:
    """Per layer of a (text) config: its kind and whether a map changes it, decided once for the `length` the map runs
    at (default: the model's L): a sliding layer is mapped where its window reaches `length`, and otherwise runs as
    shipped at every length, so decoding from a prompt inside its window past it is one pass; refused in
    one line where no layer is left to map (sliding windows shorter than L included) or a layer's RoPE is one the map
    cannot rotate (chunked: Llama 4's complex rotation)."""
    config = text.to_dict()
    n = int(getattr(text, "num_hidden_layers", None) or config["num_hidden_layers"])  # an alias (LongCat: num_layers)
    types = config.get("layer_types")
    window = config.get("sliding_window")
    if not (isinstance(types, (list, tuple)) and len(types) == n):  # no layer types: a window, if any, on every layer
        sliding = window and config.get("use_sliding_window", True) is not False  # (Mistral; not Qwen2's unused one)
        types = ["sliding_attention" if sliding else "full_attention"] * n
    types = list(types)
    rope_on = rope_flags(config, types)
    by_type = {s.layer_type: i for i, s in enumerate(slots) if s.layer_type}
    plans = []
    for t, r in zip(types, rope_on):
        if t in POSITIONLESS or not r:
            plans.append(LayerPlan(POSITIONLESS.get(t, f"NoPE {t.removesuffix('_attention')}"), False, None))
            continue
        slot = by_type.get(t, 0) if by_type else 0
        if t == "chunked_attention":
            plans.append(LayerPlan("RoPE chunked", False, slot))
        elif t == "sliding_attention":
            plans.append(LayerPlan("RoPE sliding", bool(window) and window >= (length or trained_len(config)), slot,
                                   window))
        elif t == "full_attention":
            plans.append(LayerPlan("RoPE full", True, slot))
        elif t == "indexed_attention":  # DeepSeek Sparse Attention: its indexer picks the keys by its own RoPE scores
            raise RopeCliError("a position map on DeepSeek Sparse Attention's indexed layers (DeepSeek V3.2, GLM MoE DSA, "
                               "HY V4) is not supported: their lightning indexer chooses each query's keys by scores "
                               "under its own RoPE, which the map would have to move too; not mapped")
        else:
            raise RopeCliError(f"a position map on '{t}' layers is not supported; pass a model whose RoPE layers are "
                               "full or sliding attention")
    trained = trained_len(config)  # a window as long as L: global wherever it reaches every key
    if not any(p.mapped or (p.sliding or 0) >= max(1, trained) for p in plans):
        kinds = sorted({p.kind for p in plans})
        raise RopeCliError(f"no layer to map: this model's layers are {', '.join(kinds)}; a map changes RoPE layers that "
                           "attend past L (chunked and sliding layers attend within their chunk or window, NoPE layers "
                           "have no positions)")
    if any(p.kind == "RoPE chunked" for p in plans):
        raise RopeCliError("a position map beside chunked RoPE layers (Llama 4) is not supported: their rotation is "
                           "complex-valued inside chunks; the long range is the NoPE layers'")
    return plans


def trained_len(config: dict) -> int:
    return int(config.get("max_position_embeddings") or 0)


def latent_rope(module) -> int | None:
    """Multi-head latent attention (DeepSeek V2/V3, Kimi K2, Mistral 4): the rope part's width, the last dims of each
    head (the attention concatenates (q_pass, q_rot) and (k_nope, k_rot): modeling_deepseek_v3.py and
    modeling_mistral4.py, `forward` / `expand_kv`), in rotate-half order once the model has rotated it (where it
    interleaves, `apply_rotary_pos_emb_interleave` puts the pairs in rotate-half order first); None for any other
    attention. Its cache holds the latent and the shared k_rot (`cache.update(kv_nope, k_rot, ...)`): `MapRun.update`
    turns the k_rot."""
    d, nope = getattr(module, "qk_rope_head_dim", None), getattr(module, "qk_nope_head_dim", None)
    return int(d) if d and nope is not None else None
