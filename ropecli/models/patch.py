"""Apply a ropecli schedule to a loaded transformers model in place, and restore it exactly.

transformers keeps RoPE in rotary modules: an `inv_freq` buffer and an `attention_scaling` float
(Gemma 3: `{layer_type}_inv_freq` / `{layer_type}_attention_scaling` per layer type). Patching
writes theta_m / Lambda_m (computed in float64, stored in the buffer's dtype) and the schedule's
attention factor, and sets the slot's rope_type to "default" so transformers' dynamic/longrope
updates cannot overwrite it. `restore` puts back the saved tensors and values bit for bit.

`--log-n` (Su, "Transformer Upgrade Road 11"): each query at position n (counted from 1) is multiplied by max(1, log_L n).
It is a forward hook on the query projection (after q_norm where a model has one, since a norm
would undo it), so it scales q only, per position. It assumes positions 0..T-1, which is what
ropecli's evaluation feeds (one window per forward, no cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError

torch = deferred("torch")


@dataclass
class RotarySlot:
    module: torch.nn.Module
    layer_type: str | None  # Gemma 3 style per-layer-type slot, else None
    base: float
    saved: dict[str, Any] = field(default_factory=dict)
    rotating: int | None = None  # p-RoPE: the pairs that rotate as loaded (the rest at frequency 0); None: all

    @property
    def prefix(self) -> str:
        return f"{self.layer_type}_" if self.layer_type else ""

    @property
    def inv_freq(self) -> torch.Tensor:
        return getattr(self.module, self.prefix + "inv_freq")

    @property
    def rotary_dim(self) -> int:
        return 2 * self.inv_freq.numel()


def text_config(model):
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def rope_parameters(cfg, layer_type: str | None) -> dict:
    rp = getattr(cfg, "rope_parameters", None) or {}
    if layer_type is not None and isinstance(rp.get(layer_type), dict):
        rp = rp[layer_type]
    return dict(rp)


def find_rotary_slots(model) -> list[RotarySlot]:
    cfg = text_config(model)
    slots = []
    for mod in model.modules():
        if isinstance(getattr(mod, "inv_freq", None), torch.Tensor):
            slots.append(RotarySlot(mod, None, _base(cfg, None, mod.inv_freq), rotating=_rotating(mod.inv_freq)))
        for lt in sorted(set(getattr(mod, "layer_types", None) or [])):
            buf = getattr(mod, f"{lt}_inv_freq", None)
            if isinstance(buf, torch.Tensor):
                slots.append(RotarySlot(mod, lt, _base(cfg, lt, buf), rotating=_rotating(buf)))
    if not slots:
        raise RopeCliError(f"{type(model).__name__} has no rotary position embedding (no inv_freq buffer); "
                           "ropecli works with RoPE models such as LLaMA, Mistral, Qwen, Gemma, GPT-NeoX")
    return slots


def _base(cfg, layer_type, inv_freq: torch.Tensor) -> float:
    rp = rope_parameters(cfg, layer_type)
    base = rp.get("rope_theta") or getattr(cfg, "rope_theta", None)
    if base is None:  # infer from the buffer: theta_2 = base^(-2/d)
        d = 2 * inv_freq.numel()
        base = float(inv_freq[1].double() ** (-d / 2.0))
    return float(base)


def layer_types_of(slots: list[RotarySlot]) -> list[str]:
    return sorted({s.layer_type for s in slots if s.layer_type})


def select_slots(slots: list[RotarySlot], scaled_types: tuple[str, ...]) -> list[RotarySlot]:
    """The slots of the chosen layer types (`config.choose_layer_types`); every slot for a model with one RoPE."""
    return [s for s in slots if s.layer_type in scaled_types] if scaled_types else slots


def _rotating(inv_freq: torch.Tensor) -> int | None:
    """The pairs that rotate where a buffer ends in zeros (p-RoPE), else None."""
    n = int((inv_freq != 0).sum())
    return n if 0 < n < inv_freq.numel() else None


def original_inv_freq(slot: RotarySlot) -> np.ndarray:
    """Unscaled theta_m = base^(-2(m-1)/d) for this slot, float64; 0 past p-RoPE's rotating pairs."""
    d = slot.rotary_dim
    theta = 1.0 / slot.base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    theta[slot.rotating or theta.size:] = 0.0
    return theta


