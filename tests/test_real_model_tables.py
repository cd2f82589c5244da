"""docs/real-model.md's measured tables are ropecli's own JSON: every row that measurements/tables.py
renders from measurements/smollm2/*.json stands in the page as it is printed (no model needed)."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "real-model.md"
TABLES = runpy.run_path(str(ROOT / "measurements" / "tables.py"))  # not __main__: defines, prints nothing


def printed(render, *args) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        render(*args)
    return out.getvalue().splitlines()


def rows(render, *args) -> list[str]:
    return [line for line in printed(render, *args) if line.startswith("| ") and not line.startswith("|---")]


@pytest.mark.parametrize("render, args", [
    ("ppl_table", ("compare-16k",)),
    ("kl_table", ("kl-4k",)),
    ("kl_table", ("kl-4k-searched",)),
    ("passkey_table", ("passkey-16k",)),
    ("search_rows", ()),
], ids=["compare-16k", "kl-4k", "kl-4k-searched", "passkey-16k", "searches"])
def test_each_measured_row_is_in_the_page(render, args):
    found = rows(TABLES[render], *args)
    assert found, f"{render}{args}: no JSON in measurements/smollm2/"
    page = PAGE.read_text()
    missing = [line for line in found if line not in page]
    assert not missing, "docs/real-model.md lacks (rerun python measurements/tables.py):\n" + "\n".join(missing)


def test_the_searches_each_have_a_held_out_verdict():
    searches = sorted((ROOT / "measurements" / "smollm2").glob("search-*.json"))
    assert {p.stem for p in searches} >= {"search-mixed-clamped", "search-yarn", "search-llama3"}
    page = PAGE.read_text()
    verdicts = [x for x in printed(TABLES["search_rows"]) if x.startswith("winner − best deployed")]
    assert len(verdicts) == len(searches)
    for line in verdicts:
        assert line in page
