"""Load a causal LM (hub id, local folder, or GGUF file) as a `TransformersBackend`, with its RoPE
geometry read from the loaded config (the same rules as `ropecli.models.config`)."""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
from dataclasses import replace
from pathlib import Path

from ropecli.backends.backend import TransformersBackend
from ropecli.deferred import deferred, installed
from ropecli.errors import RopeCliError
from ropecli.models.banded_attention import banded_model
from ropecli.models.config import (
    BUILTIN,
    BUILTIN_DIR,
    _from_gguf,
    choose_layer_types,
    read_config_json,
    rope_from_config,
)
from ropecli.models.packaged import resolve_model
from ropecli.models.patch import find_rotary_slots, layer_types_of, select_slots, text_config
from ropecli.models.rope_block import check_config_blocks

transformers = deferred("transformers")
modeling_auto = deferred("transformers.models.auto.modeling_auto")
torch = deferred("torch")


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    table = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
             "fp16": torch.float16, "float16": torch.float16}
    if dtype == "auto":
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in table:
        raise RopeCliError(f"--dtype {dtype} is not one of auto, bf16, fp16, fp32")
    return table[dtype]


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RopeCliError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise RopeCliError(f"--device {device} is not one of auto, cpu, cuda, cuda:N")
    return device


def check_latent_heads(config: dict, name: str) -> None:
    """Multi-head latent attention (MLA: DeepSeek V3, Kimi K2, Mistral 4; a `kv_lora_rank` in the config) with fewer
    key-value heads than heads: transformers' attention (modeling_deepseek_v3.py, `DeepseekV3Attention.forward`)
    fails on every forward of such a config ("The size of tensor a (4) must match the size of tensor b (8)", 5.24,
    sdpa and eager alike), so it is refused in one line before any weight is read. MLA has no grouped key-value heads:
    real checkpoints state as many as heads."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    heads, kv = text.get("num_attention_heads"), text.get("num_key_value_heads")
    if text.get("kv_lora_rank") and isinstance(heads, int) and isinstance(kv, int) and kv < heads:
        raise RopeCliError(f"--model {name}: multi-head latent attention with num_key_value_heads {kv} < "
                           f"num_attention_heads {heads}, which transformers' MLA attention cannot run (every forward "
                           f"fails); MLA has no grouped key-value heads: set num_key_value_heads to {heads} in its "
                           "config.json, as DeepSeek's and Mistral's checkpoints ship it")


def load_model(name: str | None, *, gguf_file: str | None = None, dtype: str = "auto", device: str = "auto",
               device_map: str | None = None, attn_implementation: str | None = None, trust_remote_code: bool = False,
               rotary_dim: int | None = None, base: float | None = None, train_len: int | None = None,
               rope_layers: str | None = None, gpu_group: list[int] | None = None) -> TransformersBackend:
    """Load `name` and read its RoPE geometry. `gpu_group` (torchrun with --device-map auto): the only
    GPUs this process may spread the model over."""
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    name = name or BUILTIN
    source = str(BUILTIN_DIR) if name == BUILTIN else resolve_model(name)  # a packaged short name: its file
    if name == BUILTIN and not (BUILTIN_DIR / "config.json").exists():
        raise RopeCliError(f"the built-in model is missing from {BUILTIN_DIR}; reinstall ropecli or pass --model")
    path = Path(source)
    if gguf_file is None and path.suffix == ".gguf":
        if not path.is_file():
            raise RopeCliError(f"--model {name}: no such GGUF file")
        source, gguf_file = str(path.parent), path.name
    if gguf_file is not None:
        if not installed("gguf"):
            raise RopeCliError("GGUF files need the 'gguf' package; pip install 'ropecli[gguf]'") from None
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    kwargs = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if device_map:
        if not installed("accelerate"):
            raise RopeCliError("--device-map needs the 'accelerate' package; pip install accelerate") from None
        kwargs["device_map"] = device_map
        if gpu_group:  # accelerate places layers only on the devices max_memory names
            kwargs["max_memory"] = {i: torch.cuda.get_device_properties(i).total_memory for i in gpu_group}
    local = path.exists() or name == BUILTIN
    if not gguf_file and name != BUILTIN:  # a hand-edited rope block is refused before any weight is read
        config = read_config_json(name, path)
        check_config_blocks(config)
        check_latent_heads(config, name)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **({"gguf_file": gguf_file} if gguf_file else {}),
                                                  trust_remote_code=trust_remote_code)
        model = causal_lm_from_pretrained(source, kwargs)
    except OSError as exc:
        hint = "check the path" if local else "check the hub id, your network and HF_TOKEN (offline: HF_HUB_OFFLINE=1 needs a cached copy)"
        raise RopeCliError(f"cannot load model '{name}': {str(exc).splitlines()[0]}; {hint}") from None
    except ValueError as exc:
        msg = str(exc).splitlines()[0]
        if "trust_remote_code" in msg:
            raise RopeCliError(f"model '{name}' needs custom code; rerun with --trust-remote-code if you trust it") from None
        raise RopeCliError(f"cannot load model '{name}': {msg}") from None
    if not device_map:
        model.to(dev)
    model.eval()
    release_freed_memory(collect=bool(gguf_file))  # GGUF dequantization leaves GBs of freed-but-held heap behind
    slots = find_rotary_slots(model)
    types = layer_types_of(slots)
    scaled = choose_layer_types(types, rope_layers)
    chosen = select_slots(slots, scaled)
    d = chosen[0].rotary_dim
    if rotary_dim is not None and rotary_dim != d:
        raise RopeCliError(f"--d {rotary_dim} disagrees with the model's rotary dim {d} (inv_freq has {d // 2} entries); leave --d out")
    if base is not None:
        for s in chosen:
            s.base = base
    # the one reading of a config (read_rope_config applies it to config.json); d and the bases from the rotary modules
    read = rope_from_config(name, text_config(model).to_dict(), ",".join(scaled) if scaled else None)
    native_patched = False  # True: the loaded modules do not carry the shipped schedule; `native` writes it
    if gguf_file:  # the GGUF's own keys and rope_freqs: what transformers' GGUF loader may have dropped

        in_gguf = _from_gguf(name, Path(source) / gguf_file, ",".join(scaled) if scaled else None)
        native_patched = in_gguf.shipped is not None and read.shipped is None
        read = replace(read, shipped=in_gguf.shipped, train_len=in_gguf.train_len if in_gguf.shipped else read.train_len)
    bases = {s.layer_type: s.base for s in slots if s.layer_type}
    rope = replace(read, rotary_dim=d, base=chosen[0].base, layer_bases=bases, scaled_types=scaled)
    rope = rope.overridden(train_len=train_len)
    fp, earlier = fingerprint(model)
    banded_model(model)  # after the fingerprint (it reads the config): sliding layers over their band of keys
    return TransformersBackend(model, tokenizer, rope, chosen, str(torch_dtype).replace("torch.", ""),
                               str(next(model.parameters()).device), fp, earlier_fingerprints=earlier,
                               native_patched=native_patched)


def causal_lm_from_pretrained(source: str, kwargs: dict):
    """AutoModelForCausalLM, else the causal-LM class the config's `architectures` names (Mistral 4: transformers has
    `Mistral4ForCausalLM` but no auto-mapping entry for its config)."""
    def named() -> list:  # the causal-LM classes the config's `architectures` names (the config read once, when asked)
        cfg = transformers.AutoConfig.from_pretrained(source, **{k: v for k, v in kwargs.items() if k in ("gguf_file", "trust_remote_code")})
        return [getattr(transformers, a) for a in (cfg.architectures or []) if a.endswith("ForCausalLM") and hasattr(transformers, a)]

    taken = [c for c in getattr(modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING, "_extra_content", {}).values()
             if str(getattr(c, "__module__", "")).startswith("transformers_modules")]
    if taken and not kwargs.get("trust_remote_code") and (own := named()) and \
            transformers.AutoConfig.from_pretrained(source, **{k: v for k, v in kwargs.items() if k == "gguf_file"}).__class__ in \
            {k for k, c in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING._extra_content.items() if c in taken}:
        # a folder's remote class, registered for this config class by an earlier trust_remote_code load in this process
        # (transformers' auto mapping is process-wide: a Mistral 4 map folder's class would load a plain Mistral 4 here)
        return own[0].from_pretrained(source, **kwargs)
    try:
        return transformers.AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except ValueError as exc:
        if "Unrecognized configuration class" not in str(exc) or not (own := named()):
            raise
        return own[0].from_pretrained(source, **kwargs)


def fingerprint(model, transformers_version: str | None = None) -> tuple[str, tuple[str, ...]]:
    """(fingerprint, the fingerprints earlier ropecli versions computed for the same weights): sha256 over the
    config and a strided sample of every parameter (values, shapes, dtypes).

    Cheap at any size (<= 4096 values per tensor) yet different for different weights. Where the model was
    loaded from (`_name_or_path`) is left out, so the same file under another path finds its cached evaluations,
    and so is the transformers version the config records (`transformers_version`): a cache outlives an upgrade.
    Earlier fingerprints, found by the evaluator's migrations (`ropecli.evaluation.cache_migrations.rekeyed`): the
    one with the version in it (`transformers_version`: which one; default the installed), and ropecli 0.x's
    (the whole config JSON, the path with it)."""
    cfg = model.config.to_dict()
    cfg.pop("_name_or_path", None)
    version = cfg.pop("transformers_version", None)
    hashes = [hashlib.sha256(json.dumps(c, sort_keys=True, default=str).encode()) for c in
              (cfg, {**cfg, **({"transformers_version": transformers_version or version} if version else {})})]
    hashes.append(hashlib.sha256(model.config.to_json_string(use_diff=False).encode()))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            step = max(1, flat.numel() // 4096)
            sample = flat[::step][:4096].to("cpu", torch.float64)
            for x in hashes:
                x.update(f"{pname}{tuple(p.shape)}{p.dtype}".encode())
                x.update(sample.numpy().tobytes())
    new, versioned, oldest = (h.hexdigest()[:16] for h in hashes)
    return new, (versioned, oldest)


def release_freed_memory(collect: bool = True) -> None:
    """Return freed heap pages to the OS (glibc only; a no-op elsewhere); `collect` first frees what only the cycle
    collector can (a full collection: ~1 s in a process holding many models' objects, so only after a GGUF load)."""
    if collect:
        gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
