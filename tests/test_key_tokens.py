"""Key tokens, the two definitions (numpy, no model): LongPPL's long-short rule on an evaluator's losses,
its short-context blocks as the `longppl` package walks a text, and the far-repeat rule on token ids."""

import numpy as np

from ropecli.evaluation.key_tokens import far_repeat_mask, key_nll, long_short_mask, short_context_blocks


def test_long_short_rule_needs_both_the_gain_and_a_confident_full_context():
    full = np.array([0.5, 0.5, 3.0, 0.1, 1.9])
    short = np.array([3.0, 2.4, 6.0, np.nan, 4.0])
    # gain 2.5 and full 0.5: key; gain 1.9: not; full 3.0 >= 2: not; no short context: not; gain 2.1, full 1.9: key
    assert long_short_mask(full, short).tolist() == [True, False, False, False, True]


def test_short_context_blocks_walk_the_text_as_find_key_token_does():
    # range(0, max_len - trunc_len, sliding_window); the last block clipped at the text's end
    assert short_context_blocks(10_000) == [(0, 4096, 5120), (1024, 5120, 6144), (2048, 6144, 7168),
                                            (3072, 7168, 8192), (4096, 8192, 9216), (5120, 9216, 10_000)]
    assert short_context_blocks(4096) == []


def test_far_repeats_are_key_and_near_ones_are_not():
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 2000, size=300)  # no 4-gram repeats by chance (drawn from 1000 ids)
    ids[200:206] = ids[20:26]  # a 6-token run seen 180 tokens before
    ids[100:106] = ids[90:96]  # seen 10 tokens before: within a short context of 50
    mask = far_repeat_mask(ids, short=50, span=4)
    key = set(np.flatnonzero(mask) + 1)  # prediction p is of token p + 1
    assert key == {203, 204, 205}  # the far run, from its 4th token on (a 4-gram ends there)
    total, n = key_nll(np.arange(299.0), mask)
    assert (total, n) == (202.0 + 203.0 + 204.0, 3)
