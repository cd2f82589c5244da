"""Generated answers scored as their authors score them, per prompt.

RULER's tasks (NVIDIA/RULER c3f5e3b, scripts/eval/evaluate.py `postprocess_pred`, scripts/eval/synthetic/constants.py
`string_match_all`): the share of the references found in the prediction, ignoring case (RULER averages it over prompts
and prints x100). The published passkey (jquesnelle/yarn eval/passkey.py `test_model`, after landmark attention's
run_test.py): 10 new tokens, the first run of digits read as an integer and compared with the key (`published_match`:
"\n4711" retrieves 4711, "47110" does not)."""

from __future__ import annotations

import re

from ropecli.evaluation.ruler.templates import TASKS

_CONTROL = re.compile(r"[\x00-\x1f]")
GENERATED_TOKENS = 10  # the published passkey's max_new_tokens (eval/passkey.py:test_model)


def postprocess(prediction: str) -> str:
    """evaluate.py `postprocess_pred`: stripped, control characters turned to newlines, stripped again."""
    return _CONTROL.sub("\n", prediction.strip()).strip()


def string_match_all(prediction: str, references: tuple | list) -> float:
    """One prompt's share of `references` contained in the prediction, case-insensitive (in [0, 1])."""
    pred = postprocess(prediction).lower()
    return sum(1.0 for r in references if r.lower() in pred) / len(references)


def published_match(said: str, key: str) -> bool:
    """The published passkey's rule: the first run of digits in the generated text, as an integer, is the key."""
    found = re.search(r"\d+", said)
    return found is not None and int(found.group()) == int(key)


def score_prompt(backend, unit, generate: bool) -> tuple:
    """One task prompt through the model (`ropecli.backends.backend.ModelBackend`, schedule applied): (1.0 if
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
