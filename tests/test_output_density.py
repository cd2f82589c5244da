"""Output a new user can read (issue 92, "Density"): compare says what would decide its undecided cells once per
remedy, not once per method; advise's ranking shows every candidate's name whole on an 80-column console; a launch
line of several KB (SGLang's, longrope's factor lists inline) goes to an executable script, the terminal says where."""

import dataclasses
import json
import os
import stat
import subprocess

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ropecli.evaluation.compared import attach_paired
from ropecli.evaluation.metrics import PPL
from ropecli.models.config import BUILTIN_DIR, read_rope_config
from ropecli.report.advice import advice_lines, export_lines
from ropecli.report.tables import compare_table
from ropecli.spec import make_spec
from ropecli.tuning.advise_exports import export_winner
from ropecli.tuning.standings import Standings

from fakes import ppl_result
from helpers import run
from tiny_models import build

LONG_NAME = "mixed(b=0.854102)+selfextend(G=8,W=64)"


def planted_compare() -> list:
    """Five methods at two lengths, close enough to leave most undecided: at 64 each window its own document (more
    documents would decide them), at 128 four windows from each of two documents (more windows would)."""
    rng = np.random.default_rng(1)
    methods = [("none", 0.0), ("pi", 0.01), ("yarn", 0.02), ("ntk-fixed", 0.015), ("llama3", 0.012)]
    base = np.array([3.0, 3.4, 2.8, 3.1, 3.2, 2.9, 3.05, 3.3])
    results = [ppl_result(make_spec(m), 64, list(base[:4] + d + rng.normal(0, 0.05, 4))) for m, d in methods]
    results += [dataclasses.replace(ppl_result(make_spec(m), 128, list(base + d + rng.normal(0, 0.01, 8))),
                                    windows=["a"] * 4 + ["b"] * 4) for m, d in methods]
    return attach_paired(results)


def compare_lines(rows) -> list[str]:
    """compare's lines under its table, as printed (before the terminal wraps them)."""
    out = {"results": rows, "train_len": 32, "kl_factor": None, "model": "planted"}
    labels = list(dict.fromkeys(r.result.label for r in rows))
    return [str(x) for x in compare_table(out, labels, [64, 128]) if isinstance(x, Text)]


def test_compare_says_each_remedy_once_naming_the_methods_that_share_it():
    rows = planted_compare()
    undecided = [r for r in rows if r.vs_best.verdict == "undecided"]
    lines = compare_lines(rows)
    said = [line for line in lines if "would decide" in line]
    assert len(said) == 2, lines  # one per remedy: more documents (64), more windows (128)
    for n, more, line in ((64, "documents", said[0]), (128, "windows", said[1])):
        here = [r for r in undecided if r.result.len == n]
        assert len(here) >= 2 and all(r.vs_best.needs.get(more) for r in here)
        needed = sorted(r.vs_best.needs[more] for r in here)  # the range of what was measured, every method named
        assert f"about {needed[0]}–{needed[-1]} {more} would decide them (80% power)" in line, line
        assert all(r.result.label in line for r in here), line
        assert f"undecided after {here[0].vs_best.n} windows for " in line, line
    assert "not reachable with these 4 documents; add text" in said[0], said[0]
    columns = [line for line in lines if line.startswith("PPL @ 64:")]
    assert len(columns) == 1 and "would decide" not in columns[0], columns  # the column line names them only
    for r in undecided:  # --json keeps each method's own verdict, in words and as numbers
        verdict = r.to_json()["vs_best"]
        assert "would decide it" in verdict["answer"] and verdict["needs"] == r.vs_best.needs


def planted_advice(name: str, method: str = "mixed", params: dict | None = None) -> dict:
    """An advise result (what advice.json holds) whose winner, `method` with `params`, is called `name`, beside a
    tuned YaRN and PI."""
    def row(candidate, label, rank, ppl, verdict, method, params):
        vs = {"best": verdict == "best", "tied": verdict == "best", "diff": None if rank == 1 else 0.01 * rank,
              "half_width": 0.02, "n": 4, "verdict": verdict}
        return {"candidate": candidate, "label": label, "rank": rank, PPL.field: {"512": ppl}, "vs_best": vs,
                "excluded": [], "windows": [0, 1, 2, 3], "short_kl": 0.0123, "short_rise_percent": 1.5,
                "passkey_accuracy": 1.0, "verdict": verdict, "method": method, "params": params, "log_n": False}
    yarn = {"beta_fast": 40.5, "beta_slow": 1.25}
    rows = [row(name, name, 1, 37.69, "best", method, params or {"b": 0.854102}),
            row("yarn-tuned", "yarn(beta_fast=40.5, beta_slow=1.25)", 2, 38.12, "undecided", "yarn", yarn),
            row("pi", "pi", 3, 60.4, "worse", "pi", {})]
    return {"model": "builtin", "train_len": 256, "factor": 2.0, "lengths": [512], "rows": rows, "winner": name,
            "winner_spec": {k: rows[0][k] for k in ("method", "params", "log_n")},
            "winner_label": name, "verdict": "lowest mean log-PPL", "held_out_first_window": 0, "held_out_windows": 4,
            "racing": False, "passkey_measured": True, "notes": [], "rule": "the written rule", "race": None,
            "kl_race": None, "exports": [], "forward_passes": 12, "cache": {"hits": 0}}


