"""`ropecli search` (issue "Search beyond b in [0, 1]"): optimizers on injected objectives, held-out
windows, resume, bad input."""

import json

import numpy as np
import pytest

from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.corpus import held_out_plays
from ropecli.evaluation.data import load_documents
from ropecli.evaluation.evaluator import Evaluator
from ropecli.rope.geometry import Geometry
from ropecli.spec import make_spec
from ropecli.tuning.optimizers import min_budget, optimize
from ropecli.tuning.space import Dim, parse_vary, start_point

from helpers import runner

GEOM = Geometry(64, 1e4, 256, 8.0)  # the built-in model's geometry at 8 L


@pytest.mark.parametrize("optimizer", ["nelder-mead", "powell", "grid"])
def test_2d_search_lands_on_a_known_optimum_within_budget(optimizer):
    opt = (0.3, 0.7)
    f = lambda x: (x[0] - opt[0]) ** 2 + 2 * (x[1] - opt[1]) ** 2 + 0.5 * (x[0] - opt[0]) * (x[1] - opt[1])  # noqa: E731
    points = optimize(f, 2, 30, optimizer, [0.9, 0.1]).points
    assert len(points) <= 30
    best, _ = min(points, key=lambda p: p[1])
    tol = 0.1 if optimizer == "grid" else 0.02  # a 5 x 5 grid has spacing 0.25
    assert abs(best[0] - opt[0]) <= tol and abs(best[1] - opt[1]) <= tol


def test_1d_golden_section_within_budget():
    points = optimize(lambda x: (x[0] - 0.613) ** 2, 1, 14, "auto").points
    assert len(points) == 14 and abs(min(points, key=lambda p: p[1])[0][0] - 0.613) < 0.005


def test_budget_is_a_hard_cap_and_repeats_are_free():
    calls = []
    points = optimize(lambda x: calls.append(x) or (x[0] - 0.2) ** 2 + (x[1] - 0.4) ** 2, 2, 9, "nelder-mead").points
    assert len(calls) == len(points) == 9
    assert len({tuple(p) for p, _ in points}) == 9


def test_dims_map_to_the_unit_interval():
    d = Dim("beta_fast", 2.0, 128.0, log=True)
    assert d.value(0) == pytest.approx(2.0) and d.value(1) == pytest.approx(128.0) and d.value(0.5) == pytest.approx(16.0)
    assert d.unit(16.0) == pytest.approx(0.5)
    lin = Dim("b", 0.0, 8.0)
    assert lin.value(0.125) == 1.0 and lin.unit(4.0) == 0.5


def test_parse_vary_defaults_and_start_at_the_critical_pair():
    dims = parse_vary(["b", "critical"], "mixed", GEOM)
    assert [(d.name, d.lo, d.hi) for d in dims] == [("b", 0.0, 8.0), ("critical", 1.0, 32.0)]
    assert parse_vary(["b"], "mixed", GEOM)[0].hi == 1.0  # alone, b keeps the seed's [0, 1]
    x0 = start_point("mixed", dims, {}, GEOM)
    assert dims[0].value(x0[0]) == 1.0 and dims[1].value(x0[1]) == 14.0  # b = 1, m_c = critical pair of d=64, L=256
    y = parse_vary(["beta_fast", "beta_slow=0.5:4"], "yarn", GEOM)
    assert y[0].log and (y[1].lo, y[1].hi) == (0.5, 4.0)
    assert dims[0].name == "b" and start_point("yarn", y, {}, GEOM)[0] == pytest.approx(y[0].unit(32.0))


@pytest.mark.parametrize("items, method, needle", [
    (["x"], "mixed", "has no such parameter"),
    (["b=2:1"], "mixed", "lower bound must be below"),
    (["b=0:20"], "mixed", "leaves mixed's domain"),
    (["critical=1:40"], "mixed", "leaves mixed's domain"),
    (["b=a:b"], "mixed", "NAME=LO:HI"),
    (["beta_fast=0:8"], "yarn", "log scale"),
    (["b"], "pi", "has no such parameter"),
    (None, "mixed", "nothing to search"),
    (["b", "b"], "mixed", "given twice"),
])
def test_parse_vary_errors(items, method, needle):
    with pytest.raises(RopeCliError, match=needle):
        parse_vary(items, method, GEOM)


def test_min_budget():
    assert min_budget(1) == 4 and min_budget(2) == 7
    with pytest.raises(RopeCliError, match="below the minimum 7"):
        optimize(lambda x: 0.0, 2, 6)


# --- held-out windows -----------------------------------------------------------------------------

def test_held_out_windows_come_from_other_documents(tiny_dir):
    lm = load_model(tiny_dir)
    ev = Evaluator.over(lm, samples=3, cache=EvalCache(enabled=False))
    held = ev.held_out(4)
    searched, kept = ev.inputs.windows(192).ids, held.inputs.windows(192).ids
    names_s, names_h = set(ev.inputs.windows(192).names), set(held.inputs.windows(192).names)
    assert names_s and names_h and not names_s & names_h  # five plays: the searched and the held-out ones differ
    assert "held out by document" in held.inputs.split_note(192)
    docs, _ = load_documents(None)
    # windows are non-overlapping cuts of documents: no held-out window repeats a searched one
    assert not {r.tobytes() for r in searched} & {r.tobytes() for r in kept}
    assert held.inputs.windows(192).fingerprint != ev.inputs.windows(192).fingerprint and len(docs) == 5
    assert [p.key for p in held.inputs.prompts(192, "passkey-text")] != [p.key for p in ev.inputs.prompts(192, "passkey-text")][: len(held.inputs.prompts(192, "passkey-text"))]


