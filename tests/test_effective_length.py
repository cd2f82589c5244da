"""Effective length: the longest measured length at which a candidate's passkey accuracy stays at least 85 %
of the model's own at Ls, point estimate and shown (a one-sided 95 % bound); the bound's error rate simulated."""

from types import SimpleNamespace

import numpy as np
import pytest

from ropecli.evaluation.effective_length import THRESHOLD, effective_lengths, lower_bound


@pytest.mark.parametrize(("p_ref", "n"), [(0.9, 20), (1.0, 40), (0.7, 80), (0.5, 100), (0.95, 12)])
def test_shown_is_rare_where_the_truth_sits_at_the_threshold(p_ref, n):
    """At p = 0.85 p_ref exactly, "shown" (lower bound >= 0) happens at most 5 % of the time (simulated, 4,000 runs).
    Newcombe's hybrid score bound failed this at (0.7, 80): 6.2 %."""
    rng = np.random.default_rng(0)
    k1 = rng.binomial(n, THRESHOLD * p_ref, 4000)
    k2 = rng.binomial(n, p_ref, 4000)
    shown = np.mean([lower_bound(a, n, b, n) >= 0 for a, b in zip(k1, k2)])
    assert shown <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 4000), shown


def test_shown_with_enough_prompts_where_it_clearly_retains():
    rng = np.random.default_rng(1)
    shown = np.mean([lower_bound(a, 200, b, 200) >= 0
                     for a, b in zip(rng.binomial(200, 0.98, 500), rng.binomial(200, 0.98, 500))])
    assert shown > 0.8, shown  # power: the bound is not vacuous


def row(label, n, correct):
    """What effective_lengths reads of a PasskeyResult."""
    return SimpleNamespace(label=label, len=n, prompt_correct=correct, metric="passkey")


def test_effective_length_is_the_longest_length_retained_at_every_shorter_one():
    reference = row("none", 256, [True] * 100)
    results = [row("a", 512, [True] * 100), row("a", 1024, [True] * 70 + [False] * 30), row("a", 2048, [True] * 100),
               row("b", 512, [True] * 90 + [False] * 10), row("b", 1024, [True] * 88 + [False] * 12)]
    eff = effective_lengths(results, reference)["candidates"]
    assert eff["a"]["point"] == 512 and eff["a"]["shown"] == 512  # 1024 breaks it: 2048 does not count
    assert eff["b"]["point"] == 1024 and eff["b"]["shown"] is None  # 90 % and 88 % retain 85 %, not shown on 100 prompts
    c = effective_lengths([row("c", 512, [False] * 10)], reference)["candidates"]["c"]
    assert c["point"] is None and c["shown"] is None and c["by_length"][512]["lower_bound"] < -0.8