def test_advise_table_shows_the_winners_long_name_whole_on_80_columns():
    result = planted_advice(LONG_NAME)
    items = advice_lines(result, "out")
    console = Console(width=80, record=True)
    for table in (x for x in items if isinstance(x, Table)):
        console.print(table)
    drawn = console.export_text().splitlines()
    assert any(LONG_NAME in line for line in drawn), "\n".join(drawn)  # whole, on one line of the table
    top, bottom = next(line for line in drawn if line.startswith("┏")), drawn[-1]
    assert top.endswith("┓") and bottom.endswith("┘"), "\n".join(drawn)  # every column drawn: none pushed off the edge
    schedule = "yarn(beta_fast=40.5, beta_slow=1.25)"  # the schedule a name stands for, said whole under the table
    assert any(f"yarn-tuned = {schedule}" in str(x) for x in items if isinstance(x, Text)), items


def test_a_long_sglang_launch_line_goes_to_an_executable_script(tmp_path):
    out = tmp_path / "sglang.json"
    r = run("export", "--model", "builtin", "--method", "mixed", "--len", "1024", "--to", "sglang", "--out", out)
    assert r.exit_code == 0, r.output
    script = tmp_path / "sglang.launch.sh"
    command = json.loads(run("export", "--model", "builtin", "--method", "mixed", "--len", "1024", "--to", "sglang",
                             "--out", out, "--force", "--json").stdout)["command"]  # --json keeps the line whole
    assert len(command) > 1000 and f"SGLang: launch line written to {script} ({len(command)} characters)" in r.output
    assert all(len(line) < 400 for line in r.output.splitlines()), r.output  # no KB line on the terminal
    assert script.stat().st_mode & stat.S_IXUSR and script.read_text() == f'#!/bin/sh\n{command} "$@"\n'
    fake = tmp_path / "bin"  # the script runs the line as a shell would: the JSON one argument, extra flags passed on
    fake.mkdir()
    (fake / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" "$@"\n')
    (fake / "python").chmod(0o755)
    said = subprocess.run([script, "--port", "30001"], env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"},
                          capture_output=True, text=True, check=True).stdout.splitlines()
    block = json.loads(said[said.index("--json-model-override-args") + 1])
    assert said[0] == "1" and said[-2:] == ["--port", "30001"] and block == json.loads(out.read_text())


def test_a_short_launch_line_stays_on_the_terminal(tmp_path, monkeypatch):
    """SGLang's DCA line names no factor list: a few hundred characters, printed as it is, no script written."""
    monkeypatch.chdir(tmp_path)
    build("qwen2").config.save_pretrained("qwen")
    r = run("export", "--model", "qwen", "--method", "none", "--map", "dca:chunk=48,local=4", "--len", "1024", "--to",
            "sglang", "--out", "o.json", "--json")
    assert r.exit_code == 0, r.output
    command = json.loads(r.stdout)["command"]
    assert command in json.loads(r.stdout)["lines"] and "launch_script" not in json.loads(r.stdout), r.stdout
    assert not list(tmp_path.glob("*.sh"))


def test_advise_says_where_the_sglang_launch_line_went(tmp_path):
    """advise's exports: SGLang's KB launch line in its script (advice.json keeps it whole in `serve`), the terminal
    line says where and how long it is."""
    result = planted_advice("mixed-b", "mixed", {"b": 0.625})
    (tmp_path / "out").mkdir()
    exports = export_winner(Standings.from_json(result), result, read_rope_config(str(BUILTIN_DIR)), None, None,
                            tmp_path / "out")
    sglang = next(e for e in exports if e["runtime"] == "sglang")
    assert sglang["ok"] and len(sglang["serve"]) > 1000, sglang
    script = tmp_path / "out" / "sglang-overrides.launch.sh"
    assert sglang["launch_script"] == str(script) and script.read_text().startswith(f"#!/bin/sh\n{sglang['serve']}")
    lines = export_lines(exports)
    assert f"  serve it: launch line written to {script} ({len(sglang['serve'])} characters)" in lines, lines
    assert all(len(line) < 600 for line in lines), lines
