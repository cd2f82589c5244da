"""The one number every ranking, verdict and table reads (pure numpy).

ESTIMAND: for a candidate on the windows of one length, the mean over documents of each document's
mean loss per scored prediction (for PPL: NLL per token; for key-token PPL: NLL per key prediction,
every key prediction of a document weighing the same); several lengths: the mean over lengths. PPL
is exp of it. The leader of a race, the best of a ranking, the value a table shows, the paired Δ and
its verdict are all this estimand (or the difference of two), so a candidate shown better than the
best cannot exist: the best is the lowest estimand, and Δ = estimand(x) - estimand(y) exactly on the
same windows.

Why documents weigh equally: the windows of one long book would otherwise outvote ten short
documents, and the verdicts' inference treats documents as the units that vary
(`ropecli.evaluation.inference`). Why predictions weigh equally inside a document: a window with 2
key predictions says less than one with 900; per document the key NLL is pooled over its predictions
(a ratio estimate), not averaged over windows. For PPL every window scores the same number of
predictions, so inside a document this is the plain mean of its windows.

What it estimates: the windows of each document are a stratified random sample of the windows it
holds (`ropecli.evaluation.data.stratified_order`), so a document's mean estimates its mean over the
whole document; the inference says how far the mean over documents generalizes.

    weights(docs, tokens) -> w, sum(w) = 1      estimate = sum_i w_i v_i
    estimate(values, docs, tokens)              one length
    over_lengths(values, docs, tokens)          [length][window] lists, ragged allowed
"""

from __future__ import annotations

import math

import numpy as np

ESTIMAND = ("the mean over documents of each document's mean NLL per scored prediction (key PPL: per key "
            "prediction, pooled over the document's windows), the mean over lengths")


def weights(docs: list | None, tokens=None, n: int | None = None) -> np.ndarray:
    """Each window's weight in the estimate: tokens_i / (G * tokens of its document), or 1/n without
    documents (independent units: passkey prompts); windows with 0 tokens weigh 0."""
    n = len(docs) if docs is not None else (len(tokens) if tokens is not None else n)
    t = np.ones(n) if tokens is None else np.asarray(tokens, dtype=np.float64)
    if docs is None:
        return t / t.sum() if t.sum() > 0 else t
    total: dict = {}
    for g, ti in zip(docs, t):
        total[g] = total.get(g, 0.0) + ti
    live = [g for g, s in total.items() if s > 0]
    w = np.array([ti / (len(live) * total[g]) if total[g] > 0 else 0.0 for g, ti in zip(docs, t)])
    return w


def estimate(values, docs: list | None = None, tokens=None) -> float:
    """The estimand on one length's per-window values (inf when a weighted value is not finite)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return math.inf
    w = weights(list(docs[:v.size]) if docs is not None else None, None if tokens is None else list(tokens)[:v.size], v.size)
    used = w > 0
    if not np.all(np.isfinite(v[used])):
        return math.inf
    return float(np.dot(w[used], v[used]))


def over_lengths(values: list, docs: list | None = None, tokens: list | None = None) -> float:
    """The estimand over lengths: `values` [length][window] (or one vector), `docs` and `tokens` the same
    shape (or None); lengths may hold different numbers of windows, and a length with none (key PPL at
    a length no longer than the key rule's short context: no key predictions) is left out."""
    if not len(values):
        return math.inf
    if np.ndim(values[0]) == 0:
        values, docs, tokens = [values], [docs] if docs is not None else None, [tokens] if tokens is not None else None
    per_length = lambda x, i: None if x is None else x[i] if len(x) and isinstance(x[0], (list, tuple, np.ndarray)) else x  # noqa: E731
    parts = [estimate(v, per_length(docs, i), per_length(tokens, i)) for i, v in enumerate(values) if len(v)]
    return float(np.mean(parts)) if parts else math.inf
