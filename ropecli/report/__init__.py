"""Pictures (matplotlib, deferred to the first figure) and terminal tables, and advise's report.md: each module returns
what to print or draw from results it is handed. The two pieces every terminal table of ropecli is made of stand here,
light enough for the analysis commands (rich only): `table`, a rich Table with its columns, and `plain`, a line printed
as it is; with `lengths_of`, a command's lengths as every table's title says them."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def plain(line: str):
    """A line printed as it is: brackets in it are text, not rich markup (`[windows inference: …]`)."""
    return Text(line)


def table(title: str, columns: list[str], left: tuple[str, ...] = ("method",)):
    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right")
    return t


def lengths_of(out: dict) -> str:
    """A command's lengths from its JSON header: `L = 256`, or `L0 = 256, Ls = 1024, ships llama3(factor=4, …)`
    for a model that ships a scaled RoPE (older outputs without L0/Ls: their train_len)."""
    shipped = out.get("shipped")
    if not shipped:
        return f"L = {out.get('L0', out.get('train_len'))}"
    return f"L0 = {out['L0']}, Ls = {out['Ls']}, ships {shipped['label']}"
