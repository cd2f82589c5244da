"""RULER's score of a generated answer (NVIDIA/RULER c3f5e3b, scripts/eval/evaluate.py `postprocess_pred`,
scripts/eval/synthetic/constants.py `string_match_all`), per prompt: the share of the references found
in the prediction, ignoring case (RULER averages it over prompts and prints x100)."""

from __future__ import annotations

import re
from ropecli.evaluation.ruler.templates import TASKS

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(prediction: str) -> str:
    """evaluate.py `postprocess_pred`: stripped, control characters turned to newlines, stripped again."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def string_match_all(prediction: str, references: tuple | list) -> float:
    """One prompt's share of `references` contained in the prediction, case-insensitive (in [0, 1])."""
    pred = postprocess(prediction).lower()
    return sum(1.0 for r in references if r.lower() in pred) / len(references)


def score_prompt(backend, unit, generate: bool) -> tuple:
    """One task prompt through the model (`ropecli.models.backend.ModelBackend`, schedule applied): (1.0 if
    the answer is the argmax throughout else 0.0, answer NLL, answer tokens, the control prompt's answer NLL
    (None: no needle), the greedy generation (None without `generate`)). Forward passes: 1, +1 for the
    control, +1 prefill (and its decode steps) for the generation."""
    correct, nll = backend.passkey_scores(unit.ids, unit.answer_start)
    control = backend.passkey_scores(unit.control_ids, unit.control_start)[1] if unit.control_ids is not None else None
    text = backend.greedy(unit.ids[:unit.answer_start], TASKS[unit.prompt.task].tokens_to_generate) if generate else None
    return correct, nll, len(unit.ids) - unit.answer_start, control, text


def passes(unit, generate: bool) -> int:
    """Full-length forward passes `score_prompt` runs for `unit`."""
    return 1 + (unit.control_ids is not None) + bool(generate)
