"""Racing (`ropecli.tuning.racing`) and the paired inference it rests on (`ropecli.evaluation.inference`):
the verdicts (worse / equivalent / undecided), the savings on a clearly worse candidate, the three
inferences checked against hand computation and against simulated variance. The error rates over the
whole grid of fields, documents and serial correlation: tests/test_verdicts.py."""

import math
import zlib

import numpy as np
import pytest

from ropecli.evaluation.inference import paired, t_quantile
from ropecli.evaluation.proportions import clopper_pearson
from ropecli.evaluation.sample_size import projected_se, units_needed
from ropecli.evaluation.stats import paired_difference, tie_answer
from ropecli.report.search_tables import objective_text
from ropecli.rope.geometry import Geometry
from ropecli.rope.target import Target
from ropecli.tuning import racing
from ropecli.tuning.racing import ALPHA, looks, race, worse_test
from ropecli.tuning.search import run_search, scorer, search_b
from ropecli.tuning.simulation import Cell, race_rates, se_calibration
from ropecli.tuning.space import Dim, Effort, SearchSpace

from fakes import ppl_result


def simulated(means: dict[str, float], rng, window_sd: float = 0.5, paired_sd: float = 0.05, docs: int | None = None):
    """score(name, n) of a race with known means: per-window values = text difficulty (shared by every
    candidate: what pairing removes) + the candidate's mean + its own noise, windows round-robin over
    `docs` documents (None: independent units)."""
    difficulty = rng.normal(0, window_sd, 64)
    own = {k: rng.normal(0, paired_sd, 64) for k in means}
    doc_of = [i % docs for i in range(64)] if docs else None

    def score(name, n):
        return [list(difficulty[:n] + means[name] + own[name][:n])], ([doc_of[:n]] if docs else None)

    return score


def test_looks_double_up_to_the_maximum():
    assert looks(4, 16) == [4, 8, 16]
    assert looks(4, 12) == [4, 8, 12]
    assert looks(3, 3) == [3]
    assert looks(1, 5) == [2, 4, 5]  # a paired test needs two windows


def test_a_clearly_worse_candidate_is_dropped_after_the_first_round():
    rng = np.random.default_rng(1)
    means = {"good": 0.0, "fine": 0.01, "broken": 2.0}  # an injected objective makes "broken" 2 nats worse
    out = race(simulated(means, rng), list(means), start=4, max_windows=16)
    assert out["candidates"]["broken"]["dropped_round"] == 1 and out["candidates"]["broken"]["windows"] == 4
    assert out["rounds"][0]["dropped"] == ["broken"]


def test_identical_candidates_are_shown_equivalent_and_the_race_stops():
    rng = np.random.default_rng(2)
    means = {"x": 0.0, "y": 0.0}
    out = race(simulated(means, rng, paired_sd=0.001), list(means), start=4, max_windows=16)
    other = next(n for n in means if n != out["leader"])
    assert out["equivalent"] == [other] and out["decided"] and out["stopped"] == "decided"
    assert out["candidates"][other]["status"] == "equivalent"


def test_a_gap_at_the_margin_stays_undecided_with_what_would_decide_it():
    wobble = [0.02, -0.02, 0.015, -0.015, 0.02, -0.02, 0.015, -0.015]  # y is 0.01 behind, give or take 0.02

    def score(name, n):
        return [[0.0] * n if name == "x" else [0.01 + w for w in wobble[:n]]], None

    out = race(score, ["x", "y"], start=4, max_windows=8)
    assert not out["decided"] and out["undecided"] == ["y"] and out["leader"] == "x"
    row = out["candidates"][out["undecided"][0]]
    assert row["status"] == "undecided" and "would decide it" in row["vs_leader"]["answer"]
    assert "undecided" in out["outcome"]


def test_the_race_stops_in_the_indifference_zone_and_says_so():
    """y is 0.01 behind x, give or take 0.02: never shown worse nor equivalent in 16 windows, but after 8 no longer
    shown more than delta = 0.01 ahead of x, so the race stops there (racing.py: the indifference zone); without the
    zone (delta 0) it runs to its last window undecided."""
    wobble = [0.02, -0.02, 0.015, -0.015] * 4

    def score(name, n):
        return [[0.0] * n if name == "x" else [0.01 + w for w in wobble[:n]]], None

    out = race(score, ["x", "y"], start=4, max_windows=16)
    assert out["stopped"] == "within-delta" and out["within_delta"] and out["leader"] == "x"
    assert out["candidates"]["y"]["status"] == "undecided" and out["candidates"]["y"]["windows"] == 8
    assert out["candidates"]["y"]["vs_leader"]["lower"] >= -out["delta"] == -0.01
    assert "x is within 0.01 nats of the best at 95%" in out["outcome"]
    off = race(score, ["x", "y"], start=4, max_windows=16, delta=0)
    assert off["stopped"] == "max-windows" and off["candidates"]["y"]["windows"] == 16


