"""Typer commands, one module per family; `ropecli.cli.app` registers them."""
