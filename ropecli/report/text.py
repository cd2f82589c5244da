"""The two pieces every terminal table of ropecli is made of (`ropecli.report.*tables`): a rich Table with
its columns, and a line printed as it is. Light: rich only, imported by the analysis commands too."""

from __future__ import annotations

from rich.text import Text
from rich.table import Table


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
