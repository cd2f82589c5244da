"""The key-token metric of one (schedule, length): the NLL of a window's key predictions (a `KeyRule`'s
mask, the same for every schedule), from the per-prediction NLL the cache keeps with each window.

Per window: key NLL = mean NLL over its key predictions among the scored ones (all T-1, or the last
`score_last`); a window with no key prediction has none (it is left out of the pairing, for every
schedule alike: the mask depends on the tokens only). Overall: key PPL = exp(the estimand,
`ropecli.evaluation.estimand`: per document the key NLL pooled over its key predictions, the mean
over documents), its standard error under the verdicts' inference (as PPL's, `results`).
The per-prediction NLL is stored in float16 (`token_losses.encode_tokens`): a key NLL read from it
differs from the float64 sum by less than 3e-4 relative (2^-12 per term; `tests/test_key_metric.py`).
"""

from __future__ import annotations

import math

import numpy as np

from ropecli.models.token_losses import decode_tokens
from ropecli.evaluation.estimand import estimate
from ropecli.evaluation.summaries import estimate_se


def window_key_sums(per_window: list[tuple], masks: list[np.ndarray], score_last: int | None) -> list[tuple[float, int]] | None:
    """(key NLL sum, key predictions) of each window; None when a window's cache entry has no per-prediction NLL."""
    if any(len(v) < 4 or not v[3] for v in per_window):
        return None
    out = []
    for v, mask in zip(per_window, masks):
        nll = decode_tokens(v[3])
        keep = mask[:len(nll)].copy()
        if score_last:
            keep[:max(len(nll) - score_last, 0)] = False
        out.append((float(nll[keep].sum()), int(keep.sum())))
    return out


def key_fields(sums: list[tuple[float, int]] | None, rule: str | None, names: list[str] | None = None) -> dict:
    """The key-token fields of a PplResult from `window_key_sums` (all None without them); `names`: each
    window's document (None: one document)."""
    if sums is None or rule is None:
        return {"key_rule": rule, "key_ppl": None, "key_nll": None, "key_ppl_err": None, "key_tokens": None,
                "window_key_nll": None, "window_key_tokens": None}
    count = sum(n for _, n in sums)
    means = [s / n if n else None for s, n in sums]
    kept = [i for i, (_, n) in enumerate(sums) if n]
    docs = [names[i] for i in kept] if names is not None else None
    scored = np.array([means[i] for i in kept], dtype=np.float64)
    nll = estimate(scored, docs, [sums[i][1] for i in kept]) if count else None
    finite = nll is not None and math.isfinite(nll)
    ppl = math.exp(nll) if finite and nll < 700 else (None if nll is None else math.inf)
    err = estimate_se(scored, docs, [sums[i][1] for i in kept], ppl) if finite else None
    return {"key_rule": rule, "key_ppl": ppl, "key_nll": nll if finite else (None if nll is None else math.inf),
            "key_ppl_err": err, "key_tokens": count,
            "window_key_nll": [None if m is None else (float(m) if math.isfinite(m) else None) for m in means],
            "window_key_tokens": [n for _, n in sums]}
