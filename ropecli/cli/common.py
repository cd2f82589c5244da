"""Shared pieces of the Typer commands: the error boundary (one line per error, usage errors included), geometry and
schedules from option groups, output helpers. No torch, no matplotlib; the options are in `ropecli.cli.options`."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from ropecli.cli.console import jsonable, stderr_console
from ropecli.errors import RopeCliError
from ropecli.evaluation.distributed import leave, rank_prefix, world_from_env
from ropecli.models.config import geometry_from_flags

DEBUG_ENV = "ROPECLI_DEBUG"


def fail(message: str, code: int = 1):
    """Print one line to stderr and leave with `code` (no traceback); under torchrun the line names its rank."""
    print(f"Error: {rank_prefix()}{message}", file=sys.stderr)
    raise typer.Exit(code)


def _secondary_rank() -> bool:
    rank, world, _ = world_from_env()
    return world > 1 and rank > 0


def _lost_peer(exc: BaseException) -> bool:
    """A collective that failed because another rank stopped (its own line says why)."""
    text = f"{type(exc).__name__} {exc}".lower()  # whole words: 'typeerror … unexpected' is no lost peer
    return re.search(r"\b(gloo|nccl|connection|distbackenderror|distnetworkerror|timed out|peer)\b", text) is not None


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
            if _secondary_rank():  # torchrun interrupts every rank; rank 0 says it once
                raise typer.Exit(130) from None
            fail("interrupted; finished evaluations are kept in the cache, rerun the same command to resume", 130)
        except BrokenPipeError:  # output piped into `head` and closed: not an error
            sys.stderr.close()
            raise typer.Exit(0) from None
        except Exception as exc:  # a bug or an environment failure: one line unless debugging
            if debug or _is_usage_error(exc):
                raise
            if _lost_peer(exc):
                if _secondary_rank():  # the rank that failed, or rank 0, says what happened
                    raise typer.Exit(1) from None
                fail(f"another rank stopped or timed out ({str(exc).splitlines()[0][:200]}); finished evaluations "
                     "are kept in the cache, rerun the same command to resume")
            fail(f"{exc.__class__.__name__}: {exc} (set {DEBUG_ENV}=1 to see the traceback)")

    return wrapper


def _is_usage_error(exc: Exception) -> bool:
    """Click's own exceptions (vendored by some typer versions) carry their own exit code and message."""
    return any(c.__name__ in ("ClickException", "UsageError") for c in type(exc).__mro__)


def geometry_of(opts):
    """(Geometry, ModelRope or None): the analysis commands' geometry from a GeometryOptions; with --model, its config is read
    (no weights, no torch) and described on stderr, as the evaluating commands describe a loaded model."""
    geom, rope = geometry_from_flags(opts.d, opts.base, opts.train_len, opts.k, opts.target_len,
                                     opts.model, opts.gguf_file, opts.rope_layers)
    if rope is not None:
        stderr_console().print(f"model {rope.describe()}", highlight=False)
    return geom, rope


def schedules_of(geom, opts, default: str) -> list:
    """The Schedules a ScheduleOptions asks for, on one geometry (one per method, per b for mixed)."""

    return [spec.schedule(geom) for spec in opts.specs(default)]


def emit_json(obj: Any) -> None:
    """JSON on stdout; NaN/inf become null so every parser reads it."""
    print(json.dumps(jsonable(obj), indent=2))



class OneLineErrorsGroup(TyperGroup):
    """A command group whose usage errors (a value out of range, an unknown choice or flag) are one
    line, `Error: … (see 'ropecli CMD --help')`, exit 2, like every other ropecli error."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)

        def shutdown(clean: bool) -> bool:  # only a command that evaluated has a process group to leave
            module = sys.modules.get("ropecli.evaluation.distributed")
            return module.shutdown(clean) if module else True

        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except Exception as exc:  # click's, or the copy of click that typer vendors: matched by name
            clean_exit = shutdown(clean=False)
            kinds = {c.__name__ for c in type(exc).__mro__}
            if "NoArgsIsHelpError" in kinds:
                print(exc.format_message(), file=sys.stderr)
            elif "ClickException" in kinds:
                where = exc.ctx.command_path if getattr(exc, "ctx", None) else "ropecli"
                print(f"Error: {exc.format_message()} (see '{where} --help')", file=sys.stderr)
            elif "Abort" in kinds:
                print("Aborted.", file=sys.stderr)
            else:
                raise
            code = getattr(exc, "exit_code", 1)
            if not clean_exit:
                leave(code)
            sys.exit(code)
        code = rv if isinstance(rv, int) else 0
        session = sys.modules.get("ropecli.evaluation.session")  # a command that opened sessions has notes
        for line in (session.closing_notes() if session else []):
            stderr_console().print(line, highlight=False)
        if not shutdown(clean=code == 0):  # something still holds the process group: exit without finalization

            leave(code)
        sys.exit(code)
