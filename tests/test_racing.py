"""Racing (`ropecli.tuning.racing`): the error rate of dropping the true best in simulated races, the
savings on a clearly worse candidate, and the statistics it rests on (clustered SEs, windows needed)."""

import math

import numpy as np
import pytest

from ropecli.evaluation.stats import (clustered_se, clusters_over_lengths, paired_difference, tie_answer,
                                      windows_needed)
from ropecli.tuning.held_out import clopper_pearson
from ropecli.tuning.racing import ALPHA, looks, race, worse_test


def simulated(means: dict[str, float], rng, window_sd: float = 0.5, paired_sd: float = 0.05, docs: int | None = None):
    """score(name, n) of a race with known means: per-window values = text difficulty (shared by every
    candidate: what pairing removes) + the candidate's mean + its own noise; with `docs`, windows come
    round-robin from that many documents, each with its own shift per candidate (clustered noise)."""
    difficulty = rng.normal(0, window_sd, 64)
    own = {k: rng.normal(0, paired_sd, 64) for k in means}
    doc_of = [i % docs for i in range(64)] if docs else None
    doc_shift = {k: rng.normal(0, paired_sd, docs) for k in means} if docs else None

    def score(name, n):
        v = difficulty[:n] + means[name] + own[name][:n]
        if docs:
            v = v + doc_shift[name][doc_of[:n]]
        return list(v), (doc_of[:n] if docs else None)

    return score


def test_looks_double_up_to_the_maximum():
    assert looks(4, 16) == [4, 8, 16]
    assert looks(4, 12) == [4, 8, 12]
    assert looks(3, 3) == [3]
    assert looks(1, 5) == [2, 4, 5]  # a paired test needs two windows


@pytest.mark.parametrize("docs", [None, 4])
def test_the_true_best_is_dropped_at_most_at_the_stated_rate(docs):
    """1,200 races of 6 candidates, the best ahead of the next by only half a paired standard deviation
    and the rest spread out: whatever the looks see, the true best survives in >= 1 - alpha of them."""
    rng = np.random.default_rng(0)
    means = {"best": 0.0, "close": 0.025, "a": 0.05, "b": 0.1, "c": 0.3, "d": 1.0}
    races, lost, decided, spent = 1200, 0, 0, 0
    for _ in range(races):
        out = race(simulated(means, rng, docs=docs), list(means), start=4, max_windows=32)
        lost += out["candidates"]["best"]["status"].startswith("dropped")
        decided += out["decided"]
        spent += out["windows_spent"]
    rate = lost / races
    # the bound is alpha; the binomial noise of 1,200 races at rate alpha is ~0.006, so allow 2 sigma above it
    assert rate <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / races), rate
    # and it spent well under the full 32 windows each (measured: 38 % of them, 62 % with 4 documents)
    assert spent < races * len(means) * 32 * (0.75 if docs else 0.5)
    assert decided > 0 or docs  # some races are decided outright


def test_without_the_correction_repeated_looks_drop_the_best_far_too_often():
    """Four equally good candidates: a 5% test at every look against every leader drops a best one in
    ~20% of races; the corrected race in under 5%. The correction is what the guarantee rests on."""
    means = {"best": 0.0, "same1": 0.0, "same2": 0.0, "same3": 0.0, "worse": 0.3, "broken": 1.0}
    plan, K = looks(4, 32), len(means)

    def rate(alpha):
        rng, lost = np.random.default_rng(0), 0
        for _ in range(1000):
            out = race(simulated(means, rng), list(means), start=4, max_windows=32, alpha=alpha)
            lost += out["candidates"]["best"]["status"].startswith("dropped")
        return lost / 1000

    assert rate(ALPHA * len(plan) * (K - 1)) > 0.1  # naive: 5% per test
    assert rate(ALPHA) <= ALPHA


def test_a_clearly_worse_candidate_is_dropped_after_the_first_round():
    rng = np.random.default_rng(1)
    means = {"good": 0.0, "fine": 0.01, "broken": 2.0}  # an injected objective makes "broken" 2 nats worse
    out = race(simulated(means, rng), list(means), start=4, max_windows=16)
    assert out["candidates"]["broken"]["dropped_round"] == 1 and out["candidates"]["broken"]["windows"] == 4
    assert out["rounds"][0]["dropped"] == ["broken"]


def test_a_tie_is_answered_with_the_windows_it_needs():
    rng = np.random.default_rng(2)
    means = {"x": 0.0, "y": 0.0}  # identical: no window count resolves them
    out = race(simulated(means, rng), list(means), start=4, max_windows=8)
    assert not out["decided"] and out["tied"] and "tied after" in out["outcome"]
    row = out["candidates"][out["tied"][0]]
    assert row["status"] == "tied" and "tie" in row and row["tie"]["n"] == row["windows"]


def test_an_ineligible_leader_is_excluded_and_does_not_drop_others():
    rng = np.random.default_rng(3)
    means = {"cheat": -1.0, "good": 0.0, "bad": 1.0}
    out = race(simulated(means, rng), list(means), start=4, max_windows=8, eligible=lambda n: n != "cheat")
    assert out["candidates"]["cheat"]["status"] == "excluded" and out["leader"] == "good"
    assert out["candidates"]["bad"]["dropped_round"] == 1


