"""One RULER prompt of each kind, from a seeded generator and a haystack size (torch-free, tokenizer-free).

Each builder follows its RULER generator (NVIDIA/RULER c3f5e3b, scripts/data/synthetic/): the same
template, needle, answer prefix and haystack construction; `n` is the haystack's size in RULER's units
(essay: words of the text; noise / needle haystacks: lines; cwe: distinct words; fwe: words), the number
`ropecli.evaluation.ruler.generate.fit` searches. Where ropecli departs from RULER, for a depth axis and
for text without a network:
- the queried needle sits at the asked `depth` (RULER draws every needle's depth from DEPTHS); the other
  needles (distractor keys, further values) are drawn from DEPTHS as RULER does;
- essay haystacks are the user's text (RULER: Paul Graham's essays), cut into sentences at . ! ? (RULER:
  nltk's punkt); keys that are words and cwe's words come from the text's own vocabulary (RULER:
  wonderwords' lists, which it does not pin);
- vt's one-shot example is drawn directly with fresh 3-letter names and value (RULER draws it once with
  value 12345 and re-randomizes both per sample: the same distribution).
Each prompt also carries the continuation its answer-likelihood scorer scores and, where the task has a
needle, the same prompt without the queried needle(s) (the control of the likelihood gain).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import numpy as np

from ropecli.deferred import deferred
from ropecli.evaluation.ruler.templates import (
    CWE_ANSWER_PREFIX,
    CWE_FREQ_CW,
    CWE_FREQ_UCW,
    CWE_NUM_CW,
    CWE_TEMPLATE,
    DEPTHS,
    FWE_ALPHA,
    FWE_ANSWER_PREFIX,
    FWE_TEMPLATE,
    FWE_WORDLEN,
    NEEDLE,
    NIAH_ANSWER_PREFIX,
    NIAH_TEMPLATE,
    NOISE,
    VT_ANSWER_PREFIX,
    VT_HOPS,
    VT_TEMPLATE,
    Task,
    singular,
)

special = deferred("scipy.special")


@dataclass(frozen=True)
class TaskPrompt:
    task: str
    text: str  # the prompt, ending in the answer prefix: what the model continues
    answer: str  # the continuation the answer-likelihood scorer scores
    references: tuple  # what RULER's string_match_all looks for in a generated answer
    depth: float | None  # where the queried needle sits in the haystack (0 first, 1 last); None: no needle
    control: str | None  # the prompt without the queried needle(s); None where the task has none
    prefix: str = ""  # the answer prefix `text` (and `control`) end with: the assistant's turn under a chat template

    def question(self, text: str | None = None) -> str:
        """`text` (default the prompt) without its answer prefix: the user's turn under a chat template."""
        text = self.text if text is None else text
        assert text.endswith(self.prefix), "a prompt ends with its answer prefix"
        return text[:len(text) - len(self.prefix)]


@dataclass(frozen=True)
class Haystack:
    """The user's text as RULER's essay haystack: its words (whitespace collapsed) and its vocabulary."""
    words: tuple
    vocab: tuple  # distinct lower-case alphabetic words of 3+ letters, sorted

    @classmethod
    def of(cls, texts: list[str]) -> "Haystack":
        words = tuple(re.sub(r"\s+", " ", " ".join(texts)).strip().split(" "))
        vocab = sorted({w.lower() for w in words if w.isalpha() and len(w) >= 3})
        return cls(words, tuple(vocab))


def sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+", text.strip())


def random_value(rng: np.random.Generator, kind: str, hay: Haystack) -> str:
    """niah.py `generate_random`: a 7-digit number, a uuid4, or (words) an adjective-noun pair, here two words
    of the text's vocabulary."""
    if kind == "numbers":
        return str(int(rng.integers(10 ** 6, 10 ** 7)))
    if kind == "uuids":
        return str(uuid.UUID(int=int.from_bytes(rng.bytes(16), "big"), version=4))
    a, b = rng.integers(0, len(hay.vocab), size=2)
    return f"{hay.vocab[a]}-{hay.vocab[b]}"


