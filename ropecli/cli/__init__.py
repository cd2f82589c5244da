"""Layer 5, the top: the Typer app, every option defined once, flags to specs, the evaluation session,
output helpers, and `commands/` (each parses, calls one function below, prints)."""