def test_worse_test_is_one_sided_and_handles_divergence():
    assert worse_test([1.1, 1.2, 1.15, 1.1], [1.0, 1.0, 1.0, 1.0], None, 0.05)["worse"]
    assert not worse_test([0.9, 0.8, 0.85, 0.9], [1.0, 1.0, 1.0, 1.0], None, 0.05)["worse"]  # better is not worse
    assert worse_test([math.inf, 1.0], [1.0, 1.0], None, 0.05)["worse"]


# --- the statistics -----------------------------------------------------------------------------

def test_clustered_se_equals_the_ordinary_one_without_shared_documents():
    d = np.array([0.1, -0.2, 0.05, 0.3, 0.0])
    iid = d.std(ddof=1) / math.sqrt(5)
    assert clustered_se(d, None) == (pytest.approx(iid), 4, None)
    assert clustered_se(d, ["a", "b", "c", "d", "e"])[0] == pytest.approx(iid)
    se, df, G = clustered_se(d, ["a", "a", "b", "b", "c"])
    # CR1 by hand: residual sums per document
    r = d - d.mean()
    by_hand = math.sqrt(3 / 2 * ((r[0] + r[1]) ** 2 + (r[2] + r[3]) ** 2 + r[4] ** 2) / 25)
    assert (se, df, G) == (pytest.approx(by_hand), 2, 3)


def test_windows_of_one_document_that_move_together_widen_the_interval():
    x = [1.0, 1.02, 1.5, 1.52, 2.0, 2.01]  # each document's two windows agree: 3 draws, not 6
    y = [0.95, 0.99, 1.52, 1.5, 1.93, 1.98]
    p = paired_difference(x, y, ["a", "a", "b", "b", "c", "c"])
    q = paired_difference(x, y)
    assert p["clustered"] and p["documents"] == 3 and p["se_iid"] == pytest.approx(q["se"])
    assert p["half_width"] > q["half_width"]


def test_clusters_over_lengths_join_windows_sharing_a_document_at_any_length():
    assert clusters_over_lengths([["a", "b", "c"], ["x", "x", "y"]]) == [0, 0, 2]
    assert clusters_over_lengths([None]) is None


def test_windows_needed_matches_the_normal_power_formula():
    # se 0.01 on 4 windows -> per-window sd 0.02; diff 0.01: n = (1.96 + 0.8416)^2 * (0.02 / 0.01)^2 = 31.4
    assert windows_needed(0.01, 0.01, 4) == 32
    assert windows_needed(0.0, 0.01, 4) is None and windows_needed(0.01, None, 4) is None
    p = paired_difference([1.01, 1.03, 0.99, 1.02], [1.0, 1.0, 1.0, 1.0])
    assert not p["distinguishable"] or "windows_needed" not in p
    answer = tie_answer({"n": 4, "diff": 0.0188, "se": 0.012, "distinguishable": False, "windows_needed": 13})
    assert answer == ("tied after 4 windows; resolving a difference of this size (+0.0188) at 95% needs about 13 "
                      "windows (80% power)")


def test_clopper_pearson_brackets_the_rate():
    lo, hi = clopper_pearson(5, 5, 0.05)
    assert lo == pytest.approx(0.025 ** (1 / 5)) and hi == 1.0
    lo, hi = clopper_pearson(0, 10, 0.05)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10))


# --- a search that stops hopeless points early --------------------------------------------------

def test_a_hopeless_search_point_stops_after_half_its_windows_with_a_lower_bound():
    from fakes import ppl_result
    from ropecli.rope.geometry import Geometry
    from ropecli.tuning.search import search_b

    difficulty = np.array([0.3, -0.2, 0.1, -0.4, 0.2, 0.0, 0.15, -0.1])
    taken = []

    def run(specs, lengths, metric="ppl", samples=None):
        n = samples or 8
        rows = []
        for spec in specs:
            b = dict(spec.params).get("b", 0.0)
            base = 3.5 + 4 * (b - 0.7) ** 2 if spec.method == "mixed" else 4.0
            taken.append((spec.label, n))
            rows.append(ppl_result(spec, lengths[0], list(base + difficulty[:n] + 0.002 * np.arange(n))))
        return rows

    geom = Geometry(64, 1e4, 256, 8.0)
    full = search_b(run, geom, [2048], tol=0.01)
    expected = []
    screened = search_b(run, geom, [2048], tol=0.01, windows=8, screen=True, expect=lambda c, m="ppl", s=None: expected.append((c, s)))
    assert screened["best_b"] == full["best_b"]  # the same answer
    stopped = [e for e in screened["evaluations"] if "stopped_early" in e]
    assert stopped and all(e["stopped_early"]["windows"] == 4 for e in stopped)
    truth = {e["b"]: e["objective"] for e in full["evaluations"]}
    best = screened["best_objective"]
    for e in stopped:  # the optimizer saw a lower bound: above the incumbent, below the point's true objective
        assert best < e["objective"] <= truth[e["b"]] + 1e-12
        assert not e["vs_best"]["tied"]
    assert expected == [(-1, 4)] * len(stopped)  # the progress bar hears of every window not taken