def essay_words(hay: Haystack, n: int, u: float) -> str:
    """n words of the text from a place u in [0, 1) (repeated where the text is shorter, as RULER does)."""
    words = hay.words * (n // len(hay.words) + 1) if n > len(hay.words) else hay.words
    start = int(u * (len(words) - n + 1))
    return " ".join(words[start:start + n])


def niah(task: Task, hay: Haystack, n: int, depth: float, rng: np.random.Generator) -> TaskPrompt:
    """niah.py `generate_input_output` with the queried key's first needle at `depth`."""
    cfg = task.niah
    u = rng.random()
    keys, values, needles = [], [], []  # needles: (key index, text)
    num_k = max(cfg.num_k, cfg.num_q)  # niah.py: args.num_needle_k = max(args.num_needle_k, args.num_needle_q)
    for k in range(num_k):
        keys.append(random_value(rng, cfg.type_k, hay))
        values.append([random_value(rng, cfg.type_v, hay) for _ in range(cfg.num_v)])
        needles += [(k, NEEDLE.format(type_needle_v=cfg.type_v, key=keys[k], value=v)) for v in values[k]]
    queried = [int(i) for i in rng.permutation(num_k)[:cfg.num_q]]
    others = [d / 100 for d in rng.choice(DEPTHS, size=len(needles), replace=False)]
    first = next(i for i, (k, _) in enumerate(needles) if k == queried[0])
    depths = [depth if i == first else others[i] for i in range(len(needles))]
    if cfg.haystack == "essay":
        units = sentences(essay_words(hay, n, u))
    elif cfg.haystack == "noise":
        units = [NOISE] * n
    else:  # needle: distractor needles, one per line
        units = [NEEDLE.format(type_needle_v=cfg.type_v, key=random_value(rng, cfg.type_k, hay),
                               value=random_value(rng, cfg.type_v, hay)) for _ in range(n)]
    joiner = " " if cfg.haystack == "essay" else "\n"

    def context(skip: set) -> str:  # the needles between the units, at their depths; `skip`: keys left out
        placed = sorted((min(int(len(units) * d), len(units)), i) for i, d in enumerate(depths))
        parts, last = [], 0
        for pos, i in placed:
            parts += units[last:pos]
            if needles[i][0] not in skip:
                parts.append(needles[i][1])
            last = pos
        return joiner.join(parts + units[last:])

    q = [keys[i] for i in queried]
    query = ", ".join(q[:-1]) + ", and " + q[-1] if len(q) > 1 else q[0]
    answers = [v for i in queried for v in values[i]]
    template, prefix, type_v = NIAH_TEMPLATE + NIAH_ANSWER_PREFIX, NIAH_ANSWER_PREFIX, cfg.type_v
    if cfg.num_q * cfg.num_v == 1:
        template, prefix, type_v = singular(template), singular(prefix), type_v[:-1]
    text = template.format(type_needle_v=type_v, context=context(set()), query=query)
    control = template.format(type_needle_v=type_v, context=context(set(queried)), query=query)
    return TaskPrompt(task.name, text, " " + ", ".join(answers), tuple(answers), depth, control,
                      prefix.format(type_needle_v=type_v, query=query))


def _names(rng: np.random.Generator, count: int, letters: int) -> list[str]:
    out: list[str] = []
    while len(out) < count:
        name = "".join(chr(65 + int(c)) for c in rng.integers(0, 26, size=letters))
        if name not in out:
            out.append(name)
    return out


def vt_prompt(n: int, rng: np.random.Generator, depth: float | None, letters: int = 5) -> tuple[str, str, list[str], str]:
    """variable_tracking.py `generate_chains` / `generate_input_output` (noise haystack, one chain of VT_HOPS
    hops): (prompt, the prompt without the chain, the chain's names, the answer prefix both end with). `depth`: the first assignment's place
    (None: RULER's uniform draw, as for the one-shot example)."""
    names = _names(rng, VT_HOPS + 1, letters)
    value = str(int(rng.integers(10000, 99999)))
    chain = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(VT_HOPS)]
    first = int(rng.integers(0, n + 1)) if depth is None else min(int(round(depth * n)), n)
    rest = sorted(int(x) for x in rng.integers(first, n + 1, size=VT_HOPS))
    lines = [NOISE] * n
    for j, pos in enumerate([first] + rest):  # chain order kept: each line after the one before
        lines.insert(pos + j, chain[j])
    template = VT_TEMPLATE + VT_ANSWER_PREFIX
    text = template.format(context="\n".join(lines).replace(". \n", ".\n"), query=value, num_v=VT_HOPS + 1)
    control = template.format(context="\n".join([NOISE] * n), query=value, num_v=VT_HOPS + 1)
    return text, control, names, VT_ANSWER_PREFIX.format(query=value, num_v=VT_HOPS + 1)


