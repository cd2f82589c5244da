"""The result of one RULER task (`ropecli.evaluation.ruler`) for one schedule at one length.

Per prompt (paired across schedules: every schedule sees the same prompts):
    answer NLL   -log p(answer | prompt, answer prefix) in nats, teacher-forced: the continuous score
                 every model size shows (what verdicts rank, lower is better)
    gain         the answer NLL of the same prompt without the queried needle(s) minus the answer NLL:
                 what the needle is worth to the model in nats (None for cwe and fwe: no needle)
    correct      every answer token is the argmax given its prefix (greedy would produce the answer)
    match        RULER's string_match_all of a greedy generation (tokens_to_generate tokens), with
                 --generate; None without
Summaries are the means over prompts, overall and per depth (RULER's heat map: score against depth x
length). Prompts are independent draws (own seeded keys, values and haystack offset): units inference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ropecli.evaluation.results import EvalResult, _finite
from ropecli.evaluation.ruler.answer_scoring import string_match_all
from ropecli.evaluation.summaries import _head

if TYPE_CHECKING:
    from ropecli.rope.geometry import Geometry
    from ropecli.rope.schedule import Schedule
    from ropecli.spec import Spec


@dataclass(kw_only=True)
class TaskResult(EvalResult):
    paired: ClassVar[str] = "prompt_answer_nll"
    has_accuracy: ClassVar[bool] = True
    task: str
    samples: int
    answer_nll: float | None  # mean over prompts (None: some prompt diverged)
    gain: float | None  # mean over prompts
    accuracy: float  # share of prompts whose answer is the argmax throughout
    match: float | None  # RULER's score (mean string_match_all, 0..1), with --generate
    by_depth: list  # [{depth, answer_nll, gain, accuracy, match, samples}]
    prompt_answer_nll: list
    prompt_gain: list
    prompt_correct: list
    prompt_match: list | None

    def cell(self) -> str:
        """Answer NLL (+ gain over the needle-free prompt)[, RULER's score]."""
        out = "inf" if self.answer_nll is None else f"{self.answer_nll:.2f}"
        out += "" if self.gain is None else f" (+{self.gain:.1f})" if self.gain >= 0 else f" ({self.gain:.1f})"
        return out + (f" {self.match:.0%}" if self.match is not None else "")
    prompt_depth: list
    prompt_answer_tokens: list
    prompt_references: list | None = None  # what RULER's string match looks for in each prompt's answer
    generated: list | None = None  # the greedy generations (with --generate)

    @property
    def metric(self) -> str:  # one result type for every task: the metric is the task's name
        return self.task


def _mean(xs: list) -> float | None:
    vals = [x for x in xs if x is not None]
    return _finite(sum(vals) / len(vals)) if vals and len(vals) == len(xs) else None


def summarize_task(spec: "Spec", sched: "Schedule", geom: "Geometry", length: int, task: str, per_prompt: list[tuple],
                   units: list, seconds: float) -> TaskResult:
    """Means overall and per depth from each prompt's (correct, answer NLL, answer tokens, control NLL, generated)."""
    nll = [_finite(p[1]) for p in per_prompt]
    gain = [None if p[3] is None or not math.isfinite(p[1]) else float(p[3]) - float(p[1]) for p in per_prompt]
    generated = [p[4] for p in per_prompt] if all(len(p) > 4 and p[4] is not None for p in per_prompt) else None
    match = [string_match_all(g, u.prompt.references) for g, u in zip(generated, units)] if generated else None
    depth = [u.prompt.depth for u in units]
    correct = [bool(p[0]) for p in per_prompt]
    by_depth = []
    for d in dict.fromkeys(depth):
        idx = [i for i, x in enumerate(depth) if x == d]
        by_depth.append({"depth": d, "answer_nll": _mean([nll[i] for i in idx]), "gain": _mean([gain[i] for i in idx]),
                         "accuracy": sum(correct[i] for i in idx) / len(idx),
                         "match": _mean([match[i] for i in idx]) if match else None, "samples": len(idx)})
    return TaskResult(**_head(spec, sched, geom, length, seconds), task=task, samples=len(per_prompt),
                      answer_nll=_mean(nll), gain=_mean(gain), accuracy=sum(correct) / len(correct),
                      match=_mean(match) if match else None, by_depth=by_depth, prompt_answer_nll=nll, prompt_gain=gain,
                      prompt_correct=correct, prompt_match=match, prompt_depth=depth,
                      prompt_answer_tokens=[int(p[2]) for p in per_prompt],
                      prompt_references=[list(u.prompt.references) for u in units], generated=generated)
