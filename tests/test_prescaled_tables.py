"""docs/measurements/prescaled.md's tables of the pre-scaled built-in model are ropecli's own JSON (measurements/prescaled/, made by
measurements/prescaled.sh): every row measurements/prescaled_tables.py renders stands in the page as printed; and
the claims the page makes of them hold on that JSON (native best or shown equivalent within Ls, none shown worse)."""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropecli.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "measurements" / "prescaled.md").read_text()
TABLES = runpy.run_path(str(ROOT / "measurements" / "prescaled_tables.py"))


def printed(render, *args) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        TABLES[render](*args)
    return [line for line in out.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("render, args", [("compare_rows", ("within-Ls",)), ("compare_rows", ("at-2Ls",)),
                                          ("advise_rows", ())])
def test_page_shows_the_measured_rows(render, args):
    missing = [line for line in printed(render, *args) if line not in PAGE]
    assert not missing, f"docs/measurements/prescaled.md lacks {missing[:3]}: rerun python measurements/prescaled_tables.py"


def test_within_Ls_native_is_best_or_equivalent_and_none_is_worse():
    out = json.loads((ROOT / "measurements" / "prescaled" / "within-Ls.json").read_text())
    assert out["shipped"]["rope_type"] == "llama3" and (out["L0"], out["Ls"]) == (256, 1024)
    by = {(r["label"], r["len"]): r for r in out["results"] if r["metric"] == "ppl"}
    for n in (512, 1024):
        assert by[("native", n)]["vs_best"]["verdict"] in ("best", "equivalent")
        assert by[("none", n)]["vs_best"]["verdict"] == "worse"


def test_advise_ranks_both_families_and_says_which_won():
    out = json.loads((ROOT / "measurements" / "prescaled" / "advise.json").read_text())
    names = {r["candidate"] for r in out["rows"]}
    assert {"native", "native+yarn", "native+yarn-tuned", "llama3", "yarn"} <= names
    fam = out["families"]
    assert fam["composed_best"].startswith("native+") and not fam["rederived_best"].startswith("native")
    assert fam["line"] in out["verdict"]
    assert out["winner_spec"]["composed"] is True


def test_the_exported_advise_winner_verifies(tmp_path):
    """advise's export command for transformers, rerun into a fresh folder, passes `ropecli verify` (the reload's PPL
    on a 2 x Ls window against ropecli's patched model)."""
    out = json.loads((ROOT / "measurements" / "prescaled" / "advise.json").read_text())
    command = next(e["command"] for e in out["exports"] if e["runtime"] == "transformers")
    args = shlex.split(command)[1:]
    args[args.index("--out") + 1] = str(tmp_path / "hf")
    run = CliRunner().invoke
    r = run(app, args)
    assert r.exit_code == 0, r.output
    r = run(app, ["verify", str(tmp_path / "hf"), "--run-len", "2048", "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 0 and "transformers: OK" in r.output, r.output
