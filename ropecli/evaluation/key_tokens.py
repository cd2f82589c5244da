"""Key tokens: the predictions of a window that need its long context, chosen once per window, the same
for every schedule (so a key-token metric stays paired), and never by one of the schedules compared.
Numpy only; the masks index a window's predictions (prediction p is of token p + 1).

Two definitions:
- `long_short_mask`, LongPPL's (Fang et al., "What is Wrong with Perplexity for Long-context Language
  Modeling?", ICLR 2025; the `longppl` package's `find_key_token`): an evaluator model that can read the
  whole text scores each token with the full context and with only the `trunc_len` tokens before its
  block of `sliding_window`; a token is key when the full context lowers its loss by more than `alpha`
  nats and its full-context loss is below -`beta` nats (log-probability above `beta`). Defaults:
  trunc_len 4096, sliding_window 1024, alpha 2, beta -2.
- `far_repeat_mask`, for models with no long-context evaluator (SmolLM2 at 2L): a token is key when the
  `span` tokens ending with it appeared earlier in the window, last more than `short` tokens back and not
  since: predicting it well takes looking past the short context (copying from far back). No model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

TRUNC_LEN, SLIDING_WINDOW, ALPHA, BETA = 4096, 1024, 2.0, -2.0  # longppl's find_key_token defaults
SPAN = 4  # far_repeat_mask: tokens of the repeated run that ends with the key token


def long_short_mask(loss_full: np.ndarray, loss_short: np.ndarray, alpha: float = ALPHA, beta: float = BETA) -> np.ndarray:
    """Key predictions by LongPPL's rule, from an evaluator's per-prediction losses with the full and with
    the truncated context (NaN in `loss_short` where a prediction has no short context: never key)."""
    full, short = np.asarray(loss_full, dtype=np.float64), np.asarray(loss_short, dtype=np.float64)
    gain = np.where(np.isnan(short), -np.inf, short - full)
    return (gain > alpha) & (full < -beta)


def short_context_blocks(tokens: int, trunc_len: int = TRUNC_LEN,
                         sliding_window: int = SLIDING_WINDOW) -> list[tuple[int, int, int]]:
    """LongPPL's short contexts over a text of `tokens` tokens, as `find_key_token` walks it: (first token
    of the short context, first token scored, one past the last token scored); each block of up to
    `sliding_window` tokens is scored after the `trunc_len` tokens before it; the first `trunc_len` never."""
    return [(start, start + trunc_len, min(start + trunc_len + sliding_window, tokens))
            for start in range(0, tokens - trunc_len, sliding_window)]


def far_repeat_mask(ids: np.ndarray, short: int, span: int = SPAN) -> np.ndarray:
    """Key predictions (T-1,) of a window of token ids (T,): prediction p (of token j = p + 1) is key when
    ids[j - span + 1 .. j] occurred before, its latest earlier occurrence ending more than `short` tokens
    before j."""
    ids = np.asarray(ids, dtype=np.int64)
    mask = np.zeros(max(len(ids) - 1, 0), dtype=bool)
    last: dict[tuple, int] = {}
    for j in range(span - 1, len(ids)):
        gram = tuple(ids[j - span + 1:j + 1].tolist())
        seen = last.get(gram)
        if seen is not None and j - seen > short and j >= 1:
            mask[j - 1] = True
        last[gram] = j
    return mask


def key_nll(per_token: np.ndarray, mask: np.ndarray) -> tuple[float, int]:
    """(NLL summed over the key predictions, their number) of one window under one schedule."""
    per_token = np.asarray(per_token, dtype=np.float64)
    return float(per_token[mask].sum()), int(mask.sum())


def short_default(train_len: int) -> int:
    """The short context of both rules when none is given: LongPPL's 4,096, or half the model's training
    length L where that is less (4,096 is L/2 of SmolLM2; for a model of L = 256, 128)."""
    return min(TRUNC_LEN, max(train_len // 2, 1))


class KeyRule(Protocol):
    """Which predictions of a window are key: `mask(ids)` (T,) int ids -> (T-1,) bool, a function of the
    window's tokens alone (so the same for every schedule scored on it, and a window's prefix gets the
    prefix of its mask); `name` and `params` describe it (JSON, cache keys); `passes`: forward passes of
    an evaluator model it ran (0 for rules without one)."""
    name: str
    passes: int

    def params(self) -> dict: ...

    def mask(self, ids: np.ndarray) -> np.ndarray: ...


@dataclass
class FarRepeat:
    """`far_repeat_mask` as a KeyRule (no model, no forward pass)."""
    short: int
    span: int = SPAN
    name: str = "far-repeat"
    passes: int = 0
    _masks: dict = field(default_factory=dict, repr=False)

    def params(self) -> dict:
        return {"short": self.short, "span": self.span}

    def mask(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        key = ids.tobytes()
        if key not in self._masks:
            self._masks[key] = far_repeat_mask(ids, self.short, self.span)
        return self._masks[key]


def describe_rule(name: str, params: dict) -> str:
    """'far-repeat (span 4, short 4096)' — a rule in words, for tables and reports."""
    inner = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in params.items())
    return f"{name} ({inner})" if inner else name
