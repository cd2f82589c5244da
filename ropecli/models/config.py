"""A model's RoPE geometry read from its config alone, without weights and without torch.

Sources: a local folder's `config.json`, a hub id's `config.json` (one small download through
huggingface_hub, cached), or a GGUF file's metadata (header only, parsed here: the `gguf` package's
reader decodes every tokenizer string and takes seconds). The rule for d, base and L is
`ropecli.models.model_geometry.config_geometry`, the one the model layer (`ropecli.backends.load`) applies to a
loaded model, tested to agree on LLaMA, Qwen2, GPT-NeoX (partial rotary) and Gemma 3 (RoPE per layer
type). Gemma 3 style configs keep one RoPE per layer type; ropecli scales `full_attention` by default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.models.gguf_families import gguf_layer_kinds, gguf_temperature, rotating_pairs, sliding_base
from ropecli.models.gguf_header import gguf_layout, gguf_metadata, gguf_parameters, gguf_rope_freqs, gguf_shipped  # noqa: F401 (re-exported)
from ropecli.models.layer_kinds import read_layer_kinds
from ropecli.models.model_geometry import DEFAULT_BASE, DEFAULT_GEOMETRY, config_geometry, resolve_factor
from ropecli.models.model_rope import ModelRope
from ropecli.models.packaged import resolve_model
from ropecli.models.rope_block import check_config_blocks
from ropecli.rope.geometry import Geometry
from ropecli.rope.shipped import read_shipped
from ropecli.rope.temperature import read_temperature

huggingface_hub = deferred("huggingface_hub")

ROPE_BLOCK_TYPES = ("main", "compress")  # DeepSeek V4's blocks, by what rotates (modeling_deepseek_v4.py, rope_layer_type)
BUILTIN = "builtin"
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "builtin_model"  # ropecli/builtin_model


def choose_layer_types(types: list[str], rope_layers: str | None) -> tuple[str, ...]:
    """`--rope-layers`, parsed once: the layer types to scale among a model's RoPE layer types.
    Default full_attention (all types if the model has none of that name); 'all'; or a comma list."""
    if not types:
        if rope_layers not in (None, "all"):
            raise RopeCliError(f"--rope-layers {rope_layers}: this model has one RoPE for all layers; leave the flag out")
        return ()
    if rope_layers in (None, ""):
        return next(((t,) for t in ("full_attention", "compress") if t in types), tuple(types))
    if rope_layers == "all":
        return tuple(types)
    wanted = tuple(dict.fromkeys(t.strip() for t in rope_layers.split(",")))
    unknown = set(wanted) - set(types)
    if unknown:
        raise RopeCliError(f"--rope-layers: unknown layer type {', '.join(sorted(unknown))}; this model has {', '.join(types)} (or 'all')")
    return wanted


def read_rope_config(name: str | None, gguf_file: str | None = None, rope_layers: str | None = None) -> ModelRope:
    """The RoPE geometry of `name` (hub id, folder, .gguf path or 'builtin'); `gguf_file` names a
    GGUF inside a folder or repo. `rope_layers` picks the layer type shown (default full_attention)."""
    name = name or BUILTIN
    path = BUILTIN_DIR if name == BUILTIN else Path(resolve_model(name))
    if gguf_file is None and path.suffix == ".gguf":
        if not path.is_file():
            raise RopeCliError(f"--model {name}: no such GGUF file")
        return _from_gguf(name, path, rope_layers)
    if gguf_file is not None:
        return _from_gguf(name, locate_file(name, path, gguf_file), rope_layers)
    return rope_from_config(name, read_config_json(name, path), rope_layers)


def read_config_json(name: str, path: Path) -> dict:
    """The config.json of a folder or hub repo, as a dict (its text_config where it nests one)."""
    cfg = _read_json(locate_file(name, path, "config.json"), name)
    return cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg


def locate_file(name: str, path: Path, filename: str) -> Path:
    """`filename` inside a local folder, else downloaded (or taken from the cache) from the hub repo `name`."""
    if path.is_dir():
        target = path / filename
        if not target.is_file():
            raise RopeCliError(f"--model {name}: the folder has no {filename}")
        return target
    if path.exists() or name.startswith((".", "/")) or name.count("/") > 1:
        raise RopeCliError(f"--model {name}: not a folder, a .gguf file or a hub id (owner/name); check the path")
    try:
        return Path(huggingface_hub.hf_hub_download(name, filename))
    except Exception as exc:  # network, auth, missing repo: one line
        if type(exc).__name__ == "LocalEntryNotFoundError" and os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
            raise RopeCliError(f"--model {name}: HF_HUB_OFFLINE is set and {filename} is not in the local cache; "
                               "unset HF_HUB_OFFLINE to download it, or pass a local folder") from None
        if type(exc).__name__ == "LocalEntryNotFoundError":  # huggingface_hub.errors: no network and no cached copy
            raise RopeCliError(f"--model {name}: the hub cannot be reached and {filename} is not in the local cache; "
                               "connect to the network (HF_TOKEN for a gated model) or pass a local folder") from None
        first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise RopeCliError(f"cannot read {filename} of '{name}': {first}; check the hub id, your network and HF_TOKEN "
                           "(offline: HF_HUB_OFFLINE=1 needs a cached copy)") from None


def _read_json(path: Path, name: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RopeCliError(f"cannot read the config of '{name}' ({path}): {exc}") from None


# --- transformers config.json ------------------------------------------------------------------

def rope_from_config(name: str, cfg: dict, rope_layers: str | None) -> ModelRope:
    """The one reading of a config.json's RoPE (a folder's, a hub repo's, a loaded model's `to_dict()`):
    `text_config` nesting; transformers-5 `rope_parameters` (one block, or one per layer type);
    transformers-4 `rope_theta` + `rope_scaling` (`type` or `rope_type`), Gemma 3's applying to its global
    (full_attention) layers only; d, base and L0 by `config_geometry`, the shipped schedule by `read_shipped`."""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    check_config_blocks(text)  # a hand-edited block no runtime would serve: one line naming the key (rope.rope_block)
    rp_all = text.get("rope_parameters") or {}
    per_type = {t: v for t, v in rp_all.items() if isinstance(v, dict)}
    scaling = text.get("rope_scaling") if isinstance(text.get("rope_scaling"), dict) else {}
    if per_type and text.get("layer_types") and not set(per_type) & {*text["layer_types"], *ROPE_BLOCK_TYPES}:
        raise RopeCliError(f"model '{name}': its rope blocks ({', '.join(sorted(per_type))}) name neither its layer types "
                           f"({', '.join(sorted(set(text['layer_types'])))}) nor DeepSeek V4's main / compress: not read by "
                           "ropecli yet")
    if per_type:  # transformers 5, Gemma 3 style: {"full_attention": {...}, "sliding_attention": {...}}
        bases = {t: float(v.get("rope_theta") or text.get("rope_theta") or DEFAULT_BASE) for t, v in sorted(per_type.items())}
    elif "rope_local_base_freq" in text:  # transformers 4 Gemma 3 config: rope_scaling scales the global layers
        bases = {"full_attention": float(text.get("rope_theta") or DEFAULT_BASE),
                 "sliding_attention": float(text["rope_local_base_freq"])}
        per_type = {"full_attention": dict(scaling), "sliding_attention": {}}
    else:
        bases = {}
    scaled = choose_layer_types(sorted(bases), rope_layers)
    layer_type = scaled[0] if scaled else None
    # transformers 4 configs: rope_theta at the top level, scaling in rope_scaling
    rp = dict(per_type.get(layer_type, {})) if layer_type else {**scaling, **rp_all}
    source = "rope_parameters" if rp_all and not scaling else "rope_scaling" if scaling else "rope_parameters"
    g = config_geometry(text, rp, layer_type)
    if g.rotary_dim is None:
        raise RopeCliError(f"model '{name}': its config gives neither head_dim nor hidden_size and num_attention_heads; pass --d")
    shipped = read_shipped(rp, max_len=g.max_len, original_len=text.get("original_max_position_embeddings"), source=source)
    L0 = shipped.original_len if shipped else g.train_len
    if not L0:
        raise RopeCliError(f"model '{name}' states no training length in its config; pass --train-len")
    return ModelRope(name, g.rotary_dim, bases[layer_type] if layer_type else g.base, int(L0), g.partial_rotary_factor,
                     bases, scaled, shipped, str(text.get("model_type") or cfg.get("model_type") or ""), read_layer_kinds(text),
                     g.rotating_pairs, read_temperature(text, rp))



# --- GGUF metadata (the header parser: ropecli.models.gguf_header) ------------------------------

GEMMA3_SLIDING_BASE = 10000.0  # llama.cpp and transformers fix the Gemma 3 sliding layers' base; GGUF does not store it


def _from_gguf(name: str, path: Path, rope_layers: str | None) -> ModelRope:
    meta = gguf_metadata(path)
    arch = meta.get("general.architecture")
    if not arch:
        raise RopeCliError(f"GGUF '{path}' names no general.architecture; is it a model file?")

    def get(key: str):
        return meta.get(f"{arch}.{key}")

    # the GGUF keys under the names of the one rule (llama.cpp's convert_hf_to_gguf.py writes them from those)
    g = config_geometry({"head_dim": get("attention.key_length"), "hidden_size": get("embedding_length"),
                         "num_attention_heads": get("attention.head_count"), "rotary_dim": get("rope.dimension_count"),
                         "rope_theta": get("rope.freq_base"), "max_position_embeddings": get("context_length"),
                         "original_max_position_embeddings": get("rope.scaling.original_context_length")})
    if g.head_dim is None:
        raise RopeCliError(f"GGUF '{path}' states neither attention.key_length nor embedding_length and head_count; pass --d")
    if not g.train_len:
        raise RopeCliError(f"GGUF '{path}' states no context length; pass --train-len")
    d, base = g.rotary_dim or g.head_dim, g.base
    swa = sliding_base(meta, arch) or (GEMMA3_SLIDING_BASE if arch.startswith("gemma3") else None)
    bases = {"full_attention": base, "sliding_attention": swa} if arch.startswith("gemma") and swa else {}
    scaled = choose_layer_types(sorted(bases), rope_layers)
    if scaled and scaled[0] == "sliding_attention" and get("rope.dimension_count_swa"):  # Gemma 4: its own head size
        d = int(get("rope.dimension_count_swa"))
    full = not scaled or scaled[0] == "full_attention"
    shipped = gguf_shipped(path, meta, arch, d) if full else None
    L0 = shipped.original_len if shipped else g.train_len
    rotating = rotating_pairs(gguf_rope_freqs(path, d)) if full else None
    return ModelRope(name, d, bases[scaled[0]] if scaled else base, L0, d / g.head_dim, bases, scaled, shipped,
                     "", gguf_layer_kinds(meta, arch), rotating, gguf_temperature(meta, arch))


# --- the geometry the analysis commands compute with --------------------------------------------

def geometry_from_flags(rotary_dim: int | None, base: float | None, train_len: int | None, k: float | None,
                        target_len: int | None, model: str | None = None, gguf_file: str | None = None,
                        rope_layers: str | None = None, fallback: dict | None = None):
    """(Geometry, ModelRope or None): d, base, L0 from `model`'s config where given, else from `fallback`
    (e.g. what an artefact states), else DEFAULT_GEOMETRY; an explicit flag overrides any of them. The
    geometry carries the model's shipped schedule (`native`, `native+METHOD`)."""
    rope = None
    fallback = {**DEFAULT_GEOMETRY, **{key: v for key, v in (fallback or {}).items() if v}}
    if model is not None or gguf_file is not None:
        rope = read_rope_config(model, gguf_file=gguf_file, rope_layers=rope_layers)
        rope = rope.overridden(train_len=train_len)
        fallback = {"rotary_dim": rope.rotary_dim, "base": rope.base, "train_len": rope.train_len}
    elif rope_layers is not None:
        raise RopeCliError("--rope-layers chooses among a model's RoPE layer types; pass --model too")
    d = fallback["rotary_dim"] if rotary_dim is None else rotary_dim
    b = fallback["base"] if base is None else base
    L = fallback["train_len"] if train_len is None else train_len
    if L <= 0:
        raise RopeCliError(f"training length L={L} must be positive; pass e.g. --train-len 4096")
    rotating = rope.rotating_pairs if rope and d == rope.rotary_dim else None
    return Geometry(d, b, L, resolve_factor(L, k, target_len), rope.shipped if rope else None, rotating,
                    rope.temperature if rope else None), rope
