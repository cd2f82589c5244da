"""Typer commands, one module per family; `ropecli.cli` registers them."""
