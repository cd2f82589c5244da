"""The lists of maps, methods, metrics and runtimes that README.md and docs/ name come from the registries
(tests/docs_lists.py): every marked list equals its render, README.md and docs/README.md carry the lists a reader
meets first, the reference tables hold one row per registered name (and none for a name that is gone), and the maps
package's own docstring names every map. A registry changed without its docs fails here; `python
tests/docs_lists.py` rewrites the marked lists."""

import re

import pytest

import ropecli.maps
from ropecli.evaluation.metrics import REGISTRY as METRICS
from ropecli.evaluation.metrics import is_task
from ropecli.maps.position_maps import MAPS, register_map
from ropecli.rope.methods import REGISTRY as METHODS

from docs_lists import ROOT, documents, render, rewritten, spans


def test_every_marked_list_is_its_registry():
    found = {}
    for path in documents():
        text = path.read_text()
        for kind, said in spans(text):
            found.setdefault(kind, []).append(path.name)
            assert said == render(kind), f"{path.relative_to(ROOT)}: list:{kind} says {said!r}; run python tests/docs_lists.py"
    assert set(found) >= {"maps", "methods", "runtimes", "standard"}, found
    for first in ("README.md",):
        kinds = {k for k, _ in spans((ROOT / first).read_text())}
        assert kinds >= {"maps", "methods", "runtimes"}, (first, kinds)
    assert {k for k, _ in spans((ROOT / "docs" / "README.md").read_text())} >= {"maps", "methods", "runtimes"}


def test_a_map_registered_without_its_docs_fails(monkeypatch):
    """The red side: a new map (a title no document names) changes the render, so every marked list of maps is stale."""
    text = (ROOT / "README.md").read_text()
    monkeypatch.setitem(MAPS, "toy", MAPS["none"])
    register_map("toy", "a toy", title="Toy-Map")(lambda: ())
    assert "Toy-Map" in render("maps") and rewritten(text) != text
    assert all(said != render("maps") for kind, said in spans(text) if kind == "maps")


def rows(path, pattern: str) -> list[str]:
    """The first cell's `names` of a document's table rows."""
    return [name for line in (ROOT / path).read_text().splitlines() if line.startswith("| `")
            for name in re.findall(pattern, line.split("|")[1])]


@pytest.mark.parametrize("path, names, pattern", [
    ("docs/methods.md", lambda: [m for m in METHODS], r"`([a-z0-9-]+)"),
    ("docs/methods.md", lambda: [m for m in MAPS], r"`([a-z0-9-]+)"),
    ("docs/tasks.md", lambda: [m.name for m in METRICS.values() if is_task(m.name)], r"`([a-z0-9-]+)`"),
])
def test_the_reference_tables_hold_one_row_per_registered_name(path, names, pattern):
    listed = rows(path, pattern)
    missing = [n for n in names() if n not in listed]
    assert not missing, f"{path} has no row for {missing}"


def test_the_reference_tables_name_nothing_that_is_gone():
    known = set(METHODS) | set(MAPS) | {"native+METHOD", "pi", "linear"}
    listed = rows("docs/methods.md", r"`([a-z0-9-]+)")
    assert not [n for n in listed if n not in known and not n.startswith("native")], listed
    tasks = {m.name for m in METRICS.values() if is_task(m.name)}
    assert not [n for n in rows("docs/tasks.md", r"`([a-z0-9-]+)`") if n not in tasks and not n.startswith("-")]


def test_the_maps_package_names_every_map():
    assert render("maps") in " ".join(ropecli.maps.__doc__.split())