def test_the_leader_is_within_delta_of_the_best_at_the_stated_rate_in_least_favourable_fields():
    """One best exactly delta ahead of the rest (Bechhofer's slippage configuration) and every candidate tied: the
    race's leader is within delta of the true best in at least 1 - alpha of the races (two binomial standard errors of
    slack), and the best is still dropped at most at alpha. The whole grid: benchmarks/bench_verdicts.py."""
    races = 200
    slack = 2 * math.sqrt(ALPHA * (1 - ALPHA) / races)
    for cell in (Cell(K=5, G=3, phi=0.0, doc_effects="none", field="lfc"),
                 Cell(K=5, G=20, phi=0.5, doc_effects="skewed", field="equal", max_windows=32)):
        r = race_rates(cell, races, seed=3)
        assert r["correct"] >= 1 - ALPHA - slack and r["dropped"] <= ALPHA + slack, (cell, r)


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


def test_the_futility_stop_never_fires_while_the_windows_could_still_decide():
    """A 0.05-nat gap with per-window sd 0.1 (paired): 4 windows cannot show it, 32 can; the race must not
    stop as futile at 4, and it does decide."""
    rng = np.random.default_rng(5)
    means = {"a": 0.0, "b": 0.05}
    out = race(simulated(means, rng, paired_sd=0.07), list(means), start=4, max_windows=64)
    assert out["stopped"] != "futile" and out["candidates"]["b"]["dropped_round"] is not None


# --- the inference ------------------------------------------------------------------------------

def test_independent_units_are_the_ordinary_paired_t_test():
    x, y = [1.0, 2.0, 3.0, 4.0], [0.5, 1.9, 2.2, 3.9]
    p = paired(x, y)
    assert p.inference == "units" and p.diff == pytest.approx(0.375) and p.df == 3
    assert p.se == pytest.approx(0.17017148213885, rel=1e-12)


def test_one_window_per_document_is_the_ordinary_paired_t_test():
    d = np.array([0.1, -0.2, 0.05, 0.3, 0.0])
    p = paired(d, np.zeros(5), list("abcde"))
    assert p.inference == "document units" and p.se == pytest.approx(d.std(ddof=1) / math.sqrt(5)) and p.df == pytest.approx(4)


def test_documents_inference_is_a_t_test_on_document_means():
    rng = np.random.default_rng(0)
    d = rng.normal(0.02, 0.05, 30)
    docs = [i % 12 for i in range(30)]
    p = paired(d, np.zeros(30), docs)
    means = np.array([d[[i for i in range(30) if docs[i] == g]].mean() for g in range(12)])
    assert p.inference == "documents" and p.documents == 12 and p.df == 11
    assert p.diff == pytest.approx(means.mean()) and p.se == pytest.approx(means.std(ddof=1) / math.sqrt(12))


def test_the_windows_se_matches_the_spread_of_the_estimate_whatever_the_serial_correlation():
    """Windows sampled in stratified random order along documents that hold many (`simulation`): at
    phi 0 the rms se is within 20% of the true sd of the error against the text's own mean, and the 95%
    interval covers at least 93% at phi 0, 0.8 and 0.99 (over-covers as the loss along a document
    smooths: the spread between strata counts as noise)."""
    for phi in (0.0, 0.8, 0.99):
        cal = se_calibration(Cell(K=2, G=2, phi=phi, doc_effects="none", holds=256, max_windows=16), 1500, seed=4)
        assert cal["inference"] == "windows" and cal["coverage"] >= 0.93, (phi, cal)
        if phi == 0.0:
            assert 0.8 <= cal["ratio"] <= 1.2, cal


def test_a_borrowed_variance_brings_no_degrees_of_freedom_of_its_own():
    """Windows 2, 1, 1 over three documents: one variance estimate (1 df) serves all three, so df = 1; counted
    as three independent estimates the 95% interval covered 81% (simulated), with df 1 it covers 95%."""
    p = paired(np.array([0.1, 0.3, 0.2, 0.25]), np.zeros(4), ["a", "a", "b", "c"])
    assert p.inference == "windows" and p.df == pytest.approx(1.0)
    s2 = np.var([0.1, 0.3], ddof=1)
    assert p.se == pytest.approx(math.sqrt((s2 / 2 + s2 + s2) / 9))
    cal = se_calibration(Cell(K=2, G=3, phi=0.0, doc_effects="none", max_windows=4), 2000, seed=1)
    assert cal["coverage"] >= 0.93, cal


