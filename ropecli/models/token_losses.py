"""What a forward pass's per-prediction losses become in the cache (numpy only, shared by every backend):
the NLL summed over the scored predictions and their number (the perplexity), and the NLL summed in
each of POSITION_BINS equal bins of the window's predictions (the loss by position: where a schedule
breaks, just past L or everywhere). Prediction t is of token t+1, so a window of T tokens has T-1.
"""

from __future__ import annotations

import base64

import numpy as np

POSITION_BINS = 32


def position_edges(predictions: int) -> list[int]:
    """Bin edges over predictions 0..predictions-1: POSITION_BINS bins of equal size (up to one)."""
    return [round(j * predictions / POSITION_BINS) for j in range(POSITION_BINS + 1)]


def token_summary(per_token: np.ndarray, score_last: int | None, keep: bool = False) -> tuple:
    """A window's per-prediction NLL (T-1,) as the cache keeps it: (sum over the scored predictions (all,
    or the last `score_last`), their number, the sum in each position bin of all predictions[, every
    prediction's NLL in float16, base64: `encode_tokens`, kept with `keep` for metrics computed later])."""
    scored = per_token[-score_last:] if score_last else per_token
    edges = position_edges(len(per_token))
    out = (float(np.sum(scored, dtype=np.float64)), len(scored),
           [float(np.sum(per_token[a:b], dtype=np.float64)) for a, b in zip(edges[:-1], edges[1:])])
    return (*out, encode_tokens(per_token)) if keep else out


def encode_tokens(per_token: np.ndarray) -> str:
    """Per-prediction NLL as float16 bytes in base64 (2 bytes a token; ~3 significant digits, 0.05 % at most)."""
    return base64.b64encode(np.asarray(per_token, dtype="<f2").tobytes()).decode("ascii")


def decode_tokens(text: str) -> np.ndarray:
    """`encode_tokens` read back, as float64 (T-1,)."""
    return np.frombuffer(base64.b64decode(text), dtype="<f2").astype(np.float64)


def bin_means(bin_sums: list[float], length: int) -> np.ndarray:
    """A window of `length` tokens: its mean NLL in each position bin (POSITION_BINS,)."""
    counts = np.diff(position_edges(length - 1))
    return np.asarray(bin_sums, dtype=np.float64) / np.maximum(counts, 1)


def prefix_summaries(per_token: np.ndarray, score_last: int | None, prefixes: list[int] | None = None, keep: bool = False):
    """`token_summary` of the whole window, or (with `prefixes`) a list of it for the window's first n
    tokens, n in `prefixes` (their first n - 1 predictions)."""
    if prefixes is None:
        return token_summary(per_token, score_last, keep)
    return [token_summary(per_token[:n - 1], score_last, keep) for n in prefixes]


def prefixes_from_kept(value, lengths: list[int], score_last: int | None) -> list[tuple[int, list]]:
    """[(n, cache value of the window's first n tokens)] from a cached window's value that kept every
    prediction's NLL (nothing without it): no forward pass. A prefix's mean NLL from the float16-kept NLL is
    within ~1e-4 nats of a forward pass at 128 tokens, less at more (the rounding averages out as 1/sqrt(n);
    tests/test_serving.py), against the verdicts' margin of 0.01."""
    if not value or len(value) < 4 or not value[3] or not lengths:
        return []
    per_token = decode_tokens(value[3])
    return [(n, plain(token_summary(per_token[:n - 1], score_last, keep=True))) for n in lengths]


def plain(value: tuple) -> list:
    """A backend's per-unit tuple as JSON-able floats and lists (what the cache stores)."""
    out = []
    for v in value:
        if hasattr(v, "tolist"):
            v = v.tolist()
        out.append([float(x) for x in v] if isinstance(v, (list, tuple)) else
                   v if v is None or isinstance(v, (int, str)) else float(v))
    return out
