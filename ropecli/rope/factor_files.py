"""Reading explicit per-pair factors (LongRoPE style) and writing transformers' rope_parameters.

Accepted factor files:
- JSON: a list of numbers; or an object with `long_factor`, `factors`, or `rope_parameters.long_factor`
  (the block `ropecli schedule --format hf` prints, or a model's config.json).
- CSV/text: one number per line; a single row of comma-separated numbers; or a header row with a
  column named `factor` or ending in `_factor` (what `ropecli schedule --csv` writes; first such column).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.rope.geometry import Geometry
from ropecli.rope.schedule import Schedule


def read_factors(path: str | Path) -> np.ndarray:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise RopeCliError(f"cannot read factor file '{path}' ({exc.__class__.__name__}: {exc}); pass a readable JSON or CSV file") from None
    try:
        values = _parse_json(text) if path.suffix.lower() == ".json" or text.lstrip()[:1] in "[{" else _parse_csv(text)
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
        raise RopeCliError(f"factor file '{path}' is not a list of numbers ({exc}); write one number per line, or JSON with 'long_factor'") from None
    if arr.size == 0:
        raise RopeCliError(f"factor file '{path}' holds no numbers; write one factor per pair")
    return arr


def _parse_json(text: str) -> list[float]:
    obj = json.loads(text)
    if isinstance(obj, dict):
        for getter in (lambda o: o["long_factor"], lambda o: o["factors"], lambda o: o["rope_parameters"]["long_factor"],
                       lambda o: o["rope_scaling"]["long_factor"]):
            try:
                return getter(obj)
            except (KeyError, TypeError):
                continue
        raise KeyError("no 'long_factor' or 'factors' key")
    return obj


def _parse_csv(text: str) -> list[float]:
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if not rows:
        return []
    try:
        [float(c) for c in rows[0]]
        has_header = False
    except ValueError:
        has_header = True
    if not has_header:
        if len(rows) == 1:
            return [float(c) for c in rows[0]]
        return [float(r[-1]) for r in rows]
    header = [h.strip().lower() for h in rows[0]]
    cols = [i for i, h in enumerate(header) if h == "factor" or h.endswith("_factor")]
    if not cols:
        raise KeyError("no column named 'factor'")
    return [float(r[cols[0]]) for r in rows[1:]]


def rope_parameters_block(geom: Geometry, schedule: Schedule, partial_rotary_factor: float = 1.0,
                          consistent: bool = True) -> dict[str, Any]:
    """The transformers config fragment that reproduces `schedule`: longrope with long_factor = Lambda.

    transformers picks long_factor for a forward pass longer than original_max_position_embeddings and
    short_factor up to it (`longrope_frequency_update`), and keys in a KV cache keep the rotation they got:
    `consistent` (the default) writes short_factor = long_factor, one schedule at every length, so generation
    through a cache equals one pass; `consistent=False` writes short_factor = 1 (the unscaled model up to L),
    the switching form. attention_factor is written explicitly so transformers does not substitute its own
    default sqrt(1 + ln k / ln L).
    """
    params: dict[str, Any] = {
        "rope_type": "longrope",
        "rope_theta": float(geom.base),
        "factor": float(geom.factor),
        "original_max_position_embeddings": int(geom.train_len),
        "long_factor": [float(x) for x in schedule.factors],
        "short_factor": [float(x) for x in schedule.factors] if consistent else [1.0] * geom.n_pairs,
        "attention_factor": float(schedule.attention_factor),
    }
    if partial_rotary_factor != 1.0:
        params["partial_rotary_factor"] = float(partial_rotary_factor)
    return {"rope_parameters": params, "max_position_embeddings": int(geom.target_len)}