def test_the_windows_se_is_a_weighted_ratio_for_key_predictions():
    """Key PPL: inside a document each window weighs by its key predictions (a ratio estimate); the se is
    the linearized one, by hand."""
    d = np.array([0.1, 0.3, -0.2, 0.4])
    t = np.array([2.0, 900.0, 10.0, 30.0])
    p = paired(d, np.zeros(4), ["a", "a", "b", "b"], tokens=t)
    ra, rb = (2 * 0.1 + 900 * 0.3) / 902, (10 * -0.2 + 30 * 0.4) / 40
    assert p.diff == pytest.approx((ra + rb) / 2)
    za = t[:2] * (d[:2] - ra) / t[:2].mean()
    zb = t[2:] * (d[2:] - rb) / t[2:].mean()
    var = (za.var(ddof=1) / 2 + zb.var(ddof=1) / 2) / 4
    assert p.se == pytest.approx(math.sqrt(var)) and p.inference == "windows"


def test_several_lengths_take_the_mean_of_their_ses_and_the_least_general_inference():
    x = [[1.0, 1.1, 1.2, 1.05], [2.0, 2.2, 2.1, 2.3]]
    y = [[0.9, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0]]
    p = paired(x, y, [["a", "a", "b", "b"], ["c", "d", "e", "f"]])
    one = paired(x[0], y[0], ["a", "a", "b", "b"])
    two = paired(x[1], y[1], ["c", "d", "e", "f"])
    assert p.diff == pytest.approx((one.diff + two.diff) / 2) and p.se == pytest.approx((one.se + two.se) / 2)
    assert p.df == min(one.df, two.df) and p.lengths == 2


def test_units_needed_answers_in_windows_or_documents_or_not_at_all():
    rng = np.random.default_rng(1)
    noisy_windows = paired(rng.normal(0.02, 0.05, 8), np.zeros(8), [0, 1] * 4)
    need = units_needed(noisy_windows, 0.025)
    assert need["reachable"] and need["windows"] > 8
    assert projected_se(noisy_windows, windows=need["windows"]) < noisy_windows.se
    # documents that differ a lot: more windows of the same 12 documents cannot decide; more documents can
    shift = rng.normal(0, 0.2, 12)
    d = np.array([shift[i % 12] + 0.03 + rng.normal(0, 0.001) for i in range(24)])
    p = paired(d, np.zeros(24), [i % 12 for i in range(24)])
    need = units_needed(p, 0.025)
    assert need.get("documents", 0) > 12, need
    answer = paired_difference(d, np.zeros(24), [i % 12 for i in range(24)])["answer"]
    assert "not reachable with these 12 documents" in answer and "documents would decide it" in answer


def test_the_95_percent_half_width_is_the_plus_minus():
    p = paired_difference([1.0, 2.0, 3.0, 4.0], [0.5, 1.9, 2.2, 3.9])
    assert p["half_width"] == pytest.approx(t_quantile(3) * p["se"])
    assert tie_answer(p).startswith("undecided after 4")


def test_clopper_pearson_brackets_the_rate():
    lo, hi = clopper_pearson(5, 5, 0.025)
    assert lo == pytest.approx(0.025 ** (1 / 5)) and hi == 1.0
    lo, hi = clopper_pearson(0, 10, 0.025)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10))


# --- a search that stops hopeless points early --------------------------------------------------

