"""The runtimes' records as a Markdown table (docs/runtimes.md keeps a copy; a test keeps it equal)."""

from __future__ import annotations
from ropecli.export.registry import records


def runtimes_markdown() -> list[str]:
    """One row per runtime: its name and aliases, what ropecli writes, how it applies an export at a request of n
    tokens and while decoding, and the versions that holds for (with their sources)."""
    lines = ["| runtime | `--to` (aliases) | writes | at a request of n tokens | while decoding with a KV cache | versions |",
             "|---|---|---|---|---|---|"]
    for rec in records().values():
        versions = "; ".join(f"{v.requirement or 'any'}: {v.what} ({v.source})" for v in rec.versions)
        aliases = f"`{rec.name}`" + (f" ({', '.join(f'`{a}`' for a in rec.aliases)})" if rec.aliases else "")
        lines.append(f"| {rec.label} | {aliases} | {rec.artefact} | {rec.at_length} | {rec.decoding} | {versions} |")
    return lines
