"""A position map (`ropecli.maps.position_maps`) inside a transformers model, for as long as `mapped(...)` is open.

The model's rotary modules hand the attention layers cos = 1, sin = 0, so queries and keys arrive unrotated (and the
KV cache keeps its keys unrotated: cached decoding follows the same map), and one attention function, registered
through transformers' attention interface, dispatches per layer (`map_layers`): the layers that attend globally with
RoPE run the map's regions (`region_attention`, `flex_regions`), each with its own rotary module and layer type
(Gemma 3/4, OLMo 3), partial rotary in the model's own layout, multi-head latent attention's rope part (the last dims
of each head, DeepSeek V3 / Kimi K2 / Mistral 4: `map_layers.latent_rope`; the latent part scored as is, the KV cache
keeping its shared k_rot unrotated, the softmax scale with DeepSeek's mscale as shipped), Gemma 2's soft-capping inside
each region; sliding, NoPE, linear-attention and convolution layers run as shipped. Refused in one line: chunked RoPE
(Llama 4), compressed layers (DeepSeek V4), a model with no layer to map.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import partial
from types import SimpleNamespace

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.maps.map_layers import LayerDispatch, plan_layers, rotator
from ropecli.maps.position_maps import BoundMap
from ropecli.maps.region_attention import BLOCK, MappedAttention
from ropecli.models.patch import find_rotary_slots, text_config

masking_utils = deferred("transformers.masking_utils")
modeling_utils = deferred("transformers.modeling_utils")
torch = deferred("torch")

NAME = "ropecli_mapped"


def _identity_rotary(rotary):
    real = rotary.forward

    def forward(x, position_ids, *args, **kwargs):  # the shapes and dtypes of the real output, no rotation
        cos, sin = real(x, position_ids, *args, **kwargs)
        return torch.ones_like(cos), torch.zeros_like(sin)

    return real, forward


def _layers(model, name: str = "a position map", length: int | None = None):
    """(rotary slots, text config, per-layer plans) of a model a map can run on; refused in one line otherwise."""
    slots = find_rotary_slots(model)
    if len(slots) > 1 and any(s.layer_type is None for s in slots):
        raise RopeCliError(f"{name}: {len(slots)} rotary modules and no layer type to tell which layer uses which; "
                           "not mapped")
    cfg = text_config(model)
    plans = _plans(cfg, slots, name, length)
    for s in slots:
        if complex_rotary(s):
            raise RopeCliError(f"{name}: {type(s.module).__name__} rotates by complex numbers (freqs_cis, DeepSeek V2's "
                               "interleaved pairs), which a map does not turn; not mapped (DeepSeek V3 / Kimi K2's MLA is)")
    return slots, cfg, plans


def complex_rotary(slot) -> bool:
    """Whether a rotary module hands its layers one complex tensor (freqs_cis: DeepSeek V2) instead of (cos, sin),
    probed at position 0 (its x only gives the dtype and device)."""
    buffer = next((b for b in slot.module.buffers()), None)
    x = torch.zeros(1, 1, 1, device=buffer.device if buffer is not None else "cpu")
    with torch.no_grad():
        kw = {"layer_type": slot.layer_type} if slot.layer_type else {}
        try:
            out = slot.module(x, torch.zeros(1, 1, dtype=torch.long, device=x.device), **kw)
        except Exception:  # noqa: BLE001  a module that cannot be probed so: the map's own call will say
            return False
    return isinstance(out, torch.Tensor) and out.is_complex()


def _plans(cfg, slots, name: str, length: int | None = None) -> list:
    return plan_layers(cfg, slots, length)


def map_refusal(model) -> str | None:
    """Why no position map can run on this transformers model (the one line `mapped` would raise), or None."""
    try:
        _layers(model)
    except RopeCliError as exc:
        return str(exc)
    return None


def config_refusal(cfg) -> str | None:
    """`map_refusal` from a (text) config alone, before any weight exists: its rotary slots are its per-type rope
    blocks (Gemma 3 style) or one."""
    blocks = getattr(cfg, "rope_parameters", None) or {}
    typed = sorted(t for t in set(getattr(cfg, "layer_types", None) or []) if isinstance(blocks.get(t), dict))
    try:
        _plans(cfg, [SimpleNamespace(layer_type=t) for t in typed] or [SimpleNamespace(layer_type=None)], "a position map")
    except RopeCliError as exc:
        return str(exc)
    return None


@contextmanager
def mapped(model, bound: BoundMap, block: int = BLOCK, kernel: str | None = None, selection: dict | None = None,
           observe=None, length: int | None = None):
    """Run `model` under the position map `bound` (checked where it was bound: `position_maps.bind`) until the block ends: the layers that
    attend globally with RoPE under the map, every other layer as shipped (`map_layers`); the attention implementation,
    the mask function and the rotary modules are put back after, whatever happens. `kernel`: `MappedAttention`'s
    (default: $ROPECLI_MAP_KERNEL, else "auto"). `selection`: {layer: (heads, pairs) bool}, the pairs a selecting map
    (DPE with top < 1) moves, chosen on this model (`maps.pair_contributions`, `maps.pair_selection`); `observe`:
    `MappedAttention`'s; `length`: the length the map is measured at, which decides once which sliding layers it maps
    (those whose window reaches it; default: the model's L)."""
    if bound.share < 1.0 and selection is None:
        raise RopeCliError(f"{bound.name}: {bound.record.selects} = {bound.share:g} moves the pairs chosen on the model by "
                           "their attention contribution: run it through ropecli's commands (they choose them), or pass "
                           "a selection")
    selection = selection if bound.share < 1.0 else None
    bound.regions(1)  # its parameters' own rules (DCA: local below chunk), before the model is touched
    slots, cfg, plans = _layers(model, bound.name, length)
    kernel = kernel or os.environ.get("ROPECLI_MAP_KERNEL", "auto")
    if kernel not in ("auto", "flex", "blocks"):
        raise RopeCliError(f"ROPECLI_MAP_KERNEL={kernel}: choose auto, flex or blocks")
    modules = {id(s.module): s.module for s in slots}
    real = {key: _identity_rotary(m) for key, m in modules.items()}  # per module: (its forward, the identity's)
    forwards = [partial(real[id(s.module)][0], layer_type=s.layer_type) if s.layer_type else real[id(s.module)][0]
                for s in slots]
    first = {n: min(i for i, p in enumerate(plans) if p.rope == n) for n in {p.rope for p in plans if p.rope is not None}}
    attention = {n: MappedAttention(bound.regions, forwards[n], block, kernel=kernel, name=bound, first_layer=first[n],
                                    selection=selection, observe=observe, per_prompt=bound.record.per_prompt)
                 for n in first}
    before = model.config._attn_implementation
    modeling_utils.ALL_ATTENTION_FUNCTIONS[NAME] = LayerDispatch(plans, attention, [rotator(real[id(s.module)][0], s.layer_type)
                                                                     for s in slots], before, modeling_utils.ALL_ATTENTION_FUNCTIONS)
    masks = masking_utils.ALL_MASK_ATTENTION_FUNCTIONS._global_mapping  # the unmapped layers' masks (a sliding window) as shipped
    if before in masks:
        masks[NAME] = masks[before]
    model.config._attn_implementation = NAME
    if cfg is not model.config:
        cfg._attn_implementation = NAME
    for key, m in modules.items():
        m.forward = real[key][1]
    try:
        yield model
    finally:
        del modeling_utils.ALL_ATTENTION_FUNCTIONS[NAME]
        masks.pop(NAME, None)
        for key, m in modules.items():
            m.forward = real[key][0]
        model.config._attn_implementation = before
        if cfg is not model.config:
            cfg._attn_implementation = before
