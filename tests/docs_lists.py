"""The lists of maps, methods, metrics and runtimes that README.md and docs/ name in prose, made from the registries:
each stands between `<!-- list:KIND -->` and `<!-- /list -->` and is `render(KIND)`'s text exactly
(tests/test_docs_lists.py keeps every one equal). `python tests/docs_lists.py` rewrites them after a registry changed.

    maps       every position map's title, once per source (`maps.position_maps.MAPS`: Self-Extend, … LaMPE)
    methods    every scaling method's title (`rope.methods.REGISTRY`; none and native are no scaling)
    standard   the methods people deploy (`spec.STANDARD_METHODS`): search's references, advise's fixed candidates
    metrics    every `--metric` (`evaluation.metrics.REGISTRY`)
    tasks      every RULER task `--task` generates (the same registry)
    runtimes   every runtime ropecli exports to (`export.registry.records`)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ropecli.evaluation.metrics import REGISTRY as METRICS
from ropecli.evaluation.metrics import is_task
from ropecli.export.registry import records
from ropecli.maps.position_maps import MAPS
from ropecli.rope.methods import REGISTRY as METHODS
from ropecli.rope.schedule import format_label
from ropecli.spec import STANDARD_METHODS

ROOT = Path(__file__).resolve().parent.parent
SPAN = re.compile(r"<!-- list:(\w+) -->(.*?)<!-- /list -->", re.S)


def _once(titles) -> list[str]:
    return list(dict.fromkeys(t for t in titles if t))


def render(kind: str) -> str:
    """The prose of one list: names joined by ", "."""
    if kind == "maps":
        names = _once(m.title for m in MAPS.values())
    elif kind == "methods":
        names = _once(m.title for m in METHODS.values())
    elif kind == "standard":
        names = [(METHODS[n].title or n) + (f" {format_label(n, p).removeprefix(n)}" if p else "")
                 for n, p in STANDARD_METHODS]
    elif kind == "metrics":
        names = [f"`{m.name}`" for m in METRICS.values() if not is_task(m.name)]
    elif kind == "tasks":
        names = [f"`{m.name}`" for m in METRICS.values() if is_task(m.name)]
    elif kind == "runtimes":
        names = [r.label for r in records().values()]
    else:
        raise ValueError(f"no list {kind!r}: maps, methods, standard, metrics, tasks or runtimes")
    return ", ".join(names)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def spans(text: str) -> list[tuple[str, str]]:
    """(kind, text) of every marked list in a document."""
    return SPAN.findall(text)


def rewritten(text: str) -> str:
    return SPAN.sub(lambda m: f"<!-- list:{m.group(1)} -->{render(m.group(1))}<!-- /list -->", text)


if __name__ == "__main__":
    for path in documents():
        text = path.read_text()
        if rewritten(text) != text:
            path.write_text(rewritten(text))
            print(f"rewrote {path.relative_to(ROOT)}", file=sys.stderr)
