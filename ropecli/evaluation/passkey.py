"""Passkey retrieval prompts, torch-free: the published one and ropecli's real-text variant.

`passkey`: the prompt as the field publishes it (Mohtashami & Jaggi 2023's landmark-attention passkey, the one
YaRN and LongRoPE report), byte for byte as jquesnelle/yarn `eval/passkey.py:generate_prompt` builds it
(= epfml/landmark-attention `llama/run_test.py:generate_prompt`):

    TASK "\n" garbage[:n_prefix] "\n" NEEDLE "\n" garbage[:n_garbage - n_prefix] "\n" QUESTION
    TASK     = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will
                quiz you about the important information there."
    garbage  = " ".join(["The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."]
                        * 10000), cut at a character count (mid-word, as the source cuts it)
    NEEDLE   = "The pass key is K. Remember it. K is the pass key."   K = randint(1, 50000) (1 to 5 digits)
    QUESTION = "What is the pass key? The pass key is"

The source sizes a prompt in characters and keeps the longest below its token target (`main`: n_garbage grown by
128 characters); ropecli keeps the longest n_garbage whose [BOS] prompt + answer fits `--len` tokens (a binary search
at one-character resolution). Depth d puts the needle at n_prefix = round(d * n_garbage) (the source draws n_prefix
uniformly: a depth grid is the same draw, stratified, and gives the heat map). The source's keys and splits are
unseeded; ropecli's are seeded by (seed, length, depth, sample), so every schedule sees the same prompts (paired).
The source generates 10 tokens greedily and compares the first run of digits with the key as an integer
(`eval/passkey.py:test_model`: `int(re.search(r'\\d+', response).group())`, the pipeline's 10 new tokens); ropecli
scores the answer " K" teacher-forced (below) and, with `--score generate`, also as the source does (`ropecli.evaluation.ruler.answer_scoring.published_match`:
"\n4711" is 4,711, right; "47110" is wrong).

`passkey-text`: ropecli's real-text variant (harder: the filler is the text itself, the key stated once and no
instruction), exactly N tokens:

    [BOS] filler[:j] NEEDLE_TEXT filler[j:] QUESTION_TEXT ANSWER
    NEEDLE_TEXT   = "\nThe pass key is {key}. Remember it.\n"            the key stated once
    QUESTION_TEXT = "\nWhat is the pass key? The pass key is"
    ANSWER        = the tokens of " K" that follow the question            (scored, teacher-forced)

Its filler is a contiguous run of the data source's tokens (documents concatenated in their order) starting at a
seeded offset, F = N - |BOS| - |NEEDLE| - |QUESTION| - |ANSWER| tokens long; depth j = round(d * F) (d = 0: right
after BOS, the farthest from the question). Its key has `digits` random digits, the first non-zero.

In both, a sample is retrieved when every answer token is the argmax given its prefix; its answer NLL is
-log P(K | prompt) in nats (the sum over the answer tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.evaluation.chat_template import RAW, PromptFrame, encode

NEEDLE = "\nThe pass key is {key}. Remember it.\n"  # passkey-text's
ASKED = "What is the pass key?"  # the question (a chat template's user turn ends with it) ...
ANSWER_PREFIX = "The pass key is"  # ... and the answer's prefix (its assistant turn starts with it)
QUESTION = "\n" + ASKED + " " + ANSWER_PREFIX  # passkey-text's raw close; the published one has no newline before it
QUESTION_BODY = "\n" + ASKED  # passkey-text: the question's words after the filler (the frame closes it)
# the published prompt's strings, byte for byte from jquesnelle/yarn eval/passkey.py:generate_prompt
TASK_DESCRIPTION = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
                    "I will quiz you about the important information there.")
GARBAGE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
GARBAGE_INF = " ".join([GARBAGE] * 10000)
INFORMATION_LINE = "The pass key is {key}. Remember it. {key} is the pass key."
FINAL_QUESTION = "What is the pass key? The pass key is"  # = ASKED + " " + ANSWER_PREFIX, the raw frame's join
KEY_RANGE = (1, 50000)  # random.randint(1, 50000): both ends included
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
MAX_DIGITS = 20


@dataclass(frozen=True)
class PasskeySample:
    ids: np.ndarray  # (N,) int64 token ids of the whole window
    answer_start: int  # index of the first answer token; the answer runs to the end of the window
    key: str
    depth: float
    needle_at: int  # index of the needle's first token


def answer_tokens(tokenizer, key: str, question_text: str = QUESTION) -> tuple[list[int], list[int]]:
    """(question ids, answer ids): the answer as the tokenizer continues the question with " key"."""
    question = encode(tokenizer, question_text)
    both = encode(tokenizer, question_text + " " + key)
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


def prompt_overhead(tokenizer, digits: int, frame: PromptFrame = RAW) -> int:
    """Tokens a prompt needs besides the filler (BOS or the template's head, needle, question, answer), for the
    longest key."""
    key = "9" * digits
    question, answer = answer_tokens(tokenizer, key, frame.close(QUESTION_BODY, ANSWER_PREFIX))
    return len(frame.lead(tokenizer)) + len(encode(tokenizer, NEEDLE.format(key=key))) + len(question) + len(answer)


def published_question(n_garbage: int, n_prefix: int, key: int) -> str:
    """The published prompt up to its question, the answer prefix left off: the user's turn under a chat template."""
    if not 0 <= n_prefix <= n_garbage <= len(GARBAGE_INF):
        raise ValueError(f"need 0 <= n_prefix <= n_garbage <= {len(GARBAGE_INF)}: {n_prefix}, {n_garbage}")
    lines = [TASK_DESCRIPTION, GARBAGE_INF[:n_prefix], INFORMATION_LINE.format(key=key),
             GARBAGE_INF[:n_garbage - n_prefix], ASKED]
    return "\n".join(lines)


def published_prompt(n_garbage: int, n_prefix: int, key: int) -> str:
    """The published passkey prompt, as jquesnelle/yarn eval/passkey.py:generate_prompt(n_garbage) builds it with
    n_garbage_prefix = `n_prefix` and pass_key = `key` (its two random draws, handed in): the raw frame's text."""
    return RAW.text(published_question(n_garbage, n_prefix, key), ANSWER_PREFIX)


def published_sample(tokenizer, length: int, depth: float, key: int, frame: PromptFrame = RAW) -> PasskeySample:
    """The longest published prompt whose [BOS] + prompt + answer " key" (under a chat template: its rendering +
    answer) fits `length` tokens, the needle at `depth` of its filler (n_prefix = round(depth * n_garbage))."""
    _, answer = answer_tokens(tokenizer, str(key), frame.close(ASKED, ANSWER_PREFIX))

    def ids_at(n: int) -> list[int]:
        return frame.ids(tokenizer, published_question(n, int(round(depth * n)), key), ANSWER_PREFIX)

    bare = len(ids_at(0)) + len(answer)
    if bare > length:
        raise RopeCliError(f"--len {length} is shorter than the published passkey prompt itself "
                           f"({bare} tokens without filler); pass a longer --len, or use ropecli's "
                           "real-text prompt, which needs fewer (passkey --text, --metric/--objective passkey-text)")
    per_char = len(encode(tokenizer, GARBAGE_INF[:4000])) / 4000  # tokens per filler character, to bracket the search
    hi = min(len(GARBAGE_INF), int(1.25 * length / per_char) + 256)
    while hi < len(GARBAGE_INF) and len(ids_at(hi)) + len(answer) <= length:
        hi = min(len(GARBAGE_INF), 2 * hi)
    lo = 0  # characters of filler: lo fits; the longest that fits is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(ids_at(mid)) + len(answer) <= length else (lo, mid - 1)
    if lo == len(GARBAGE_INF):  # the source's whole filler fits: it asserts len(garbage_inf) >= n_garbage
        raise RopeCliError(f"--len {length} is longer than the published passkey prompt can be ({len(ids_at(lo)) + len(answer)} "
                           "tokens: its filler is 10,000 sentences, as the source builds it); pass a shorter --len, or "
                           "use the real-text prompt (passkey --text, --metric/--objective passkey-text)")
    ids = ids_at(lo)
    text = frame.text(published_question(lo, int(round(depth * lo)), key), ANSWER_PREFIX)
    before = frame.ids_of(tokenizer, text[:text.index(INFORMATION_LINE.format(key=key))])
    return PasskeySample(np.array(ids + answer, dtype=np.int64), len(ids), str(key), depth, len(before))


def make_published_samples(tokenizer, length: int, depths: list[float], samples: int, seed: int,
                           first_sample: int = 0, frame: PromptFrame = RAW) -> list[list[PasskeySample]]:
    """The published prompts, samples per depth, [depth index][sample index]; each key drawn from KEY_RANGE seeded by
    (seed, length, depth, sample), like passkey-text's (the same keys under every frame)."""
    out = []
    for depth in depths:
        row = []
        for s in range(first_sample, first_sample + samples):
            rng = np.random.default_rng([seed, length, int(round(depth * 10000)), s])
            row.append(published_sample(tokenizer, length, depth, int(rng.integers(KEY_RANGE[0], KEY_RANGE[1] + 1)), frame))
        out.append(row)
    return out


def build_sample(tokenizer, filler: np.ndarray, length: int, depth: float, key: str,
                 frame: PromptFrame = RAW) -> PasskeySample:
    """One window of exactly `length` tokens; `filler` must hold at least the tokens it needs. Under a chat template
    the filler, needle and question are the user's turn: [head] filler needle filler [question, middle, prefix] answer."""
    prefix = frame.lead(tokenizer)
    needle = encode(tokenizer, NEEDLE.format(key=key))
    question, answer = answer_tokens(tokenizer, key, frame.close(QUESTION_BODY, ANSWER_PREFIX))
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
                 seed: int, first_sample: int = 0, frame: PromptFrame = RAW) -> list[list[PasskeySample]]:
    """samples per depth, [depth index][sample index]; keys and filler offsets seeded by (seed, length, depth, sample),
    so a depth's prompts do not depend on which other depths are asked for."""
    overhead = prompt_overhead(tokenizer, digits, frame)
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
            row.append(build_sample(tokenizer, stream[start:start + span], length, depth, key, frame))
        out.append(row)
    return out