def test_a_hopeless_search_point_stops_after_half_its_windows_with_a_lower_bound():
    """Per-window noise of each schedule's own (so the paired se is not 0): a stopped point's objective
    is a lower bound, above the incumbent and at most its true objective; it is shown as a bound, left
    out of the equivalent interval and the bumps, its tie unknown."""
    difficulty = np.array([0.3, -0.2, 0.1, -0.4, 0.2, 0.0, 0.15, -0.1])

    def run(specs, lengths, metric="ppl", samples=None):
        n = samples or 8
        rows = []
        for spec in specs:
            b = dict(spec.params).get("b", 0.0)
            base = 3.5 + 4 * (b - 0.7) ** 2 if spec.method == "mixed" else 4.0
            own = np.random.default_rng(zlib.crc32(spec.label.encode())).normal(0, 0.01, 8)  # the schedule's own noise
            rows.append(ppl_result(spec, lengths[0], list(base + difficulty[:n] + own[:n])))
        return rows

    geom = Geometry(64, 1e4, 256, 8.0)
    full = search_b(run, Target((2048,), None, geom), tol=0.01)
    expected = []
    screened = search_b(run, Target((2048,), None, geom), tol=0.01, windows=8, screen=True, expect=lambda c, m="ppl", s=None: expected.append((c, s)))
    assert screened["best_b"] == full["best_b"]  # the same answer
    assert [e["b"] for e in screened["evaluations"]] == [e["b"] for e in full["evaluations"]]  # by the same path
    stopped = [e for e in screened["evaluations"] if "stopped_early" in e]
    assert stopped and all(e["stopped_early"]["windows"] == 4 for e in stopped)
    assert all(e["stopped_early"]["se"] > 0 for e in stopped)  # a real interval, not a constant difference
    truth = {e["b"]: e["objective"] for e in full["evaluations"]}
    best = screened["best_objective"]
    for e in stopped:  # the optimizer saw a lower bound: above the incumbent, below the point's true objective
        assert best < e["objective"] <= truth[e["b"]] + 1e-12
        assert e["vs_best"]["tied"] is None and objective_text(e).startswith("≥ ")
    lo, hi = screened["equivalent_b"]
    assert not any(lo <= e["b"] <= hi for e in stopped)
    assert not set(screened["non_unimodal_at"]) & {e["b"] for e in stopped}
    assert expected == [(-1, 4)] * len(stopped)  # the progress bar hears of every window not taken


def test_futility_projects_a_prompt_race_in_prompts_over_every_depth(monkeypatch):
    """A look of n prompts per depth holds n x depths prompts: the futility projection to --max-windows counts
    the same units (it projected max_windows prompts in all, far too few, and stopped races early)."""
    seen = []
    monkeypatch.setattr(racing, "futile", lambda p, level, last, margin, most: seen.append((p.n, most)) or False)
    rng = np.random.default_rng(0)
    a, b = racing.Entrant("a", list(rng.normal(size=6))), racing.Entrant("b", list(rng.normal(size=6)))
    racing.futile_at_most(a, b, 2, 8, 0.01, 0.01, 0.01)  # 2 prompts per depth x 3 depths, most 8 per depth
    assert seen == [(6, 24)]
    racing.futile_at_most(a, b, 6, 8, 0.01, 0.01, 0.01)  # windows: a look of 6 is 6 units
    assert seen[-1] == (6, 8)


def test_a_late_precision_search_scores_every_point_on_half_its_windows_and_its_finalists_on_all():
    """advise's raced searches (`ropecli.tuning.late_precision`): every point on the first half of the windows, the
    best quarter re-scored on all of them, the winner the best of those on all; the others marked partial (an
    estimate on their windows, their tie unknown) and their untaken windows told to the progress bar."""
    difficulty = np.array([0.3, -0.2, 0.1, -0.4, 0.2, 0.0, 0.15, -0.1])
    asked = []

    def run(specs, lengths, metric="ppl", samples=None):
        n = samples or 8
        asked.append(n)
        rows = []
        for spec in specs:
            b = dict(spec.params).get("b", 0.0)
            own = np.random.default_rng(zlib.crc32(spec.label.encode())).normal(0, 0.01, 8)
            rows.append(ppl_result(spec, lengths[0], list(3.5 + 4 * (b - 0.7) ** 2 + difficulty[:n] + own[:n])))
        return rows

    target = Target((2048,), None, Geometry(64, 1e4, 256, 8.0))
    told = []
    out = run_search(run, target, SearchSpace("mixed", (Dim("b", 0.0, 1.0),)), Effort(12, "golden", windows=8, finalists=3),
                     scorer(run, target), expect=lambda c, m="ppl", s=None: told.append(s))
    partial = [e for e in out["evaluations"] if "partial" in e]
    final = [e for e in out["evaluations"] if "finalist" in e]
    assert len(final) == 3 and len(partial) == len(out["evaluations"]) - 3
    assert all(len(e["values"][0]) == 8 for e in final) and all(len(e["values"][0]) == 4 for e in partial)
    assert sorted(e["finalist"]["first_objective"] for e in final) == sorted(  # the best three on the first windows
        e["objective"] for e in partial + [{"objective": f["finalist"]["first_objective"]} for f in final])[:3]
    assert out["best_label"] == min(final, key=lambda e: e["objective"])["label"] and abs(out["best_params"]["b"] - 0.7) < 0.1
    assert all(e["vs_best"]["tied"] is None for e in partial) and objective_text(partial[0]).endswith("(4 of 8)")
    assert told == [4] * len(partial) and asked.count(8) == 3 and out["late_precision"]["first_windows"] == 4