def vt(task: Task, n: int, depth: float, rng: np.random.Generator, icl_noise: int) -> TaskPrompt:
    """The one-shot example (3-letter names, `icl_noise` noise lines: RULER's 500-token example) with its answer,
    a blank line, then the question (variable_tracking.py `sys_vartrack_w_noise_random`)."""
    shot, _, shot_names, _ = vt_prompt(icl_noise, rng, None, letters=3)
    icl = shot + " " + " ".join(shot_names) + "\n"
    text, control, names, prefix = vt_prompt(n, rng, depth)
    return TaskPrompt(task.name, icl + "\n" + text, " ".join(names), tuple(names), depth, icl + "\n" + control, prefix)


def cwe_example(rng: np.random.Generator, vocab: tuple, num_words: int, common: int, uncommon: int) -> tuple[str, list]:
    """common_words_extraction.py `get_example`: (the numbered list, its CWE_NUM_CW common words)."""
    picked = [vocab[i] for i in rng.choice(len(vocab), size=num_words, replace=False)]
    listed = picked[:CWE_NUM_CW] * common + picked[CWE_NUM_CW:] * uncommon
    listed = [listed[i] for i in rng.permutation(len(listed))]
    return " ".join(f"{i + 1}. {w}" for i, w in enumerate(listed)), picked[:CWE_NUM_CW]


def cwe(task: Task, hay: Haystack, n: int, rng: np.random.Generator, length: int) -> TaskPrompt:
    """common_words_extraction.py `generate_input_output`: one example (its answer numbered), then the list."""
    small = length < 4096  # RULER's shorter variant below 4096 tokens
    shot_ctx, shot_common = cwe_example(rng, hay.vocab, 20 if small else 40, 3 if small else 10, 1 if small else 3)
    ctx, common = cwe_example(rng, hay.vocab, n, 6 if small else CWE_FREQ_CW, 1 if small else CWE_FREQ_UCW)
    template = CWE_TEMPLATE + CWE_ANSWER_PREFIX
    numbered = lambda ws: " ".join(f"{i + 1}. {w}" for i, w in enumerate(ws))  # noqa: E731
    text = template.format(context=shot_ctx) + " " + numbered(shot_common) + "\n" + template.format(context=ctx)
    return TaskPrompt(task.name, text, " " + numbered(common), tuple(common), None, None, CWE_ANSWER_PREFIX)


def fwe(task: Task, n: int, rng: np.random.Generator, length: int) -> TaskPrompt:
    """freq_words_extraction.py `generate_input_output`: coded words with Zipf(alpha) counts out of n words, the
    most frequent one replaced by '...' (noise); the answer the next three."""
    size = max((length - 50) // 50, 4)  # RULER's vocab_size = (max_seq_length - tokens_to_generate) // 50
    vocab: set = set()
    while len(vocab) < size:
        vocab |= {"".join(chr(97 + int(c)) for c in rng.integers(0, 26, size=FWE_WORDLEN)) for _ in range(size - len(vocab))}
    words = sorted(vocab)
    words = [words[i] for i in rng.permutation(len(words))]
    words[0] = "..."
    counts = (n * np.arange(1, len(words) + 1, dtype=np.float64) ** -FWE_ALPHA / special.zeta(FWE_ALPHA)).astype(int)
    stream = [w for w, c in zip(words, counts) for _ in range(c)]
    stream = [stream[i] for i in rng.permutation(len(stream))]
    text = (FWE_TEMPLATE + FWE_ANSWER_PREFIX).format(context=" ".join(stream))
    return TaskPrompt(task.name, text, " " + " ".join(words[1:4]), tuple(words[1:4]), None, None, FWE_ANSWER_PREFIX)
