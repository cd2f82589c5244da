"""The `ropecli` command: the command table; a command's module is imported only when that command runs
(or its `--help` is asked), so `ropecli freqs` never loads the evaluating commands' options and registries."""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

from ropecli import __version__
from ropecli.cli.common import OneLineErrorsGroup
from ropecli.cli.options import ADVANCED

# name -> (module under ropecli.cli.commands, function; "app" is a Typer sub-app), in `ropecli --help`'s order.
COMMANDS = {
    "freqs": ("analysis", "freqs"), "digits": ("analysis", "digits"), "schedule": ("analysis", "schedule"),
    "methods": ("analysis", "methods"), "ppl": ("evaluate", "ppl"), "compare": ("evaluate", "compare"),
    "passkey": ("metrics_commands", "passkey"), "kl": ("metrics_commands", "kl"), "search": ("search_commands", "search"),
    "search-b": ("search_commands", "search_b"), "export": ("export", "export"), "verify": ("verify_command", "verify"),
    "advise": ("advise_command", "advise"), "runtimes": ("runtimes", "runtimes"), "plot": ("plot", "app"),
}


def command_function(name: str):
    """The function (or Typer sub-app) behind `ropecli NAME`, imported now."""
    module, attr = COMMANDS[name]
    return getattr(importlib.import_module(f"ropecli.cli.commands.{module}"), attr)


@functools.lru_cache(maxsize=None)
def summary(name: str) -> str:
    """`ropecli --help`'s line for a command: its docstring's first line (a sub-app: its help=), read from the source
    with ast, so listing the commands imports none of them."""
    module, attr = COMMANDS[name]
    for node in ast.walk(ast.parse((Path(__file__).parent / "commands" / f"{module}.py").read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == attr:
            return (ast.get_docstring(node) or "").split("\n")[0]
        if attr == "app" and isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Typer":
            return next((k.value.value for k in node.keywords if k.arg == "help"), "")
    return ""


def finish_help(command) -> None:
    """A command's options completed as it is built: every float refuses NaN and ±inf; `{choices}` in a help becomes
    the choices, read from the registry now (a record registered after start-up is listed); an option whose type has
    no metavar of its own shows its name (`--len LEN`), never a placeholder such as `<int>`."""
    for param in getattr(command, "params", ()):
        if type(param.type).__name__ in ("FloatParamType", "FloatRange"):  # click takes 'nan' and 'inf': refused here
            param.type = _finite(param.type)
        if getattr(param, "help", None) and "{choices}" in param.help:
            param.help = param.help.replace("{choices}", ", ".join(param.type.choices))
        if not getattr(param, "is_flag", False) and param.type.get_metavar(param, None) is None:
            if param.param_type_name == "argument":  # Typer shows an argument's type in a column of its own
                param.type = copy.copy(param.type)
                param.type.get_metavar = lambda *a, _name=param.name.upper(), **k: _name
            elif param.metavar is None:
                param.metavar = param.name.upper()
    if hasattr(command, "params"):  # the Advanced panel last: panels show in the order of their first option
        command.params.sort(key=lambda p: getattr(p, "rich_help_panel", None) == ADVANCED)
    for sub in getattr(command, "commands", {}).values():
        finish_help(sub)


def _finite(kind):
    """A copy of a float type (click.FLOAT is one shared instance) that refuses NaN and ±inf in click's one line."""
    kind, inner = copy.copy(kind), kind.convert

    def convert(value, param, ctx):
        number = inner(value, param, ctx)
        return number if math.isfinite(number) else kind.fail(f"{value} is not a finite number", param, ctx)

    kind.convert = convert
    return kind


class LazyCommandsGroup(OneLineErrorsGroup):
    """The root group: commands are built from COMMANDS when asked for; while the root's own help is drawn,
    each is a stub carrying its summary."""

    listing = False

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        if self.listing:
            return TyperCommand(name, short_help=summary(name), help=summary(name))
        if name not in self.commands:
            fn, single = command_function(name), typer.Typer(add_completion=False)
            single.command(name)(fn) if not isinstance(fn, typer.Typer) else None
            self.commands[name] = typer.main.get_group(fn) if isinstance(fn, typer.Typer) else typer.main.get_command(single)
            self.commands[name].name = name
            finish_help(self.commands[name])
        return self.commands[name]

    def format_help(self, ctx, formatter):
        self.listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self.listing = False


app = typer.Typer(name="ropecli", help="Choose how to stretch a RoPE model's context window: frequencies, schedules, perplexity, "
                  "and the mixed-base b search.", cls=LazyCommandsGroup, no_args_is_help=True, pretty_exceptions_enable=False,
                  add_completion=False, context_settings={"help_option_names": ["-h", "--help"]})


def _version(value: bool):
    if value:
        print(f"ropecli {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = None):
    """ropecli: RoPE context-extension workbench."""


def main() -> None:
    app()
