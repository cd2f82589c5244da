"""Passkey retrieval prompts (Mohtashami & Jaggi 2023, as YaRN and LongRoPE report it), torch-free.

One sample at window length N, depth d in [0, 1], key K (`digits` random digits, the first non-zero):

    [BOS] filler[:j] NEEDLE filler[j:] QUESTION ANSWER          exactly N tokens
    NEEDLE   = "\\nThe pass key is K. Remember it.\\n"            the key stated once
    QUESTION = "\\nWhat is the pass key? The pass key is"
    ANSWER   = the tokens of " K" that follow QUESTION            (scored, teacher-forced)

The filler is real text: a contiguous run of the data source's tokens (documents concatenated in
their order) starting at a seeded offset, F = N - |BOS| - |NEEDLE| - |QUESTION| - |ANSWER| tokens
long. Depth is where the needle sits in the filler: j = round(d * F), so d = 0 puts it right after
BOS (the farthest from the question) and d = 1 right before the question. Keys and offsets depend
only on (seed, N, depth, sample index), so every schedule sees the same prompts (paired).

A sample is retrieved when every answer token is the argmax given its prefix; its answer NLL is
-log P(K | prompt) in nats (the sum over the answer tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropecli.errors import RopeCliError

NEEDLE = "\nThe pass key is {key}. Remember it.\n"
QUESTION = "\nWhat is the pass key? The pass key is"
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
MAX_DIGITS = 20


@dataclass(frozen=True)
class PasskeySample:
    ids: np.ndarray  # (N,) int64 token ids of the whole window
    answer_start: int  # index of the first answer token; the answer runs to the end of the window
    key: str
    depth: float
    needle_at: int  # index of the needle's first token


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def answer_tokens(tokenizer, key: str) -> tuple[list[int], list[int]]:
    """(question ids, answer ids): the answer as the tokenizer continues the question with " key"."""
    question = encode(tokenizer, QUESTION)
    both = encode(tokenizer, QUESTION + " " + key)
    if both[:len(question)] == question and len(both) > len(question):
        return question, both[len(question):]
    return question, encode(tokenizer, " " + key)  # tokenizers that merge across the boundary


def random_key(rng: np.random.Generator, digits: int) -> str:
    return str(rng.integers(1, 10)) + "".join(str(x) for x in rng.integers(0, 10, size=digits - 1))


def check_depths(depths: list[float]) -> list[float]:
    bad = [d for d in depths if not 0.0 <= d <= 1.0]
    if bad:
        raise RopeCliError(f"--depths {bad[0]:g} is outside [0, 1]; depth is the needle's place in the filler "
                           "(0 = right after BOS, 1 = right before the question), e.g. --depths 0,0.5,1")
    return sorted(dict.fromkeys(float(d) for d in depths))


def check_digits(digits: int) -> int:
    if not 1 <= digits <= MAX_DIGITS:
        raise RopeCliError(f"--digits {digits} is outside 1..{MAX_DIGITS}; pass e.g. --digits 5")
    return digits


def prompt_overhead(tokenizer, digits: int) -> int:
    """Tokens a prompt needs besides the filler (BOS, needle, question, answer), for the longest key."""
    key = "9" * digits
    question, answer = answer_tokens(tokenizer, key)
    bos = 1 if getattr(tokenizer, "bos_token_id", None) is not None else 0
    return bos + len(encode(tokenizer, NEEDLE.format(key=key))) + len(question) + len(answer)


def build_sample(tokenizer, filler: np.ndarray, length: int, depth: float, key: str) -> PasskeySample:
    """One window of exactly `length` tokens; `filler` must hold at least the tokens it needs."""
    bos = getattr(tokenizer, "bos_token_id", None)
    prefix = [bos] if bos is not None else []
    needle = encode(tokenizer, NEEDLE.format(key=key))
    question, answer = answer_tokens(tokenizer, key)
    n_fill = length - len(prefix) - len(needle) - len(question) - len(answer)
    if n_fill < 0:
        raise RopeCliError(f"--len {length} is shorter than the passkey prompt itself ({length - n_fill} tokens "
                           f"with a {len(key)}-digit key); pass a longer --len or fewer --digits")
    if len(filler) < n_fill:
        raise RopeCliError(f"too little text for the passkey filler at --len {length}: {len(filler)} tokens, "
                           f"{n_fill} needed; add text with --data or lower --len")
    j = int(round(depth * n_fill))
    fill = [int(t) for t in filler[:n_fill]]
    ids = prefix + fill[:j] + needle + fill[j:] + question + answer
    return PasskeySample(np.array(ids, dtype=np.int64), len(ids) - len(answer), key, depth, len(prefix) + j)


def filler_stream(token_ids: list[list[int]]) -> np.ndarray:
    """All documents' tokens, concatenated in order: the text filler runs are cut from."""
    return np.concatenate([np.asarray(t, dtype=np.int64) for t in token_ids]) if token_ids else np.zeros(0, np.int64)


def make_samples(tokenizer, stream: np.ndarray, length: int, depths: list[float], samples: int, digits: int,
                 seed: int, first_sample: int = 0) -> list[list[PasskeySample]]:
    """samples per depth, [depth index][sample index]; keys and filler offsets seeded by (seed, length, depth, sample),
    so a depth's prompts do not depend on which other depths are asked for."""
    overhead = prompt_overhead(tokenizer, digits)
    if overhead > length:
        raise RopeCliError(f"--len {length} is shorter than the passkey prompt itself ({overhead} tokens with a "
                           f"{digits}-digit key); pass a longer --len or fewer --digits")
    need = length - overhead
    if stream.size < need + 1:
        raise RopeCliError(f"too little text for the passkey filler at --len {length}: the data has {stream.size} "
                           f"tokens, {need} needed; add text with --data or lower --len")
    out = []
    span = need + digits + 8 if stream.size > need + digits + 8 else need  # room for keys that tokenize shorter
    for depth in depths:
        row = []
        for s in range(first_sample, first_sample + samples):
            rng = np.random.default_rng([seed, length, int(round(depth * 10000)), s])
            key = random_key(rng, digits)
            start = int(rng.integers(0, stream.size - span))
            row.append(build_sample(tokenizer, stream[start:start + span], length, depth, key))
        out.append(row)
    return out
