"""Shared pieces of the Typer commands: reusable options, the error boundary, geometry and
schedule building from flags, and output helpers. Imports nothing heavy (no torch, no matplotlib)."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from typing import Annotated, Any, Optional

import typer

from ropecli.errors import RopeCliError

DEBUG_ENV = "ROPECLI_DEBUG"

# --- reusable options ----------------------------------------------------------------------
HeadDimOpt = Annotated[int, typer.Option("--d", "--head-dim", help="Rotary dimension d of one head (head_dim * partial_rotary_factor).")]
BaseOpt = Annotated[float, typer.Option("--base", help="RoPE base (rope_theta).")]
TrainLenOpt = Annotated[int, typer.Option("--train-len", "-L", help="Training context length L.")]
FactorOpt = Annotated[Optional[float], typer.Option("--k", "--factor", help="Extension factor k (default: target-len / train-len, else 8).")]
TargetLenOpt = Annotated[Optional[int], typer.Option("--target-len", help="Target context length; sets k = target-len / train-len.")]
BOpt = Annotated[Optional[float], typer.Option("--b", help="Exponent b of the mixed method, in [0, 1] (default 0.625).")]
BListOpt = Annotated[Optional[list[float]], typer.Option("--b", help="Exponent b of the mixed method; repeat to overlay several.")]
FactorsOpt = Annotated[Optional[str], typer.Option("--factors", help="JSON/CSV file of d/2 factors for the longrope method.")]
ParamOpt = Annotated[Optional[list[str]], typer.Option("--param", help="Method parameter KEY=VALUE, e.g. beta_fast=32 (repeatable).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of tables.")]

DEFAULT_FACTOR = 8.0


def fail(message: str, code: int = 1):
    """Print one line to stderr and leave with `code` (no traceback)."""
    print(f"Error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def handle_errors(fn):
    """Error boundary of every command: a RopeCliError becomes one line and exit 1; an interrupt
    exits 130; anything else is one line too, with its traceback only when ROPECLI_DEBUG=1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = bool(os.environ.get(DEBUG_ENV))
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except RopeCliError as exc:
            if debug:
                raise
            fail(str(exc))
        except KeyboardInterrupt:
            if debug:
                raise
            fail("interrupted; finished evaluations are kept in the cache, rerun the same command to resume", 130)
        except BrokenPipeError:  # output piped into `head` and closed: not an error
            sys.stderr.close()
            raise typer.Exit(0) from None
        except Exception as exc:  # a bug or an environment failure: one line unless debugging
            if debug or _is_usage_error(exc):
                raise
            fail(f"{exc.__class__.__name__}: {exc} (set {DEBUG_ENV}=1 to see the traceback)")

    return wrapper


def _is_usage_error(exc: Exception) -> bool:
    """Click's own exceptions (vendored by some typer versions) carry their own exit code and message."""
    return any(c.__name__ in ("ClickException", "UsageError") for c in type(exc).__mro__)


def resolve_factor(train_len: int, k: float | None, target_len: int | None, default: float | None = DEFAULT_FACTOR) -> float:
    if k is not None and target_len is not None:
        raise RopeCliError("--k and --target-len both set the factor; pass only one of them")
    if target_len is not None:
        if train_len <= 0:
            raise RopeCliError(f"training length L={train_len} must be positive; pass e.g. --train-len 4096")
        if target_len < train_len:
            raise RopeCliError(f"--target-len {target_len} is below --train-len {train_len}; nothing to extend (k would be < 1)")
        return target_len / train_len
    return default if k is None else k


def make_geometry(head_dim: int, base: float, train_len: int, k: float | None, target_len: int | None = None):
    from ropecli.geometry import Geometry

    return Geometry(head_dim, base, train_len, resolve_factor(train_len, k, target_len))


def parse_params(pairs: list[str] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise RopeCliError(f"--param '{item}' is not KEY=VALUE; write e.g. --param beta_fast=32")
        try:
            out[key] = float(value)
        except ValueError:
            raise RopeCliError(f"--param {key}: '{value}' is not a number; write e.g. --param {key}=1.5") from None
    return out


def split_methods(methods: list[str] | None, default: str) -> list[str]:
    names = [n.strip() for item in (methods or [default]) for n in item.split(",") if n.strip()]
    if not names:
        raise RopeCliError(f"no method given; pass e.g. --method {default}")
    return names


def check_params_fit(methods, keys: list[str]) -> None:
    """Every given parameter must belong to at least one of the chosen methods (Method objects)."""
    from ropecli.schedules import REGISTRY

    accepted = {p.name for m in methods for p in m.params}
    for key in keys:
        if key not in accepted:
            owners = [m.name for m in REGISTRY.values() if any(p.name == key for p in m.params)]
            hint = f"it belongs to {', '.join(owners)}" if owners else "no method takes it"
            raise RopeCliError(f"parameter '{key}' does not apply: it fits none of the chosen methods "
                               f"({', '.join(m.name for m in methods)}); {hint}")


def build_schedules(geom, methods: list[str], bs: list[float] | None, params: dict[str, float], factors_file: str | None):
    """One Schedule per method, and one per b for `mixed`. A parameter must fit at least one method."""
    from ropecli.schedules import compute_schedule, resolve_method

    resolved = [resolve_method(n) for n in methods]
    check_params_fit(resolved, [*params, *(["b"] if bs else []), *(["factors"] if factors_file else [])])
    factors = None
    if factors_file:
        from ropecli.factor_files import read_factors

        factors = read_factors(factors_file)
    schedules = []
    for method in resolved:
        names = {p.name for p in method.params}
        kwargs = {k: v for k, v in params.items() if k in names}
        if "factors" in names:
            kwargs["factors"] = factors
        for b in (bs or [None]) if "b" in names else [None]:
            schedules.append(compute_schedule(method.name, geom, **kwargs, **({"b": b} if b is not None else {})))
    return schedules


def emit_json(obj: Any) -> None:
    """JSON on stdout; NaN/inf become null so every parser reads it."""
    print(json.dumps(_clean(obj), indent=2))


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _clean(obj.tolist())
    if hasattr(obj, "item"):
        return _clean(obj.item())
    return obj


def g4(x: float) -> str:
    """4 significant digits, the table format for every float."""
    return f"{x:.4g}"


def console():
    from rich.console import Console

    out = Console()
    if not out.is_terminal:  # piped into a file or a pager: don't squeeze tables into 80 columns
        out.width = max(out.width, 200)
    return out
