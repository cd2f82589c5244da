"""A position map (`ropecli.maps.position_maps`) inside a transformers model, for as long as `mapped(...)` is open: the
model runs ropecli's one map attention (`maps.map_run`, what the exported folder and vLLM's plugin run too).

The model's rotary modules rotate queries and keys at their true positions, as shipped; the layers that attend
globally with RoPE (`map_layers.plan_layers`) run the map's regions, each region's queries and keys turned from their
true positions to the region's, per layer type (Gemma 3/4, OLMo 3), partial rotary in the model's own layout,
multi-head latent attention's rope part (DeepSeek V3 / Kimi K2 / Mistral 4), Gemma 2's soft-capping inside each region;
sliding, NoPE, linear-attention and convolution layers run as shipped. A cache (decoding) keeps a mapped layer's keys
turned once to the map's primary key set; a padded batch runs each row at its own positions. Refused in one line:
chunked RoPE (Llama 4), compressed layers (DeepSeek V4), complex rotation (DeepSeek V2), a model with no layer to map.
"""

from __future__ import annotations

import inspect
import os
from contextlib import contextmanager
from types import SimpleNamespace

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.maps.map_layers import plan_layers, trained_len
from ropecli.maps.map_run import QUERY_BLOCK, map_forward, model_map_run
from ropecli.maps.position_maps import BoundMap
from ropecli.models.chunked_scoring import decoder
from ropecli.models.patch import find_rotary_slots, text_config

torch = deferred("torch")


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
def mapped(model, bound: BoundMap, block: int = QUERY_BLOCK, kernel: str | None = None, selection: dict | None = None,
           observe=None, length: int | None = None):
    """Run `model` under the position map `bound` (checked where it was bound: `position_maps.bind`) until the block
    ends: its decoder's forward runs each pass under one `map_run.MapRun` (`map_run.map_forward`), put back after,
    whatever happens. `block`: queries per block. `kernel`: "auto" (flex attention for a prefill on CUDA, the fused
    blocks elsewhere), "flex" (on any device: eager on the CPU, the twin the tests run) or "blocks" (default:
    $ROPECLI_MAP_KERNEL, else "auto"). `selection`: {layer: (heads, pairs) bool}, the pairs a selecting map (DPE with
    top < 1) moves, chosen on this model (`maps.pair_contributions`, `maps.pair_selection`); `observe(module, query,
    key, pair)`: each mapped layer's queries and keys (a rotation keeps each pair's norm) and the pair of each head
    column; `length`: the length the map is measured at, which decides once which sliding layers it maps (those whose
    window reaches it) and the key set a cache holds (default: the model's L)."""
    if bound.share < 1.0 and selection is None:
        raise RopeCliError(f"{bound.name}: {bound.record.selects} = {bound.share:g} moves the pairs chosen on the model by "
                           "their attention contribution: run it through ropecli's commands (they choose them), or pass "
                           "a selection")
    selection = selection if bound.share < 1.0 else None
    bound.regions(1)  # its parameters' own rules (DCA: local below chunk), before the model is touched
    _, cfg, _ = _layers(model, bound.name, length)
    kernel = kernel or os.environ.get("ROPECLI_MAP_KERNEL", "auto")
    if kernel not in ("auto", "flex", "blocks"):
        raise RopeCliError(f"ROPECLI_MAP_KERNEL={kernel}: choose auto, flex or blocks")
    pairs = None if selection is None else {layer: [torch.as_tensor(row).nonzero().flatten().tolist() for row in heads]
                                            for layer, heads in selection.items()}
    run = model_map_run(model, bound.record.regions, bound.values, int(length or trained_len(cfg.to_dict())), pairs)
    run.block, run.kernel, run.observe = block, kernel, observe
    body = decoder(model)
    real = body.forward
    names = list(inspect.signature(real).parameters)
    body.forward = lambda *args, **kwargs: map_forward(body, run, real, names, {**dict(zip(names, args)), **kwargs})
    body.ropecli_map_run = run  # what scoring asks of the map (`chunked_scoring.fixed_by_prompt`), without importing it
    try:
        yield model
    finally:
        body.__dict__.pop("forward", None)
        body.__dict__.pop("ropecli_map_run", None)
