"""RULER prompts at a length, tokenizer-exact and seeded: the units a task metric scores.

Length (RULER's `generate_samples`): the largest haystack whose prompt fits
    BOS + tokens(prompt, answer prefix included) + tokens_to_generate <= length,
found by bisection on the haystack size n (essay words, lines, or words of the list), the prompt at
each probe drawn from the same seeded generator, so the prompt found is the one a probe measured.
The answer (scored by its likelihood) is at most tokens_to_generate tokens, so prompt and answer fit.

Seeds: a prompt depends only on (seed, length, task, depth, sample index), so every schedule sees the
same prompts (paired) and a depth's prompts do not depend on the other depths asked for. Tasks with no
needle (cwe, fwe) have no depth: they take as many prompts as the others (samples x depths).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.evaluation.chat_template import RAW, PromptFrame, encode
from ropecli.evaluation.ruler.builders import Haystack, TaskPrompt, cwe, fwe, niah, vt, vt_prompt
from ropecli.evaluation.ruler.templates import TASKS, Task

ICL_TOKENS = 500  # variable_tracking.py: the one-shot example is fitted to 500 tokens (here at most a quarter of --len)


@dataclass(frozen=True)
class TaskUnit:
    """One prompt as token ids: the prompt + answer (scored from `answer_start`), and the control (the
    prompt without its needle, + the same answer), or None."""
    prompt: TaskPrompt
    ids: np.ndarray  # (T,) int64: [BOS] prompt answer
    answer_start: int
    control_ids: np.ndarray | None
    control_start: int | None
    haystack: int  # the haystack's size in the builder's units


def check_tasks(names: list[str]) -> list[str]:
    bad = [n for n in names if n not in TASKS]
    if bad:
        raise RopeCliError(f"unknown task '{bad[0]}'; choose from {', '.join(TASKS)} (e.g. --task niah-single,vt)")
    return list(dict.fromkeys(names))


def with_answer(tokenizer, prompt: TaskPrompt, answer: str, frame: PromptFrame = RAW,
                control: bool = False) -> tuple[np.ndarray, int]:
    """([BOS] prompt answer as ids, where the answer starts): the answer as the tokenizer continues the prompt (the
    prompt's text, or its control's, framed: raw, or its question and answer prefix in a chat template)."""
    text = frame.text(prompt.question(prompt.control if control else prompt.text), prompt.prefix)
    head = frame.ids_of(tokenizer, text)
    both = encode(tokenizer, text + answer)
    body = encode(tokenizer, text)
    tail = both[len(body):] if both[:len(body)] == body and len(both) > len(body) else encode(tokenizer, answer)
    return np.array(head + tail, dtype=np.int64), len(head)


def fit(build: Callable[[int], TaskPrompt], count: Callable[[TaskPrompt], int], budget: int, lo: int,
        most: int | None = None) -> tuple[int, TaskPrompt]:
    """The largest n in [lo, most] whose prompt takes at most `budget` tokens, and its prompt (bisection after
    a doubling search, as RULER's binary search from its estimate)."""
    first = build(lo)
    if count(first) > budget:
        return lo, first
    hi = lo
    while True:  # double until a size no longer fits
        nxt = hi * 2 if most is None else min(hi * 2, most)
        if nxt == hi:
            return hi, build(hi)
        if count(build(nxt)) > budget:
            break
        hi = nxt
    good, bad = hi, nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if count(build(mid)) <= budget else (good, mid)
    return good, build(good)


def rng_for(seed: int, length: int, task: str, depth: float | None, sample: int) -> Callable[[], np.random.Generator]:
    key = [seed, length, zlib.crc32(task.encode()), 10001 if depth is None else int(round(depth * 10000)), sample]
    return lambda: np.random.default_rng(key)


def icl_noise(tokenizer, length: int) -> int:
    """vt's one-shot example: the noise lines that fit it in ICL_TOKENS (RULER fits it once per run), or in a
    quarter of `length` where that is less (RULER's 500 tokens leave no room for the question below ~800)."""
    n, _ = fit(lambda k: _vt_shot(k), lambda p: len(encode(tokenizer, p.text)), min(ICL_TOKENS, length // 4), 1)
    return n


def _vt_shot(n: int) -> TaskPrompt:
    text, _, names, prefix = vt_prompt(n, np.random.default_rng(0), None, letters=3)
    return TaskPrompt("vt", text, "", tuple(names), None, None, prefix)


def make_units(tokenizer, hay: Haystack, task_name: str, length: int, depths: list[float], samples: int, seed: int,
               first_sample: int = 0, frame: PromptFrame = RAW) -> list[TaskUnit]:
    """The prompts of one task at `length`, depth-major ([depth 0 samples…, depth 1 samples…]); under a chat template
    (`frame`) the haystack is sized so that the rendered prompt fits."""
    task = TASKS[task_name]
    budget = length - task.tokens_to_generate
    count = lambda p: len(frame.ids(tokenizer, p.question(), p.prefix))  # noqa: E731  [BOS] or the template's head included
    shot = icl_noise(tokenizer, length) if task.kind == "vt" else 0
    D = len(depths)  # no needle (cwe, fwe): samples x depths prompts, sample indices counted in blocks of D, so that
    where = [(d, s) for d in depths for s in range(first_sample, first_sample + samples)] if task.has_needle else \
        [(None, s) for s in range(first_sample * D, (first_sample + samples) * D)]  # a later first_sample follows
    units = []
    for depth, s in where:
        fresh = rng_for(seed, length, task_name, depth, s)
        build = builder(task, hay, depth, fresh, length, shot)
        n, prompt = fit(build, count, budget, _smallest(task), len(hay.vocab) if task.kind == "cwe" else None)
        if count(prompt) > budget:
            raise RopeCliError(f"--len {length} is too short for the task {task_name}: its smallest prompt takes "
                               f"{count(prompt) + task.tokens_to_generate} tokens with the answer's room; "
                               "pass a longer --len")
        ids, start = with_answer(tokenizer, prompt, prompt.answer, frame)
        control = with_answer(tokenizer, prompt, prompt.answer, frame, control=True) if prompt.control is not None \
            else (None, None)
        units.append(TaskUnit(prompt, ids, start, control[0], control[1], n))
    return units


def _smallest(task: Task) -> int:
    return {"cwe": 12, "fwe": 8}.get(task.kind, 1)


def builder(task: Task, hay: Haystack, depth, fresh, length: int, shot: int) -> Callable[[int], TaskPrompt]:
    if task.kind == "niah":
        return lambda n: niah(task, hay, n, depth, fresh())
    if task.kind == "vt":
        return lambda n: vt(task, n, depth, fresh(), shot)
    if task.kind == "cwe":
        if len(hay.vocab) < 60:
            raise RopeCliError("the text has too few distinct words for cwe (60 needed); add text with --data")
        return lambda n: cwe(task, hay, n, fresh(), length)
    return lambda n: fwe(task, n, fresh(), length)
