"""Where ropecli talks: to people, tables on stdout, messages and progress on stderr (rank 0 only under torchrun); to
programs, `--json` (`jsonable`: any result, array or number as plain JSON values). Imported by the error boundary
(`ropecli.cli.common`) and the session alike."""

from __future__ import annotations

import math
import os
from typing import Any

from rich.console import Console

from ropecli.evaluation.distributed import world_from_env


def console():
    out = Console()
    if not out.is_terminal:  # piped into a file or a pager: don't squeeze tables into 80 columns
        out.width = max(out.width, 200)
    return out


def stderr_console():
    """Messages and progress for people, on stderr (stdout stays clean for --json and pipes); under
    torchrun only rank 0 shows them."""
    if world_from_env()[0] > 0:
        return Console(file=open(os.devnull, "w"))
    err = Console(stderr=True)
    if not err.is_terminal:  # a log file: one message per line, not wrapped at 80 columns
        err.width = max(err.width, 200)
    return err


def show(items: list, wrap: bool = True, err: bool = False) -> None:
    """Print what a report function returns (`ropecli.report.*_tables`): rich Tables, and lines in rich
    markup; `wrap=False` keeps long lines (commands to copy) on one line; `err`: on stderr, beside data a command
    writes on stdout (export's block, for `> file`)."""
    out = stderr_console() if err else console()
    for item in items:
        out.print(item, highlight=False, soft_wrap=not wrap)


def jsonable(obj: Any) -> Any:
    """`obj` as plain JSON values: a record with a `to_json` (results, rows, verdicts) through it, numpy arrays and
    scalars as lists and numbers, NaN and ±inf as None (null), so every parser reads it."""
    if hasattr(obj, "to_json"):
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