def apply_schedule(slot: RotarySlot, factors: np.ndarray, attention_factor: float) -> None:
    if factors.shape != (slot.rotary_dim // 2,):
        raise RopeCliError(f"schedule has {factors.size} factors but the model's rotary dim is {slot.rotary_dim} ({slot.rotary_dim // 2} pairs)")
    m, p = slot.module, slot.prefix
    if not slot.saved:
        slot.saved = {
            "inv_freq": getattr(m, p + "inv_freq").detach().clone(),
            "attention_scaling": getattr(m, p + "attention_scaling", 1.0),
            "rope_type": _get_rope_type(m, slot.layer_type),
        }
    buf = getattr(m, p + "inv_freq")
    new = torch.from_numpy(original_inv_freq(slot) / factors).to(device=buf.device, dtype=buf.dtype)
    _write(m, p + "inv_freq", new)
    orig = getattr(m, p + "original_inv_freq", None)
    if isinstance(orig, torch.Tensor) and "original_inv_freq" not in slot.saved:
        slot.saved["original_inv_freq"] = orig.detach().clone()
    setattr(m, p + "attention_scaling", float(attention_factor))
    _set_rope_type(m, slot.layer_type, "default")


def restore(slot: RotarySlot) -> None:
    if not slot.saved:
        return
    m, p = slot.module, slot.prefix
    _write(m, p + "inv_freq", slot.saved["inv_freq"])
    if "original_inv_freq" in slot.saved:
        _write(m, p + "original_inv_freq", slot.saved["original_inv_freq"])
    setattr(m, p + "attention_scaling", slot.saved["attention_scaling"])
    _set_rope_type(m, slot.layer_type, slot.saved["rope_type"])
    slot.saved = {}


def _write(module, name: str, value: torch.Tensor) -> None:
    """Write `value` into the buffer `name` in place (its address kept: CUDA graphs replay from it), or replace it
    where it is an inference tensor (transformers' dynamic NTK re-registers inv_freq inside inference mode)."""
    buf = getattr(module, name)
    if buf.is_inference() and not torch.is_inference_mode_enabled():
        module.register_buffer(name, value.detach().clone().to(device=buf.device, dtype=buf.dtype), persistent=False)
    else:
        buf.copy_(value)


def _get_rope_type(m, layer_type):
    rt = getattr(m, "rope_type", None)
    return rt.get(layer_type) if isinstance(rt, dict) and layer_type else rt


def _set_rope_type(m, layer_type, value):
    if value is None or not hasattr(m, "rope_type"):
        return
    if isinstance(m.rope_type, dict) and layer_type:
        m.rope_type[layer_type] = value
    else:
        m.rope_type = value


# --- log-n query scaling ------------------------------------------------------------------------

def log_n_scale(length: int, train_len: int, device=None, dtype=None) -> torch.Tensor:
    """max(1, log_L n) for n = 1..length, shape (length,), float32 unless `dtype`."""
    dtype = torch.float32 if dtype is None else dtype
    n = torch.arange(1, length + 1, dtype=torch.float64)
    return torch.clamp(torch.log(n) / math.log(train_len), min=1.0).to(device=device, dtype=dtype)


def add_log_n_hooks(model, train_len: int, layer_types: list[str] | None) -> list:
    """Hooks that scale queries per position; returns handles (call .remove() on each)."""
    cfg = text_config(model)
    all_types = getattr(cfg, "layer_types", None)
    handles = []
    for mod in model.modules():
        idx = getattr(mod, "layer_idx", None)
        if idx is None:
            continue
        if layer_types and all_types and all_types[idx] not in layer_types:
            continue
        target, fused_heads = None, None
        for name in ("q_norm", "q_layernorm"):
            if isinstance(getattr(mod, name, None), torch.nn.Module):
                target = getattr(mod, name)
                break
        if target is None and isinstance(getattr(mod, "q_proj", None), torch.nn.Module):
            target = mod.q_proj
        if target is None and isinstance(getattr(mod, "query_key_value", None), torch.nn.Module):
            target, fused_heads = mod.query_key_value, getattr(mod, "head_size", None)
        if target is None:
            continue
        n_heads = getattr(cfg, "num_attention_heads", None)
        handles.append(target.register_forward_hook(_make_hook(train_len, fused_heads, n_heads)))
    if not handles:
        raise RopeCliError(f"--log-n: found no query projection in {type(model).__name__}; this architecture is not supported with --log-n")
    return handles


def _make_hook(train_len: int, fused_head_size: int | None, n_heads: int | None):
    def hook(_module, _inputs, out):
        # time axis: q_proj / query_key_value give (B, T, …); q_norm gives (B, T, H, hd), or (B, H, T, hd)
        # where the model normalizes after the transpose (Gemma 3, Qwen 3)
        axis = 2 if out.dim() == 4 and out.shape[1] == n_heads and fused_head_size is None else 1
        T = out.shape[axis]
        s = log_n_scale(T, train_len, out.device, out.dtype)
        if fused_head_size is None:
            shape = [1] * out.dim()
            shape[axis] = T
            return out * s.view(shape)
        B = out.shape[0]
        qkv = out.view(B, T, -1, 3 * fused_head_size).clone()
        qkv[..., :fused_head_size] *= s.view(1, T, 1, 1)
        return qkv.view_as(out)

    return hook
