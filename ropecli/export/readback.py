"""What a runtime will apply, read back from an exported artefact (for `ropecli verify`), and one check of it against
what was measured (`Check`: verify's, a --switching export's decode measurement's and a map folder's).

For each scaled layer type: the per-pair factors Lambda_m (the runtime's inv_freq = base^(-2i/d) / Lambda),
the cos/sin multiplier (attention factor), the base, and the lengths the artefact states, at the
length it will serve. Each runtime by its own rules, read by its own module's reader (`ropecli.export.runtimes.<name>`;
what they share is here: `Applied`, `read_json`, `rope_blocks`, `layer_config`):
- transformers (`transformers_applied`): its own code, `ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=T, layer_type=…)` in
  transformers/modeling_rope_utils.py (the oracle: longrope picks long_factor when T > original L).
- vLLM: numpy twins of its rotary classes (`ropecli.export.runtimes.vllm`): `ntk` (NTKScalingRotaryEmbedding),
  `longrope` (Phi3LongRoPEScaledRotaryEmbedding: long_factor and long_mscale for every request once
  --max-model-len > original_max_position_embeddings), `dynamic` (DynamicNTKScalingRotaryEmbedding).
- llama.cpp (`gguf_applied`): `rope_freqs.weight` divides each pair's angle at every length (ggml-cpu/ops.cpp,
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
    runtime: str  # the name of the runtime whose reader made it
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


def artefact_geometry(artefact: Path, stated: Callable[[Path], dict] | None = None) -> dict:
    """d, base and L as an artefact states them (None where it does not), by the one rule
    (`ropecli.models.model_geometry.config_geometry`): `stated`, the runtime's own reader where it has one (a GGUF's
    header: `runtimes.llamacpp.stated_geometry`), else a config.json or a block's; one line if it is unreadable."""
    try:
        return (stated or json_geometry)(artefact)
    except UNREADABLE as exc:
        raise unreadable(artefact, exc) from None


def json_geometry(artefact: Path) -> dict:
    """d, base and L from a model folder's config.json or a rope_parameters block."""
    cfg = read_json(artefact / "config.json" if artefact.is_dir() else artefact)
    text = cfg.get("text_config") or cfg
    rp = text.get("rope_parameters") or {}
    rp = rp if "rope_type" in rp else next((v for v in rp.values() if isinstance(v, dict)), {})
    g = config_geometry(text, rp)
    return {"rotary_dim": 2 * len(rp.get("long_factor") or []) or g.rotary_dim, "base": rp.get("rope_theta"),
            "train_len": g.original_len}


@dataclass
class Check:
    runtime: str
    layer_type: str | None
    what: str
    expected: str
    found: str
    ok: bool
    error: bool = False  # the runtime failed to run (found: its error), which says nothing of the export's numbers
