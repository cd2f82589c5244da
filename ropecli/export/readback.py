"""What a runtime will apply, read back from an exported artefact (for `ropecli verify`).

For each scaled layer type: the per-pair factors Lambda_m (the runtime's inv_freq = base^(-2i/d) / Lambda),
the cos/sin multiplier (attention factor), the base, and the lengths the artefact states, at the
length it will serve. Each runtime by its own rules:
- transformers: its own code, `ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=T, layer_type=…)` in
  transformers/modeling_rope_utils.py (the oracle: longrope picks long_factor when T > original L).
- vLLM: numpy twins of its rotary classes (`ropecli.export.runtimes.vllm`): `ntk` (NTKScalingRotaryEmbedding),
  `longrope` (Phi3LongRoPEScaledRotaryEmbedding: long_factor and long_mscale for every request once
  --max-model-len > original_max_position_embeddings), `dynamic` (DynamicNTKScalingRotaryEmbedding).
- llama.cpp: `rope_freqs.weight` divides each pair's angle at every length (ggml-cpu/ops.cpp,
  `ggml_rope_cache_init`: theta/freq_factors[i0/2]); cos and sin are multiplied by
  `{arch}.rope.scaling.attn_factor` (src/llama-model.cpp `load_hparams` reads it into
  hparams.rope_attn_factor; src/llama-context.cpp multiplies cparams.yarn_attn_factor, 1 unless set,
  by it; ggml `rope_yarn` scales cos/sin by it when ext_factor = 0, i.e. scaling type none or linear);
  a scaling type `linear` with `rope.scaling.factor` f divides every angle by f on top
  (rope_freq_scale = 1/f). context_length is n_ctx_train, original_context_length n_ctx_orig_yarn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.models.model_geometry import config_geometry
from ropecli.models.config import gguf_metadata
from ropecli.models.gguf_rope import GGUF_ROPE_FREQS_ARCHS, llamacpp_yarn


def layer_config(text, layer_type: str | None):
    """The config a rotary module builds a layer type's frequencies from: Gemma 4 resolves one per layer type
    (`config.per_layer_config[layer_type]`: its global layers' own head_dim), other models use the config itself."""
    try:
        return text.per_layer_config[layer_type] if layer_type is not None and hasattr(text, "per_layer_config") else text
    except (KeyError, TypeError, ValueError):
        return text


CONSISTENT = " (short = long: no switch)"  # a longrope block whose switch length changes nothing


@dataclass
class Applied:
    """What one runtime applies to one layer type at `at_len` tokens."""
    runtime: str  # transformers | vllm | llama.cpp
    layer_type: str | None
    factors: np.ndarray | None  # (d/2,) Lambda_m; None: this rope type is not reconstructed
    attention_factor: float
    rope_theta: float
    train_len: int | None  # the L the artefact states (original_max_position_embeddings / original_context_length)
    max_len: int | None  # the length it declares (max_position_embeddings / context_length)
    at_len: int
    how: str  # e.g. "longrope long_factor", "rope_freqs", "ntk mixed_b=0.625"


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RopeCliError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise RopeCliError(f"{path} holds a JSON {type(data).__name__}, not the object `ropecli export` writes; "
                           "pass what it wrote, or export again")
    return data


try:  # transformers 5's configs validate their fields (huggingface_hub's strict dataclasses): a bad value raises this
    from huggingface_hub.errors import StrictDataclassError
except ImportError:  # an older huggingface_hub: the field errors are ValueErrors
    StrictDataclassError = ValueError
# a hand-edited or truncated artefact
UNREADABLE = (KeyError, ValueError, TypeError, OverflowError, IndexError, AttributeError, StrictDataclassError)


def unreadable(path: Path, exc: Exception) -> RopeCliError:
    """The one line for an artefact whose contents ropecli (or the runtime's own code) cannot read back."""
    first = (str(exc).splitlines() or [exc.__class__.__name__])[0].strip("'\"")[:160]
    return RopeCliError(f"{path}: its contents cannot be read back ({first}); pass the artefact as `ropecli export` "
                        "wrote it, or export again")


def rope_blocks(rp: dict) -> dict[str | None, dict]:
    """{layer type or None: rope parameters}; a per-type dict's unchanged entries are kept (they are skipped later)."""
    if "rope_type" in rp or "type" in rp:
        return {None: rp}
    return {t: v for t, v in rp.items() if isinstance(v, dict)}


# --- transformers ------------------------------------------------------------------------------

def transformers_applied(config: dict, at_len: int, scaled: tuple[str, ...], head_dim: int | None = None) -> list[Applied]:
    """A config.json (or a `{"rope_parameters", "max_position_embeddings"}` block with `head_dim`)
    through transformers' own RoPE functions at `at_len`."""
    import torch
    from transformers import AutoConfig, LlamaConfig, PretrainedConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if "model_type" in config:  # special floats as transformers writes them ({"__float__": "Infinity"}: Falcon-H1) decoded
        cfg = AutoConfig.for_model(**PretrainedConfig._decode_special_floats(config))
    else:  # a bare block: a one-head LLaMA config carries it
        cfg = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, num_key_value_heads=1, head_dim=head_dim,
                          max_position_embeddings=config["max_position_embeddings"],
                          rope_parameters=config["rope_parameters"])
    text = cfg.get_text_config()
    out = []
    for layer_type, params in rope_blocks(text.rope_parameters).items():
        rope_type = params.get("rope_type", "default")
        if layer_type is not None and (layer_type not in scaled if scaled else rope_type == "default"):
            continue  # a layer type the schedule leaves alone (Gemma 3's sliding layers)
        base = float(params["rope_theta"])
        dim = config_geometry(text.to_dict(), params, layer_type).rotary_dim  # as transformers' default init: head_dim x partial
        plain = 1.0 / base ** (np.arange(0, int(dim), 2, dtype=np.float64) / int(dim))
        if rope_type == "default":
            factors, attention = np.ones_like(plain), 1.0
        elif rope_type in ROPE_INIT_FUNCTIONS:
            try:
                inv, attention = ROPE_INIT_FUNCTIONS[rope_type](layer_config(text, layer_type), torch.device("cpu"),
                                                                seq_len=at_len, layer_type=layer_type)
            except (KeyError, TypeError, ValueError) as exc:
                raise RopeCliError(f"transformers cannot build rope_type '{rope_type}' from this config ({exc!r}); "
                                   "it would fail at load time too") from None
            if len(inv) != len(plain):
                raise RopeCliError(f"rope_type '{rope_type}' gives {len(inv)} frequencies for rotary dim {int(dim)}: "
                                   "its factor lists do not fit this model")
            inv = inv.double().numpy()
            factors = np.divide(plain, inv, out=np.ones_like(plain), where=inv > 0)  # p-RoPE's zero pairs: unscaled
        else:
            factors, attention = None, 1.0
        L = config_geometry(text.to_dict(), params).original_len
        which = ""
        if rope_type == "longrope":
            which = " long_factor" if at_len > int(L or text.max_position_embeddings) else " short_factor"
            if params.get("short_factor") == params.get("long_factor"):
                which += CONSISTENT
        out.append(Applied("transformers", layer_type, factors, float(attention), base, L and int(L),
                           int(text.max_position_embeddings), at_len, f"{rope_type}{which}"))
    return out


