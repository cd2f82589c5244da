"""Writing a chosen schedule where a runtime reads it. Today: the transformers `rope_parameters`
block (longrope, long_factor = Lambda) for a loaded model, with per-layer-type configs (Gemma 3)
and partial rotary carried over. Files are written atomically (temporary file, then rename)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.files import atomic_write_text
from ropecli.geometry import Geometry
from ropecli.specs import Spec


def check_writable(path: str, flag: str) -> None:
    """Refuse a path whose folder does not exist, before any work is done."""
    if not Path(path).resolve().parent.exists():
        raise RopeCliError(f"{flag} {path}: the folder does not exist; create it or write elsewhere")


def hf_block(model: Any, spec: Spec, factor: float) -> tuple[dict, str]:
    """(block, note): the transformers config fragment that runs `spec` at factor k on `model`
    (anything with rotary_dim, base, train_len, partial_rotary_factor, layer_types and
    scaled_layer_types, e.g. a LoadedModel). With log-n, the attention factor is the constant
    sqrt(log_L(k*L)): log-n's query scale at the target length (transformers applies one constant)."""
    from ropecli.factor_files import rope_parameters_block

    geom = Geometry(model.rotary_dim, model.base, model.train_len, factor)
    block = rope_parameters_block(geom, spec.schedule(geom), partial_rotary_factor=model.partial_rotary_factor)
    note = f"{spec.but(log_n=False).label} as longrope long_factor; attention_factor {block['rope_parameters']['attention_factor']:g}"
    if spec.log_n:
        att = math.sqrt(math.log(geom.target_len) / math.log(model.train_len))
        block["rope_parameters"]["attention_factor"] = att
        note = (f"{spec.but(log_n=False).label}; attention_factor {att:.6f} = sqrt(log_L(k*L)) approximates the per-position "
                "log-n query scale by its value at the target length (transformers applies one constant to q and k)")
    if model.layer_types:
        block = {"rope_parameters": {lt: (block["rope_parameters"] if lt in model.scaled_layer_types else "unchanged")
                                     for lt in model.layer_types}, "max_position_embeddings": block["max_position_embeddings"]}
        note += "; per layer type: merge the scaled entries into your config's rope_parameters, keep the others"
    return block, note


def write_hf_block(path: str, model: Any, spec: Spec, factor: float) -> dict:
    block, note = hf_block(model, spec, factor)
    atomic_write_text(path, json.dumps(block, indent=2) + "\n")
    return {"path": path, "note": note}
