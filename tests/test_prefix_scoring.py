"""Every length from one pass: in an evaluation of several lengths the windows at a shorter length are the
first tokens of the longest ones, and a schedule that is the same at every length (a static method at one
k) scores all of them in one forward pass per window. The numbers equal separate evaluations of the same
tokens (within 1e-5); dynamic NTK and k = n / L still run per length; each length is cached on its own."""

import json

import pytest

from ropecli.cli.app import app
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.evaluator import Evaluator
from ropecli.spec import make_spec

from helpers import runner

LENGTHS = [64, 128, 256]


def compare(tiny_dir, long_text_file, *args):
    r = runner.invoke(app, ["compare", "--model", tiny_dir, "--data", long_text_file, *[x for n in LENGTHS for x in ("--len", str(n))],
                            "--samples", "3", "--no-cache", "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_static_schedules_cost_one_pass_per_window_and_equal_separate_runs(tiny, tiny_dir, long_text_file):
    out = compare(tiny_dir, long_text_file, "--method", "pi,yarn,mixed,ntk-fixed", "--k", "4")
    assert out["forward_passes"] == 4 * 3  # one per window and schedule, not one per length
    ev = Evaluator.over(tiny, [long_text_file], samples=3, cache=EvalCache(enabled=False))
    for row in out["results"]:
        spec = make_spec(row["method"], row["params"], factor=4.0)
        alone = ev.evaluate(spec, row["len"], span=max(LENGTHS))  # the same tokens, a forward pass of their own
        assert alone.nll == pytest.approx(row["nll"], rel=1e-5, abs=1e-5)
        assert alone.window_nll == pytest.approx(row["window_nll"], rel=1e-5, abs=1e-5)
        assert alone.position_nll == pytest.approx(row["position_nll"], rel=1e-5, abs=1e-5)
    assert ev.forward_passes == 4 * 3 * len(LENGTHS)


def test_schedules_that_change_with_the_length_run_per_length(tiny_dir, long_text_file):
    assert compare(tiny_dir, long_text_file, "--method", "dynamic", "--k", "4")["forward_passes"] == 3 * len(LENGTHS)
    # k = n / L at each length (no --k): 64 = L runs at k = 1, 128 and 256 each at their own k
    assert compare(tiny_dir, long_text_file, "--method", "yarn")["forward_passes"] == 3 * len(LENGTHS)


def test_shorter_windows_are_the_first_tokens_of_the_longest(tiny, long_text_file):
    ev = Evaluator.over(tiny, [long_text_file], samples=3)
    spanned = ev.inputs.spanning(256)
    for n in (64, 128):
        assert (spanned.windows(n).ids == spanned.windows(256).ids[:, :n]).all()
        assert spanned.windows(n).names == spanned.windows(256).names


def test_each_length_is_cached_as_if_it_ran_alone(tiny, long_text_file, tmp_path):
    cache = EvalCache(str(tmp_path / "c"))
    spec = make_spec("yarn", factor=4.0)
    first = Evaluator.over(tiny, [long_text_file], samples=3, cache=cache)
    together = first.evaluate_lengths(spec, LENGTHS)
    assert first.forward_passes == 3
    again = Evaluator.over(tiny, [long_text_file], samples=3, cache=cache)
    for n, r in zip(LENGTHS, together):
        alone = again.evaluate(spec, n, span=max(LENGTHS))
        assert alone.cached and alone.nll == r.nll
    assert again.forward_passes == 0
