"""One estimand from the leader to the verdict (`ropecli.evaluation.estimand`): the race's leader, the
ranking's best, the shown value and every Δ read the same number, for PPL and for key-token PPL."""

import math

import numpy as np
import pytest

from ropecli.evaluation.estimand import estimate, over_lengths, weights
from ropecli.evaluation.key_metric import key_fields
from ropecli.evaluation.stats import rank_against_best
from ropecli.tuning.racing import Entrant, race
from ropecli.tuning.ranking import rank


def _short_docs_and_a_book(seed: int = 0):
    """10 short documents (one window each) and one long book (40 windows), windows round-robin as ropecli
    samples them. Y is better by 0.05 on every short document and worse by 0.02 along the book: the plain
    window mean prefers X (+0.006), the mean over documents Y (-0.044)."""
    rng = np.random.default_rng(seed)
    docs = [f"short{i}" for i in range(10)] + ["book"] * 40
    base = rng.normal(3.0, 0.3, 50)
    x = base + rng.normal(0, 0.002, 50)
    y = x + np.where(np.array(docs) == "book", 0.02, -0.05) + rng.normal(0, 0.002, 50)
    return docs, x, y


def test_the_best_is_the_one_the_verdicts_say_is_best_with_unequal_documents():
    docs, x, y = _short_docs_and_a_book()
    assert np.mean(y) > np.mean(x)  # what a window mean would crown
    ranked = rank_against_best({"X": list(x), "Y": list(y)}, docs)
    assert ranked["Y"]["best"] and ranked["X"]["diff"] > 0 and ranked["X"]["verdict"] == "worse"
    assert ranked["X"]["diff"] == pytest.approx(estimate(x, docs) - estimate(y, docs))


def test_the_race_crowns_the_candidate_the_verdicts_favour():
    docs, x, y = _short_docs_and_a_book(1)
    order = list(range(10)) + list(range(10, 50))  # a first window of every document, then the book's others
    values = {"X": x[order], "Y": y[order]}
    out = race(lambda name, n: ([list(values[name][:n])], [[docs[i] for i in order[:n]]]), ["X", "Y"],
               start=50, max_windows=50)  # one look on every window: where a window mean would crown X
    assert out["leader"] == "Y" and out["candidates"]["X"]["status"] != "leader"
    assert not any(r["vs_leader"] and r["vs_leader"].get("verdict") == "better" for r in out["candidates"].values())


def test_advise_ranking_best_and_verdict_agree():
    docs, x, y = _short_docs_and_a_book(2)
    rows = [{"candidate": c, "label": c, "method": c, "composed": False, "params": {}, "log_n": False,
             "objective": estimate(v, docs), "values": [list(v)], "docs": [docs], "windows": list(v)}
            for c, v in (("X", x), ("Y", y))]
    out = rank(rows, [2048], lambda r: [], None, None)
    assert out["winner"] == "Y" and out["best_by_ppl"] == "Y"
    assert "better" not in {r["verdict"] for r in out["rows"]}


def test_key_ppl_weighs_key_predictions_within_a_document_and_documents_equally():
    sums = [(2.0 * 900, 900), (6.0 * 2, 2), (1.0 * 10, 10), (0.0, 0)]  # (key NLL sum, key predictions) per window
    names = ["a", "a", "b", "b"]
    f = key_fields(sums, "far-repeat", names)
    a = (1800 + 12) / 902
    assert f["key_nll"] == pytest.approx((a + 1.0) / 2)  # document a pooled over its keys, b its one window with keys
    assert f["key_ppl"] == pytest.approx(math.exp(f["key_nll"]))
    w = weights(["a", "a", "b"], [900, 2, 10])
    assert w.sum() == pytest.approx(1.0) and w[0] == pytest.approx(900 / 902 / 2)


def test_key_ppls_best_is_its_paired_test_best():
    """Windows with very different numbers of key predictions: the shown key PPL, the best and the paired
    Δ are one estimand, so the lower key PPL is the paired test's best."""
    rng = np.random.default_rng(3)
    tokens = [900, 2, 2, 2, 2, 2]
    docs = list("abcdef")
    x = np.array([1.0, 3.5, 3.4, 3.6, 3.5, 3.3]) + rng.normal(0, 0.01, 6)
    y = np.array([1.2, 2.2, 2.1, 2.3, 2.2, 2.0]) + rng.normal(0, 0.01, 6)
    shown = {c: math.exp(estimate(v, docs, tokens)) for c, v in (("X", x), ("Y", y))}
    ranked = rank_against_best({"X": list(x), "Y": list(y)}, docs, weights=tokens)
    best = min(shown, key=shown.get)
    assert ranked[best]["best"] and all(r["verdict"] != "better" for r in ranked.values())
    other = "X" if best == "Y" else "Y"
    assert ranked[other]["diff"] == pytest.approx(math.log(shown[other]) - math.log(shown[best]))


def test_a_length_without_key_predictions_is_left_out_not_diverged():
    values = [[], [1.0, 2.0, 1.5]]  # key PPL at a length no longer than the key rule's short context: none
    docs = [[], ["a", "b", "c"]]
    assert over_lengths(values, docs) == pytest.approx(1.5)
    e = Entrant("c", values=[[], [1.0, 2.0, 1.5]], clusters=docs)
    assert e.mean == pytest.approx(1.5)
    ragged = Entrant("r", values=[[1.0, 1.0], [2.0, 2.0, 2.0]], clusters=[["a", "b"], ["a", "b", "c"]])
    assert ragged.mean == pytest.approx(1.5)  # unequal key-window counts per length do not raise
