"""The SmolLM2 measurement pages' tables (docs/measurements/smollm2*.md) are ropecli's own JSON: every row that
measurements/tables.py renders from measurements/smollm2/*.json stands in those pages as it is printed (no model
needed)."""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import pytest

from ropecli.evaluation.stats import separation

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "measurements").glob("smollm2*.md"))



def page_text() -> str:
    """The SmolLM2 pages as one text: a table may stand on any of them."""
    return "\n".join(p.read_text() for p in PAGES)
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
    ("key_table", ("tokens-16k", "tokens-16k-winner")),
    ("key_rules_rows", ()),
    ("workload_rows", ("workload-short",)),
    ("workload_rows", ("workload-long",)),
    ("workload_rows", ("workload-decode",)),
    ("advise_rows", ("advise-16k",)),
    ("tasks_rows", ("tasks-8k",)),
    ("tasks_rows", ("tasks-16k",)),
    ("tasks_rows", ("tasks",)),
    ("tasks_rows", ("maps-16k",)),
    ("ppl_table", ("maps-16k-ppl",)),
    ("tasks_rows", ("maps-16k-llamacpp",)),
    ("advise_rows", ("advise-16k-maps",)),
    ("published_rows", ()),
    ("lm_eval_rows", ("lm-eval-niah-8192",)),
    ("lm_eval_rows", ("lm-eval-niah-16384",)),
    ("bos_rows", ()),
    ("scores_rows", ("passkey-scores-8k",)),
    ("passkey_table", ("lampe-16k",)),
], ids=["compare-16k", "kl-4k", "kl-4k-searched", "passkey-16k", "searches", "key-tokens-16k", "key-rules-8k",
        "workload-short", "workload-long", "workload-decode", "advise-16k", "tasks-8k", "tasks-16k",
        "tasks-with-ppl", "maps-16k", "maps-16k-ppl", "maps-16k-llamacpp", "advise-16k-maps", "published-passkey", "lm-eval-8k", "lm-eval-16k", "bos", "passkey-scores-8k", "lampe-16k"])
def test_each_measured_row_is_in_the_page(render, args):
    found = rows(TABLES[render], *args)
    assert found, f"{render}{args}: no JSON in measurements/smollm2/"
    page = page_text()
    missing = [line for line in found if line not in page]
    assert not missing, "docs/measurements/smollm2*.md lack (rerun python measurements/tables.py):\n" + "\n".join(missing)


def test_the_searches_each_have_a_held_out_verdict():
    searches = sorted((ROOT / "measurements" / "smollm2").glob("search-*.json"))
    assert {p.stem for p in searches} >= {"search-mixed-clamped", "search-yarn", "search-llama3"}
    page = page_text()
    verdicts = [x for x in printed(TABLES["search_rows"]) if x.startswith("winner − best deployed")]
    assert len(verdicts) == len(searches)
    for line in verdicts:
        assert line in page


def test_the_key_token_separation_and_rankings_are_in_the_page():
    """docs/measurements/smollm2.md's |Δ|/SE medians and the two rankings are what the stored windows give."""
    lines = [x for x in printed(TABLES["key_table"], "tokens-16k", "tokens-16k-winner")
             if x.startswith(("median |Δ|/SE", "ranked by"))]
    assert len(lines) == 3
    page = page_text()
    assert all(line in page for line in lines), lines


def test_the_task_rank_agreement_lines_are_in_the_page():
    """Each task's rank correlation with PPL and key PPL at L and 2L, as the stored run gives it."""
    lines = [x for x in printed(TABLES["tasks_rows"], "tasks") if "Spearman's rho" in x]
    assert len(lines) == 8
    page = page_text()
    assert all(line in page for line in lines), lines


def test_separation_counts_pairs_and_orders_by_ratio():
    values = {"a": [1.0, 2.0, 3.0, 4.0], "b": [1.1, 2.1, 3.2, 4.1], "c": [2.0, 3.1, 3.9, 5.0], "d": [float("inf")] * 4}
    s = separation(values)
    assert [(p["a"], p["b"]) for p in s["pairs"]] == [("a", "b"), ("a", "c"), ("b", "c")]  # d (diverged) left out
    ab = s["pairs"][0]
    assert ab["ratio"] == pytest.approx(0.125 / (0.05 / 2))  # mean 0.125, sd 0.05, 4 units
    assert s["median_ratio"] == pytest.approx(sorted(p["ratio"] for p in s["pairs"])[1])


GEMMA3 = runpy.run_path(str(ROOT / "measurements" / "gemma3_tables.py"))  # docs/measurements/gemma3.md's tables


@pytest.mark.parametrize("render, args", [
    ("passkey_rows", ("passkey-49152",)),
    ("ppl_rows", ("ppl-65536",)),
    ("memory_rows", (["passkey-49152", "ppl-65536", "smollm2-memory-16384"],)),
], ids=["gemma3-passkey-48k", "gemma3-ppl-64k", "gemma3-memory"])
def test_each_gemma3_row_is_in_its_page(render, args):
    """Gemma 3 270M past its length (measurements/gemma3.sh): every rendered row stands in docs/measurements/gemma3.md,
    and every run's measured peak is within 1.3x of the estimate it printed (under a map: every run here runs one)."""
    found = rows(GEMMA3[render], *args)
    assert found, f"{render}{args}: no JSON in measurements/gemma3/"
    page = (ROOT / "docs" / "measurements" / "gemma3.md").read_text()
    missing = [line for line in found if line not in page]
    assert not missing, "docs/measurements/gemma3.md lacks (rerun python measurements/gemma3_tables.py):\n" + "\n".join(missing)
    if render == "memory_rows":
        ratios = [float(line.split("|")[7]) for line in found[1:]]  # under the header
        assert all(1 / 1.3 <= x <= 1.3 for x in ratios), ratios
