"""A model's RoPE geometry read from its config alone, without weights and without torch.

Sources: a local folder's `config.json`, a hub id's `config.json` (one small download through
huggingface_hub, cached), or a GGUF file's metadata (header only, parsed here: the `gguf` package's
reader decodes every tokenizer string and takes seconds). The rule for d, base and L is
`ropecli.models.geometry.config_geometry`, the one the model layer (`ropecli.models.load`) applies to a
loaded model, tested to agree on LLaMA, Qwen2, GPT-NeoX (partial rotary) and Gemma 3 (RoPE per layer
type). Gemma 3 style configs keep one RoPE per layer type; ropecli scales `full_attention` by default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.models.gguf_families import gguf_layer_kinds, gguf_temperature, rotating_pairs, sliding_base
from ropecli.models.gguf_header import gguf_layout, gguf_metadata, gguf_parameters, gguf_rope_freqs, gguf_shipped  # noqa: F401 (re-exported)
from ropecli.models.geometry import DEFAULT_BASE, DEFAULT_GEOMETRY, config_geometry, resolve_factor
from ropecli.rope.geometry import Geometry
from ropecli.models.layer_kinds import LayerKinds, read_layer_kinds
from ropecli.models.rope_block import check_config_blocks
from ropecli.rope.shipped import Shipped, read_shipped
from ropecli.rope.temperature import Temperature, read_temperature

ROPE_BLOCK_TYPES = ("main", "compress")  # DeepSeek V4's blocks, by what rotates (modeling_deepseek_v4.py, rope_layer_type)
BUILTIN = "builtin"
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "builtin_model"  # ropecli/builtin_model


@dataclass(frozen=True)
class ModelRope:
    """A model's RoPE geometry, the one record of it: read from a config (`read_rope_config`, no
    weights) or from a loaded model (`ropecli.models.load`); export and evaluation both take it."""
    name: str  # what the user passed
    rotary_dim: int  # d
    base: float  # of the (first) scaled layer type
    train_len: int  # L
    partial_rotary_factor: float = 1.0  # d / head_dim
    layer_bases: dict[str, float] = field(default_factory=dict)  # RoPE base per layer type; {} with one RoPE
    scaled_types: tuple[str, ...] = ()  # the layer types ropecli scales (--rope-layers); () with one RoPE
    shipped: Shipped | None = None  # the schedule the model ships on the (first) scaled layer type; None: plain RoPE
    model_type: str = ""  # the config's model_type (llama, qwen2, phi3 …): what a runtime's loader does depends on it
    layers: LayerKinds | None = None  # NoPE, chunked, sliding, linear-attention layers (None: one RoPE on every layer)
    rotating_pairs: int | None = None  # p-RoPE (Gemma 4 'proportional'): pairs past it at frequency 0; None: all rotate
    temperature: Temperature | None = None  # a position temperature the model ships (Llama 4, Mistral 4); None: none
    # train_len is L0, the length the shipped schedule was built from (the training length of a plain model)

    @property
    def shipped_len(self) -> int:
        """Ls: the length the model is shipped for (L0 for a model that ships plain RoPE)."""
        return self.shipped.shipped_len if self.shipped else self.train_len

    @property
    def layer_type(self) -> str | None:
        """The layer type whose geometry this is (the first scaled one); None with one RoPE."""
        return self.scaled_types[0] if self.scaled_types else None

    @property
    def layer_types(self) -> list[str]:
        """Every RoPE layer type of the model ([] with one RoPE)."""
        return sorted(self.layer_bases)

    @property
    def scaled_bases(self) -> dict[str | None, float]:
        """Base of each scaled layer type ({None: base} for a model with one RoPE)."""
        return {t: self.layer_bases[t] for t in self.scaled_types} if self.scaled_types else {None: self.base}

    def geometry(self, factor: float, base: float | None = None) -> Geometry:
        """The geometry of L0 at factor k (k = N / L0), carrying the shipped schedule; `base`: a layer type's."""
        return Geometry(self.rotary_dim, self.base if base is None else base, self.train_len, factor, self.shipped,
                        self.rotating_pairs, self.temperature)

    def overridden(self, rotary_dim: int | None = None, base: float | None = None, train_len: int | None = None) -> "ModelRope":
        """Explicit flags win over the config: --base replaces the base of every scaled layer type."""
        bases = {t: (base if base is not None and t in self.scaled_types else b) for t, b in self.layer_bases.items()}
        shipped = self.shipped
        if shipped is not None and train_len and train_len != self.train_len:  # --train-len names L0
            shipped = replace(shipped, original_len=train_len, shipped_len=max(shipped.shipped_len, train_len))
        return replace(self, rotary_dim=rotary_dim or self.rotary_dim, base=self.base if base is None else base,
                       train_len=train_len or self.train_len, layer_bases=bases, shipped=shipped)

    def describe_shipped(self) -> str:
        """What the model ships, in one phrase: `ships llama3(factor=8, …) from L0=8192 for Ls=131072 (…)`."""
        if self.shipped is None:
            return f"ships plain RoPE (native = none) from L0=Ls={self.train_len}"
        return self.shipped.describe()

    def describe(self, runs: str = "") -> str:
        """`NAME: rotary dim d=…, base=…, L0=…, Ls=…[, RUNS][, layer types]; ships …` (RUNS: dtype and device)."""
        types = ""
        if self.layer_bases:
            others = ", ".join(f"{t} base {b:g}" for t, b in self.layer_bases.items() if t != self.layer_type)
            types = f", layer type {self.layer_type}" + (f" (also {others})" if others else "")
        layers = f"; layers: {self.layers.summary()} ({'; '.join(self.layers.extension_notes())})" if self.layers else ""
        if self.rotating_pairs is not None:
            layers += (f"; p-RoPE: pairs 1-{self.rotating_pairs} rotate, pairs {self.rotating_pairs + 1}-{self.rotary_dim // 2} "
                       "sit at frequency 0 (no schedule moves them)")
        if self.temperature is not None:
            layers += f"; position temperature {self.temperature.describe(self.lengths)} (the model applies it; kept in exports)"
        return (f"{self.name}: rotary dim d={self.rotary_dim}, base={self.base:g}, training length L0={self.train_len}, "
                f"shipped length Ls={self.shipped_len}{', ' + runs if runs else ''}{types}; {self.describe_shipped()}{layers}")

    def to_json(self) -> dict[str, Any]:
        """The model's RoPE for --json headers: d, base, L0, Ls and what it ships."""
        return {"rotary_dim": self.rotary_dim, "base": self.base, "L0": self.train_len, "Ls": self.shipped_len,
                "shipped": self.shipped.to_json() if self.shipped else None,
                "layer_types": self.layer_types, "scaled_types": list(self.scaled_types),
                "layers": self.layers.to_json() if self.layers else None, "rotating_pairs": self.rotating_pairs,
                "temperature": self.temperature.to_json(self.lengths) if self.temperature else None}

    def extension_notes(self) -> list[str]:
        """What extending this architecture can and cannot change, one sentence each (advise's notes): its layer kinds,
        p-RoPE's fixed pairs, the position temperature that every candidate keeps as shipped."""
        notes = [f"this model's layers: {self.layers.summary()}: {n}" for n in self.layers.extension_notes()] if self.layers else []
        if self.rotating_pairs is not None:
            notes.append(f"p-RoPE: only pairs 1-{self.rotating_pairs} of {self.rotary_dim // 2} rotate; every candidate scales "
                         "those and leaves the rest at frequency 0")
        if self.temperature is not None:
            notes.append(f"position temperature {self.temperature.label} on {self.temperature.layers}: every candidate keeps "
                         "it as shipped (ropecli changes frequencies, not the model's query scale)")
        return notes

    @property
    def lengths(self) -> dict[str, int]:
        """{'L0': …, 'Ls': …} (one entry where they agree): where headers show a position temperature."""
        return {"L0": self.train_len} if self.shipped_len == self.train_len else {"L0": self.train_len, "Ls": self.shipped_len}


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
    from ropecli.models.packaged import resolve_model

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
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(name, filename))
    except Exception as exc:  # network, auth, missing repo: one line
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
