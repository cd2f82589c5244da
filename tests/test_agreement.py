"""Rank agreement between two metrics (`ropecli.evaluation.agreement`): Spearman's rho as scipy computes it,
the point estimate on the estimand's weighting (documents equal), and the bootstrap interval's coverage of the
true rho, simulated."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from ropecli.evaluation.agreement import rank_agreement, spearman


def test_spearman_is_scipys_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b = rng.integers(0, 4, size=6).astype(float), rng.normal(size=6)
        mine, theirs = spearman(a, b)[0], spearmanr(a, b).statistic
        assert (np.isnan(mine) and np.isnan(theirs)) or abs(mine - theirs) < 1e-12


def test_the_point_estimate_weighs_documents_equally():
    """Two schedules' windows: one long document (6 windows) and one short (1 window). By the plain window mean
    x < y; by the mean of the documents' means (the estimand) y < x; the rank follows the estimand."""
    docs = ["long"] * 6 + ["short"]
    x = [1.0] * 6 + [9.0]  # window mean 2.14, document mean 5.0
    y = [2.0] * 6 + [3.0]  # window mean 2.14.., document mean 2.5
    z = [4.0] * 7  # 4.0 either way
    task = {"x": [3.0, 3.1], "y": [1.0, 1.1], "z": [2.0, 2.1]}  # task order y < z < x
    out = rank_agreement(task, {"x": x, "y": y, "z": z}, None, docs, reps=200)
    assert out["order_b"] == ["y", "z", "x"] and out["rho"] == 1.0


def test_the_interval_covers_the_true_rho_as_stated():
    """Six schedules with true means on both metrics whose true rho is 0.6; per-unit noise; the 95 % bootstrap
    interval (percentile, 400 resamples) covers the true rho in at least 93 % of 200 simulated studies
    (Monte Carlo error about 1.5 %; measured: 0.99 at this noise, 1.00 at half of it, 0.965 at twice it:
    conservative, as a percentile interval of a rank statistic on 6 points tends to be)."""
    rng = np.random.default_rng(3)
    ma = np.array([0.0, 0.4, 0.8, 1.2, 1.6, 2.0])
    mb = np.array([0.0, 1.2, 0.4, 2.0, 0.8, 1.6])
    truth = spearman(ma, mb)[0]
    assert abs(truth - 0.6) < 1e-12
    hits = 0
    for s in range(200):
        a = {f"s{i}": ma[i] + rng.normal(0, 1.0, 16) for i in range(6)}
        b = {f"s{i}": mb[i] + rng.normal(0, 1.0, 16) for i in range(6)}
        out = rank_agreement(a, b, reps=400, seed=s)
        hits += out["low"] <= truth <= out["high"]
    assert hits / 200 >= 0.93, hits
