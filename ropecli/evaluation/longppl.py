"""LongPPL's key tokens (`key_tokens.long_short_mask`) with an evaluator model the user names, as a KeyRule.

What `longppl.find_key_token` + `cal_overlap` do (longppl 0.3.0), without full logits and cached:
- The evaluator reads the window's text once whole and, block by block, each block of `sliding_window`
  tokens after only the `trunc_len` tokens before it (`key_tokens.short_context_blocks`); every loss
  comes from `ModelBackend.token_losses` (final hidden states once, logits in chunks).
- Evaluator and model under test share a vocabulary: the evaluator reads the window's own token ids, and
  its key predictions are the window's. Otherwise (as LongPPL does across tokenizers) the window is
  decoded to text, the evaluator tokenizes that text (with its special tokens, as `find_key_token`),
  its key tokens become character spans (adjacent spans merged), and a token of the window is key when
  its characters lie inside one span (`cal_overlap`: prediction i - 1 for token i).
- The evaluator must read the whole window: a window longer than its training length L is refused.
Each window's key predictions are cached (`ropecli.evaluation.cache`) under the evaluator's
fingerprint, the rule's parameters and the window's tokens: scoring more schedules costs nothing more.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.evaluation.key_tokens import ALPHA, BETA, SLIDING_WINDOW, long_short_mask, short_context_blocks


@dataclass
class LongShort:
    evaluator: Any  # ModelBackend: the model whose long-short contrast picks the key tokens
    tokenizer: Any  # the model under test's tokenizer (windows are its ids)
    cache: Any  # EvalCache
    trunc_len: int
    sliding_window: int = SLIDING_WINDOW
    alpha: float = ALPHA
    beta: float = BETA
    chunk_tokens: int | None = None
    store: bool = True  # write key sets to the cache (under torchrun: rank 0 only; every rank computes its own)
    name: str = "long-short"
    passes: int = 0  # evaluator forward passes run here (cache misses)
    _masks: dict = field(default_factory=dict, repr=False)

    def params(self) -> dict:
        return {"evaluator": self.evaluator.rope.name, "trunc_len": self.trunc_len,
                "sliding_window": self.sliding_window, "alpha": self.alpha, "beta": self.beta}

    def mask(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        digest = hashlib.sha256(ids.tobytes()).hexdigest()
        if digest not in self._masks:
            key = {"key_rule": self.name, **self.params(), "evaluator": self.evaluator.fingerprint,
                   "runtime": self.evaluator.runtime, "dtype": self.evaluator.dtype, "window": digest}
            got = self.cache.get(key)
            if got is None:
                got = {"value": [int(i) for i in np.flatnonzero(self._compute(ids))]}
                if self.store:
                    self.cache.put(key, got)
            mask = np.zeros(len(ids) - 1, dtype=bool)
            mask[np.asarray(got["value"], dtype=np.int64)] = True
            self._masks[digest] = mask
        return self._masks[digest]

    def _compute(self, ids: np.ndarray) -> np.ndarray:
        if shared_vocabulary(self.tokenizer, self.evaluator.tokenizer):
            return self._evaluator_mask(ids)
        text, spans = token_spans(self.tokenizer, ids)
        enc = self.evaluator.tokenizer(text, return_offsets_mapping=True)
        key_tokens = np.flatnonzero(self._evaluator_mask(np.asarray(enc["input_ids"], dtype=np.int64))) + 1
        intervals = merge_intervals([tuple(enc["offset_mapping"][i]) for i in key_tokens])
        return overlap_mask(spans, intervals)

    def _evaluator_mask(self, ids: np.ndarray) -> np.ndarray:
        """Key predictions of the evaluator's own token ids (T,) -> (T-1,) bool."""
        L = self.evaluator.rope.train_len
        if len(ids) > L:
            raise RopeCliError(f"the key-token evaluator {self.evaluator.rope.name} reads {L} tokens and a window is "
                               f"{len(ids)} of its tokens: name an evaluator with a longer context (--key-evaluator), "
                               "or use --key-tokens far-repeat")
        full = self.evaluator.token_losses(ids, self.chunk_tokens)
        short = np.full(len(ids) - 1, np.nan)
        for start, first, end in short_context_blocks(len(ids), self.trunc_len, self.sliding_window):
            losses = self.evaluator.token_losses(ids[start:end], self.chunk_tokens)  # predictions of start+1 .. end-1
            short[first - 1:end - 1] = losses[first - start - 1:]
            self.passes += 1
        self.passes += 1
        return long_short_mask(full, short, self.alpha, self.beta)


def shared_vocabulary(a, b) -> bool:
    """Whether two tokenizers map every token to the same id (then token ids carry over unchanged)."""
    return a is b or a.get_vocab() == b.get_vocab()


def token_spans(tokenizer, ids: np.ndarray) -> tuple[str, list[tuple[int, int]]]:
    """The window's text and each token's character span in it, by decoding token pairs as longppl's
    `compute_offsets` does (the characters token i adds after token i - 1; special tokens add none)."""
    ids = [int(t) for t in ids]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    spans, at = [], 0
    for i, t in enumerate(ids):
        if t in special:
            spans.append((at, at))
            continue
        prev = ids[i - 1] if i and ids[i - 1] not in special else None
        width = len(tokenizer.decode([t])) if prev is None else \
            len(tokenizer.decode([prev, t])) - len(tokenizer.decode([prev]))
        spans.append((at, at + width))
        at += width
    return tokenizer.decode(ids, skip_special_tokens=True), spans


def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Adjacent character spans joined (longppl's `merge_intervals`: a span starting where the last ends)."""
    out: list[list[int]] = []
    for a, b in intervals:
        if out and out[-1][1] == a:
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap_mask(spans: list[tuple[int, int]], intervals: list[tuple[int, int]]) -> np.ndarray:
    """Prediction mask (T-1,) of the tokens whose span lies inside a key interval (longppl's `cal_overlap`,
    a two-pointer walk; token i is predicted by prediction i - 1)."""
    mask = np.zeros(max(len(spans) - 1, 0), dtype=bool)
    i = j = 0
    while i < len(spans) and j < len(intervals):
        (a0, a1), (b0, b1) = spans[i], intervals[j]
        if a0 >= b0 and a1 <= b1:
            if i >= 1:
                mask[i - 1] = True
            i += 1
        elif a0 < b0:
            i += 1
        else:
            j += 1
    return mask
