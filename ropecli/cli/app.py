"""The `ropecli` command: registers the commands; the work lives in the modules they call."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ropecli import __version__
from ropecli.cli.common import OneLineErrorsGroup
from ropecli.cli.commands import advise, analysis, evaluate, export, metrics, plot, runtimes, search, verify

app = typer.Typer(
    name="ropecli",
    help="Choose how to stretch a RoPE model's context window: frequencies, schedules, perplexity, and the mixed-base b search.",
    cls=OneLineErrorsGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool):
    if value:
        print(f"ropecli {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = None):
    """ropecli: RoPE context-extension workbench."""


COMMANDS = {  # name -> function, in the order `ropecli --help` lists them
    "freqs": analysis.freqs, "digits": analysis.digits, "schedule": analysis.schedule, "methods": analysis.methods,
    "ppl": evaluate.ppl, "compare": evaluate.compare, "passkey": metrics.passkey, "kl": metrics.kl,
    "search": search.search, "search-b": search.search_b, "export": export.export, "verify": verify.verify, "advise": advise.advise,
    "runtimes": runtimes.runtimes,
}
for name, command in COMMANDS.items():
    app.command(name)(command)
app.add_typer(plot.app, name="plot")


def main() -> None:
    app()
