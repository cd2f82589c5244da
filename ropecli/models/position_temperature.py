"""A model's position temperature changed for a block of windows (a schedule's `temperature`), restored after. Torch.

Where each family keeps it (transformers 5.24), which is what its forward pass reads every call:
- llama4:   each Llama4TextAttention's `attn_scale` and `floor_scale` attributes, copied from the config at __init__
            (modeling_llama4.py, Llama4TextAttention.forward: applied where `attn_temperature_tuning and not use_rope`);
- mistral4: `config.rope_parameters["llama_4_scaling_beta"]`, read by Mistral4Attention.forward on every call
            (modeling_mistral4.py, get_llama_4_attn_scale).
"""

from __future__ import annotations

from contextlib import contextmanager

from ropecli.errors import RopeCliError
from ropecli.rope.temperature import Temperature

_ATTRIBUTES = {"llama4": {"attn_scale": "attn_scale", "floor_scale": "floor_scale"}}
_ROPE_KEYS = {"mistral4": {"beta": "llama_4_scaling_beta"}}


def _holders(model, temperature: Temperature) -> list[tuple[object, str, str]]:
    """(object, how to set it: 'attr' | 'key', its name) for every place the model reads a tunable parameter."""
    out = []
    if temperature.kind in _ATTRIBUTES:
        names = _ATTRIBUTES[temperature.kind]
        for module in model.modules():
            if hasattr(module, "attn_temperature_tuning") and all(hasattr(module, a) for a in names.values()):
                out += [(module, "attr", names[p]) for p, _ in temperature.params if p in names]
    else:
        names, seen = _ROPE_KEYS[temperature.kind], set()
        for module in model.modules():
            rp = getattr(getattr(module, "config", None), "rope_parameters", None)
            if isinstance(rp, dict) and id(rp) not in seen and names["beta"] in rp:
                seen.add(id(rp))
                out += [(rp, "key", names[p]) for p, _ in temperature.params if p in names]
    return out


@contextmanager
def position_temperature(model, temperature: Temperature):
    """The model at `temperature` (its own kind, some parameters changed) inside the block."""
    holders = _holders(model, temperature)
    if not holders:
        raise RopeCliError(f"ropecli found no attention module that reads the position temperature {temperature.label} "
                           "in this model; drop the temperature parameters")
    values = dict(temperature.params)
    tunable = {**_ATTRIBUTES.get(temperature.kind, {}), **_ROPE_KEYS.get(temperature.kind, {})}
    by_name = {name: values[p] for p, name in tunable.items()}
    saved = [(h, how, name, getattr(h, name) if how == "attr" else h[name]) for h, how, name in holders]
    try:
        for h, how, name in holders:
            setattr(h, name, by_name[name]) if how == "attr" else h.__setitem__(name, by_name[name])
        yield
    finally:
        for h, how, name, old in saved:
            setattr(h, name, old) if how == "attr" else h.__setitem__(name, old)