# --- llama.cpp ---------------------------------------------------------------------------------

def gguf_applied(path: Path, at_len: int) -> list[Applied]:
    meta = gguf_metadata(path)
    arch = meta.get("general.architecture", "")
    get = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731

    freqs = rope_freqs_of(path)
    d = get("rope.dimension_count") or get("attention.key_length") or \
        (get("embedding_length") and get("attention.head_count") and get("embedding_length") // get("attention.head_count"))
    if not d:
        raise RopeCliError(f"{path}: the GGUF states no rope.dimension_count or head size; is it a model file?")
    factors = np.ones(int(d) // 2) if freqs is None else freqs.astype(np.float64)
    how = "no rope_freqs" if freqs is None else "rope_freqs"
    if freqs is not None and arch not in GGUF_ROPE_FREQS_ARCHS:
        factors, how = None, f"rope_freqs in a '{arch}' GGUF, whose llama.cpp loader ignores it"
    scaling = get("rope.scaling.type", "linear")  # llama.cpp's default when the key is absent
    f = float(get("rope.scaling.factor") or get("rope.scale_linear") or 0.0)  # load_hparams' fallback key
    if factors is not None and scaling == "linear" and f:
        factors, how = factors * f, how + f" x linear factor {f:g}"
    elif scaling == "yarn" and f and freqs is None:  # llama.cpp's own yarn (models.gguf_rope.llamacpp_yarn)

        L0 = int(get("rope.scaling.original_context_length") or get("context_length"))
        factors, scale = llamacpp_yarn(int(d), float(get("rope.freq_base", 10000.0)), f, L0)
        return [Applied("llamacpp", None, factors, scale * float(get("rope.scaling.attn_factor", 1.0)),
                        float(get("rope.freq_base", 10000.0)), L0, int(get("context_length") or 0) or None, at_len,
                        f"rope.scaling.type yarn, factor {f:g} (llama.cpp's yarn)")]
    elif scaling not in ("none", "linear"):
        factors, how = None, f"rope.scaling.type {scaling}"
    L = get("rope.scaling.original_context_length")
    ctx = get("context_length")
    return [Applied("llamacpp", None, factors, float(get("rope.scaling.attn_factor", 1.0)), float(get("rope.freq_base", 10000.0)),
                    L and int(L), ctx and int(ctx), at_len, how)]


def rope_freqs_of(path: Path) -> np.ndarray | None:
    """The F32 `rope_freqs.weight` tensor of a GGUF, or None."""
    try:
        import gguf
    except ImportError:
        raise RopeCliError("reading a GGUF's tensors needs the 'gguf' package; pip install 'ropecli[gguf]'") from None
    for t in gguf.GGUFReader(str(path)).tensors:
        if t.name == "rope_freqs.weight":
            return np.asarray(t.data, dtype=np.float64).reshape(-1)
    return None


def artefact_geometry(artefact: Path, stated: Callable[[Path], dict] | None = None) -> dict:
    """d, base and L as an artefact states them (None where it does not), by the one rule
    (`ropecli.models.model_geometry.config_geometry`): `stated`, the runtime's own reader where it has one (a GGUF's
    header: `gguf_geometry`), else a config.json or a block's; one line if it is unreadable."""
    try:
        return (stated or json_geometry)(artefact)
    except UNREADABLE as exc:
        raise unreadable(artefact, exc) from None


def gguf_geometry(artefact: Path) -> dict:
    """d, base and L from a GGUF's header, as llama.cpp reads them (`gguf_applied`)."""
    a = gguf_applied(artefact, 1)[0]
    return {"rotary_dim": a.factors is not None and 2 * len(a.factors), "base": a.rope_theta, "train_len": a.train_len}


def json_geometry(artefact: Path) -> dict:
    """d, base and L from a model folder's config.json or a rope_parameters block."""
    cfg = read_json(artefact / "config.json" if artefact.is_dir() else artefact)
    text = cfg.get("text_config") or cfg
    rp = text.get("rope_parameters") or {}
    rp = rp if "rope_type" in rp else next((v for v in rp.values() if isinstance(v, dict)), {})
    g = config_geometry(text, rp)
    return {"rotary_dim": 2 * len(rp.get("long_factor") or []) or g.rotary_dim, "base": rp.get("rope_theta"),
            "train_len": g.original_len}
