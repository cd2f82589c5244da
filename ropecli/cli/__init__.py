"""The top: the Typer app, every option defined once, flags to specs, opening an evaluation session, the consoles, and
`commands/` (each parses, calls one function below, prints)."""
