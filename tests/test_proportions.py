"""Intervals of proportions (`ropecli.evaluation.proportions`): the differences' intervals, simulated at the sizes
ropecli states them (3 to 40 prompts), cover the true difference in at least 95 % of studies; Wilson's interval is
the textbook's; Clopper-Pearson's bounds are exact."""

from __future__ import annotations

import numpy as np
import pytest

from ropecli.evaluation.proportions import clopper_pearson, exact_difference, newcombe_paired, wilson


def test_wilson_is_the_textbooks_interval():
    lo, hi = wilson(56, 70)  # by hand: (p + z^2/2n ± z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n) = 0.6918 to 0.8770
    assert lo == pytest.approx(0.6918, abs=5e-5) and hi == pytest.approx(0.8770, abs=5e-5)
    assert wilson(0, 10)[0] == pytest.approx(0.0, abs=1e-12) and wilson(10, 10)[1] == pytest.approx(1.0)


def test_paired_outcomes_that_agree_everywhere_have_a_zero_difference_inside_a_narrow_interval():
    d, lo, hi = newcombe_paired([1, 0, 1, 1] * 5, [1, 0, 1, 1] * 5)
    assert d == 0.0 and lo < 0 < hi and hi - lo < 0.25  # n = 20, no discordant pair
    d, lo, hi = newcombe_paired([1] * 10, [0] * 10)
    assert d == 1.0 and lo > 0.5 and hi == 1.0


@pytest.mark.parametrize("n", [3, 4, 8, 40])
def test_the_difference_intervals_cover_the_true_difference(n):
    rng = np.random.default_rng(n)
    for p1, p2 in ((0.5, 0.5), (0.8, 0.3), (0.9, 0.9), (0.3, 0.6), (0.95, 0.5)):
        cover_u = cover_p = 0
        for _ in range(2000):
            x, y = rng.random(n) < p1, rng.random(n) < p2
            _, lo, hi = exact_difference(int(x.sum()), n, int(y.sum()), n)
            cover_u += lo <= p1 - p2 <= hi
            same = rng.random(n) < 0.7  # paired: the second outcome is the first's 70 % of the time, else its own draw
            z = np.where(same, x, rng.random(n) < p2)
            _, lo, hi = newcombe_paired(x.astype(float).tolist(), z.astype(float).tolist())
            cover_p += lo <= p1 - (0.7 * p1 + 0.3 * p2) <= hi
        assert cover_u / 2000 >= 0.95 and cover_p / 2000 >= 0.95, (n, p1, p2, cover_u / 2000, cover_p / 2000)


def test_clopper_pearson_is_exact_at_the_edges():
    assert clopper_pearson(5, 5)[0] == pytest.approx(0.025 ** (1 / 5))
    assert clopper_pearson(0, 10)[1] == pytest.approx(1 - 0.025 ** (1 / 10))
