"""advise's task guard: Welch's unpaired bound, the exclusion it makes, its line in the error budget, and the
whole command on the pre-scaled built-in model (its shipped length holds a RULER prompt)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import ttest_ind
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.tuning.error_budget import error_budget
from ropecli.tuning.task_guard import LEVEL, guard_row, welch
from ropecli.tuning.tournament import constraint_breaks


def test_welch_bound_is_scipys():
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.normal(1, 2, 7), rng.normal(0, 0.5, 12)
        w = welch(list(x), list(y))
        ci = ttest_ind(x, y, equal_var=False, alternative="greater").confidence_interval(1 - LEVEL)
        assert w["lower"] == pytest.approx(ci.low, rel=1e-10)


def _result(values, length):
    return SimpleNamespace(values=list(values), len=length, answer_nll=float(np.mean(values)), gain=None)


def test_a_candidate_shown_worse_is_out_and_not_shown_worse_stays():
    ref = _result([2.0, 2.2, 1.8, 2.1, 1.9, 2.0], 1024)
    bad = guard_row("niah-single", _result([9.0, 9.5, 8.7, 9.2, 8.9, 9.1], 2048), ref, 0.01)
    noisy = guard_row("niah-single", _result([1.0, 9.0, 2.0, 8.0, 1.5, 0.5], 2048), ref, 0.01)
    assert bad["worse"] and not noisy["worse"]  # noisy: a higher mean, but not shown worse
    row = {"objective": 3.0, "short_kl": 0.0, "short_rise_percent": 0.0, "task_guard": bad}
    assert any("niah-single at 2048 shown worse" in w for w in constraint_breaks(row, None, None, None))
    assert not constraint_breaks({**row, "task_guard": noisy}, None, None, None)
    budget = error_budget({"rows": [{"candidate": "a", "task_guard": bad}, {"candidate": "b", "task_guard": noisy}],
                           "test_level": 0.0125})
    fam = next(f for f in budget["families"] if f["family"] == "niah-single guard")
    assert fam["rate"] == pytest.approx(2 * LEVEL)  # one test per candidate guarded


def test_advise_with_a_task_guard_on_the_prescaled_model(tmp_path):
    out = CliRunner().invoke(app, ["advise", "--model", "builtin-llama3", "--len", "2048", "--candidates",
                                   "native,native+yarn,yarn", "--task-guard", "niah-single", "--samples", "2",
                                   "--depths", "0,1", "--out", str(tmp_path / "a"), "--cache-dir", str(tmp_path / "c"),
                                   "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    winner = next(r for r in res["rows"] if r["candidate"] == res["winner"])
    g = winner["task_guard"]
    assert g["len"] == 2048 and g["reference_len"] == 1024 and g["task"] == "niah-single"
    assert "niah-single guard:" in res["verdict"] and res["constraints"]["task_guard"] == "niah-single"
    assert any(f["family"] == "niah-single guard" for f in res["error_budget"]["families"])


def test_a_task_guard_that_cannot_fit_the_shipped_length_is_one_line(tmp_path):
    out = CliRunner().invoke(app, ["advise", "--len", "1024", "--task-guard", "niah-single", "--no-cache",
                                   "--out", str(tmp_path / "a")])
    assert out.exit_code == 1 and "--task-guard niah-single" in out.output and "Ls = 256" in out.output
    assert "Traceback" not in out.output
