"""The two pieces every terminal table of ropecli is made of (`ropecli.report.*tables`): a rich Table with
its columns, and a line printed as it is. Light: rich only, imported by the analysis commands too."""

from __future__ import annotations


def plain(line: str):
    """A line printed as it is: brackets in it are text, not rich markup (`[windows inference: …]`)."""
    from rich.text import Text

    return Text(line)


def table(title: str, columns: list[str], left: tuple[str, ...] = ("method",)):
    from rich.table import Table

    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right")
    return t
