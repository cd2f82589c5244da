"""What `--json` prints: any result, array or number as plain JSON values (the tables are for people, this is for
programs)."""

from __future__ import annotations

import math
from typing import Any

from ropecli.evaluation.compared import PositionDiff, Row, Verdict
from ropecli.evaluation.results import EvalResult


def jsonable(obj: Any) -> Any:
    """`obj` as plain JSON values: results, rows and verdicts through their to_json, numpy arrays and scalars as lists and numbers, NaN and
    ±inf as None (null), so every parser reads it."""
    if isinstance(obj, (EvalResult, Row, Verdict, PositionDiff)):
        return jsonable(obj.to_json())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return jsonable(obj.item())
    return obj