def test_one_document_is_held_out_by_window_and_says_so(tiny_dir, tmp_path):
    play = tmp_path / "one.txt"
    play.write_text(next(iter(held_out_plays().values())))
    lm = load_model(tiny_dir)
    ev = Evaluator.over(lm, [str(play)], samples=3, cache=EvalCache(enabled=False))
    held = ev.held_out(4)
    both = Evaluator.over(lm, [str(play)], samples=7, cache=EvalCache(enabled=False))
    searched, kept, everything = ev.inputs.windows(192).ids, held.inputs.windows(192).ids, both.inputs.windows(192).ids
    np.testing.assert_array_equal(np.concatenate([searched, kept]), everything)  # the next windows of one document
    assert "held out by window" in held.inputs.split_note(192)


# --- the command -------------------------------------------------------------------------------------

def search(tiny_dir, cache, *extra):
    return runner.invoke(app, ["search", "--model", tiny_dir, "--len", "192", "--samples", "2", "--vary", "b",
                               "--vary", "critical", "--budget", "8", "--cache-dir", str(cache), "--json", *extra])


def test_search_end_to_end(tiny_dir, tmp_path):
    r = search(tiny_dir, tmp_path / "c", "--plot", str(tmp_path / "map.png"), "--reference", "mixed:b=0.9",
               "--export-config", str(tmp_path / "rope.json"))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["optimizer"] == "nelder-mead" and out["search_evaluations"] <= 8
    assert out["held_out_first_window"] == 0 and out["held_out_windows"] == 2  # held out by play: from window 0
    assert out["held_out_split"].startswith("held out by document")
    labels = [row["label"] for row in out["held_out"]["rows"]]
    assert labels[0] == out["best_label"] and "mixed(b=0.9)" in labels and "llama3(low_freq_factor=1, high_freq_factor=4)" in labels
    assert out["held_out"]["verdict"] and (tmp_path / "map.png").stat().st_size > 10_000
    best = min((e for e in out["evaluations"] if not e.get("violates_guard")), key=lambda e: e["objective"])
    assert out["best_params"] == best["params"]
    block = json.loads((tmp_path / "rope.json").read_text())  # the winner's rope_parameters
    k = max(1.0, 192 / out["train_len"])
    geom = Geometry(out["rotary_dim"], out["base"], out["train_len"], k)
    winner = make_spec("mixed", out["best_params"]).schedule(geom)
    assert block["rope_parameters"]["rope_type"] == "longrope" and block["max_position_embeddings"] == geom.target_len
    assert block["rope_parameters"]["long_factor"] == pytest.approx(list(winner.factors), rel=1e-12)


def test_llama3_points_outside_the_joint_domain_are_infeasible_not_fatal(tiny_dir, tmp_path):
    # both factors searched over overlapping ranges: the optimizer proposes high <= low, which llama3
    # rejects; such a point scores +inf (no forward pass) and the search goes on
    r = runner.invoke(app, ["search", "--model", tiny_dir, "--len", "192", "--samples", "2", "--method", "llama3",
                            "--vary", "low_freq_factor=1:8", "--vary", "high_freq_factor=1:8", "--optimizer", "grid",
                            "--budget", "9", "--cache-dir", str(tmp_path / "c"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    bad = [e for e in out["evaluations"] if e.get("infeasible")]
    good = [e for e in out["evaluations"] if not e.get("infeasible")]
    assert bad and good and all(e["objective"] is None for e in bad)
    assert all(e["params"]["high_freq_factor"] <= e["params"]["low_freq_factor"] for e in bad)
    assert out["best_params"]["high_freq_factor"] > out["best_params"]["low_freq_factor"]


@pytest.mark.parametrize("optimizer", ["nelder-mead", "powell"])
def test_the_start_is_evaluated_at_the_stock_defaults_exactly(optimizer):
    # llama3's defaults (1, 4) sit at 1/3 of their log ranges: rounded to 6 decimals they were evaluated at
    # high_freq_factor = 3.9999945, a point that missed the stock llama3's cached windows
    dims = [Dim("low_freq_factor", 0.25, 8.0, True), Dim("high_freq_factor", 1.0, 64.0, True)]
    x0 = [d.unit(v) for d, v in zip(dims, (1.0, 4.0))]
    seen = []

    def f(u):
        seen.append([d.value(x) for d, x in zip(dims, u)])
        return (u[0] - 0.6) ** 2 + (u[1] - 0.7) ** 2

    trace = optimize(f, 2, 12, optimizer, x0)
    assert seen[0] == [1.0, 4.0]  # exactly the stock schedule
    assert trace.points[0][0] == x0
    assert any(p[1] == 4.0 and p[0] != 1.0 for p in seen)  # a vertex that moves only the other coordinate keeps 4
    assert min(v for _, v in trace.points) < 0.01  # and the search still goes where f is lowest
