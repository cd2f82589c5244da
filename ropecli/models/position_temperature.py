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
from ropecli.rope.temperature import HF_KEYS, Temperature


def _holders(model, temperature: Temperature) -> list[tuple[object, str, str]]:
    """(object, how to set it: 'attr' | 'key', its name) for every place the model reads a tunable parameter
    (`rope.temperature.HF_KEYS`: a text-config key is each attention module's attribute of the same name)."""
    names = [HF_KEYS[p] for p, _ in temperature.params if p in HF_KEYS]
    out, seen = [], set()
    for module in model.modules():
        for where, key in names:
            if where == "config" and hasattr(module, "attn_temperature_tuning") and hasattr(module, key):
                out.append((module, "attr", key))
            rp = getattr(getattr(module, "config", None), "rope_parameters", None)
            if where == "rope_parameters" and isinstance(rp, dict) and key in rp and (id(rp), key) not in seen:
                seen.add((id(rp), key))
                out.append((rp, "key", key))
    return out


@contextmanager
def position_temperature(model, temperature: Temperature):
    """The model at `temperature` (its own kind, some parameters changed) inside the block."""
    holders = _holders(model, temperature)
    if not holders:
        raise RopeCliError(f"ropecli found no attention module that reads the position temperature {temperature.label} "
                           "in this model; drop the temperature parameters")
    by_name = {HF_KEYS[p][1]: v for p, v in temperature.params if p in HF_KEYS}
    saved = [(h, how, name, getattr(h, name) if how == "attr" else h[name]) for h, how, name in holders]
    try:
        for h, how, name in holders:
            setattr(h, name, by_name[name]) if how == "attr" else h.__setitem__(name, by_name[name])
        yield
    finally:
        for h, how, name, old in saved:
            setattr(h, name, old) if how == "attr" else h.__setitem__(name, old)
