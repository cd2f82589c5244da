"""A metric is one record (`Metric`): what its units are, what one unit needs from the model, how a
cached unit is checked, summed into a typed result and named in a table. The `Evaluator` keeps only the
protocol (windows or prompts, the cache, ranks, the schedule applied) and asks the record for the rest:

    units       "windows" (token windows of the text) or "prompts" (passkey) or "task" (a RULER task's)
    cached_as   the metric whose units it reads (key-ppl reads ppl's windows); itself by default
    score       (evaluator, spec, schedule, unit) -> the unit's value: one forward pass (or a few)
    passes      (evaluator, unit) -> full-length forward passes `score` runs (what `forward_passes` counts)
    fresh       (evaluator, value) -> whether a cached value still serves (ppl under a key rule needs every
                prediction's NLL; a task under --generate needs its generation)
    key         (evaluator, backend rope) -> the fields of the unit's cache key beyond the common ones
    check       (evaluator, length) -> raises on a length the metric does not take, before any forward pass
    scales      the evaluator applies the schedule around `score` (KL switches between states itself)
    summarize   (evaluator, spec, schedule, geometry, length, metric, values, inputs, seconds) -> EvalResult
    words       what its per-unit value is, in a verdict line ("PPL", "passkey answer NLL", …)
    unit_word   what its units are called in a verdict line (windows, keys, prompts)
    column      its column's heading in a table ("PPL", "passkey", a task's name)
    result      () -> its result type (`ropecli.evaluation.results`): what crosses the layers, typed
    estimand    the result's field the estimand of a search or a ranking reads (nll, key_nll, answer_nll)
    objective   whether a search may minimize it (`--objective`'s choices); ranks: whether advise may rank by it
    prefixes    whether one forward pass of a long window scores every shorter length (its windows' kept
                per-prediction NLL: ppl and key-ppl), `Evaluator.evaluate_lengths`

Adding a metric is adding a record here and its result type (with its cell in `ropecli.report.tables`);
PPL, key-token PPL, passkey, KL and every RULER task are records (`tests/test_metrics.py` checks each is whole). Torch-free: scoring reaches the model through the backend protocol.
"""

from __future__ import annotations

import functools
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, Callable

from ropecli.errors import RopeCliError
from ropecli.evaluation import results, task_results
from ropecli.evaluation.ruler.answer_scoring import GENERATED_TOKENS, passes, published_match, score_prompt
from ropecli.evaluation.ruler.templates import TASKS
from ropecli.evaluation.summaries import summarize_kl, summarize_passkey, summarize_ppl
from ropecli.evaluation.task_results import summarize_task


@dataclass(frozen=True)
class Metric:
    name: str
    units: str
    score: Callable[..., Any]
    summarize: Callable[..., Any]
    words: str
    column: str
    result: Callable[[], type]
    estimand: str
    unit_word: str = "windows"
    prefixes: bool = False
    cached_as: str | None = None
    passes: Callable[..., int] = lambda ev, unit: 1
    fresh: Callable[..., bool] = lambda ev, value: True
    key: Callable[..., dict] = lambda ev, rope: {}
    check: Callable[..., None] = lambda ev, length: None
    scales: bool = True
    objective: bool = True  # a search may minimize its estimand (`search --objective`, `tuning.objective`)
    ranks: bool = False  # advise may rank by it (`advise --metric`): an estimand over the text's windows
    at_train_len: bool = False  # compare runs it at L with the schedules built for the target's k (kl)
    measure: str = ""  # what a ranking or a search by it compares, in words ("log-PPL"); default: `words`
    field: str = ""  # a result row's field holding its headline value ("ppl", "key_ppl", "accuracy"); default: estimand
    beside: str | None = None  # a metric shown beside it from the same rows (ppl: key-token PPL from PPL's windows)
    verdict_beside: str = ""  # shown beside another metric: the field of that metric's rows holding its paired verdict
    note: str = ""  # the line under compare's table when it is a column
    companion: tuple[str, Callable[[Any], str]] | None = None  # a second column from its results: (heading, cell)

    def __post_init__(self):
        if not self.measure:
            object.__setattr__(self, "measure", self.words)
        if not self.field:
            object.__setattr__(self, "field", self.estimand)

    @property
    def unit_metric(self) -> str:
        """The metric its units are computed and cached under."""
        return self.cached_as or self.name

    @property
    def unit_record(self) -> "Metric":
        """The record of the metric its units are computed and cached under (key-ppl: ppl's); itself by default."""
        return REGISTRY[self.cached_as] if self.cached_as else self

    @property
    def prompted(self) -> bool:
        """Whether it scores prompts (passkey, a task) rather than windows of the text."""
        return self.units != "windows"


def _ppl_score(ev, spec, sched, unit) -> tuple:
    return ev.backend.window_nll(unit[0], ev.chunk_tokens, ev.score_last, keep_tokens=ev.keep_tokens or ev.key_rule is not None)


def _ppl_fresh(ev, value) -> bool:  # entries without per-prediction NLL serve only where nobody reads them
    return not (ev.keep_tokens or ev.key_rule is not None) or (len(value) > 3 and bool(value[3]))


def _ppl_summary(ev, spec, sched, geom, length, metric, per_unit, inputs, seconds):
    return summarize_ppl(spec, sched, geom, length, per_unit, inputs.windows(length).names, seconds,
                         ev.key_fields(per_unit, inputs, length), REGISTRY[metric].result())


def _passkey_score(ev, spec, sched, unit) -> tuple:
    """(1.0 if the key's tokens are the argmax teacher-forced else 0.0, their NLL) and under --score generate (the
    evaluator's `generate`) also (1.0 if the published rule reads the key in 10 greedy tokens, what they said):
    `ropecli.evaluation.ruler.answer_scoring.published_match`."""
    ids, start = unit
    correct, nll = ev.backend.passkey_scores(ids, start)
    if not ev.generate:
        return correct, nll
    said = ev.backend.greedy(ids[:start], GENERATED_TOKENS)
    key = ev.backend.tokenizer.decode(list(ids[start:])).strip()  # the answer " K" (its digits) as the prompt has it
    return correct, nll, float(published_match(said, key)), said


def _passkey_fresh(ev, value) -> bool:  # a cached prompt without its generation serves only where none is asked
    return not ev.generate or len(value) > 2


def _passkey_summary(ev, spec, sched, geom, length, metric, per_unit, inputs, seconds):
    return summarize_passkey(spec, sched, geom, length, per_unit, inputs.prompts(length, metric), inputs.depths, seconds,
                             REGISTRY[metric].result())


def _kl_summary(ev, spec, sched, geom, length, metric, per_unit, inputs, seconds):
    return summarize_kl(spec, sched, geom, length, per_unit, inputs.windows(length).names, seconds)


def _task_score(ev, spec, sched, unit) -> tuple:
    return score_prompt(ev.backend, unit[0], ev.generate)


def _task_passes(ev, unit) -> int:
    return passes(unit[0], ev.generate)


def _task_summary(ev, spec, sched, geom, length, metric, per_unit, inputs, seconds):
    return summarize_task(spec, sched, geom, length, metric, per_unit, inputs.task_units(metric, length), seconds)


def _ppl_check(ev, length: int) -> None:
    if ev.score_last and ev.score_last >= length:
        raise RopeCliError(f"--score-last {ev.score_last} must be below --len {length}")


def _key_ppl_check(ev, length: int) -> None:
    if ev.key_rule is None:
        raise RopeCliError("--metric key-ppl needs a key-token rule: pass --key-tokens far-repeat (or long-short)")
    _ppl_check(ev, length)


def _kl_check(ev, length: int) -> None:
    L = ev.backend.rope.shipped_len
    if length > L:
        raise RopeCliError(f"--len {length} is beyond the shipped length Ls = {L}: KL against the model as shipped "
                           "measures a schedule's cost within it; pass --len at most Ls")


PPL = Metric("ppl", "windows", _ppl_score, _ppl_summary, "PPL", "PPL", lambda: results.PplResult, "nll", fresh=_ppl_fresh,
             key=lambda ev, rope: {"score_last": ev.score_last}, check=_ppl_check, prefixes=True, ranks=True,
             measure="log-PPL", field="ppl", beside="key-ppl")
KEY_PPL = Metric("key-ppl", "windows", _ppl_score, _ppl_summary, "key PPL", "key PPL", lambda: results.KeyPplResult, "key_nll",
                 cached_as="ppl", ranks=True, measure="log key-token PPL", fresh=_ppl_fresh, check=_key_ppl_check, prefixes=True,
                 field="key_ppl", verdict_beside="key_vs_best")
PASSKEY = Metric("passkey", "prompts", _passkey_score, _passkey_summary, "passkey answer NLL", "passkey", lambda: results.PasskeyResult, "answer_nll", unit_word="keys",
                 passes=lambda ev, unit: 1 + bool(ev.generate), fresh=_passkey_fresh,
                 key=lambda ev, rope: {"prompt": "landmark"},  # absent: passkey-text's prompts, cached under "passkey" before
                 field="accuracy", note="passkey: the published prompt (landmark attention's, as YaRN and LongRoPE run it); "
                 "accuracy over all depths; bold/≈ rank by the answer NLL (paired over the same prompts).")
PASSKEY_TEXT = Metric("passkey-text", "prompts", _passkey_score, _passkey_summary, "passkey-text answer NLL", "passkey-text", lambda: results.PasskeyTextResult,
                      "answer_nll", unit_word="keys", field="accuracy", passes=lambda ev, unit: 1 + bool(ev.generate),
                      fresh=_passkey_fresh, note="passkey-text: ropecli's real-text variant (the key once inside the text, no instruction); "
                      "accuracy over all depths; bold/≈ rank by the answer NLL (paired over the same prompts).")
PASSKEYS = (PASSKEY, PASSKEY_TEXT)  # the passkey prompts, the published one first (effective length takes the first measured)
KL = Metric("kl", "windows", lambda ev, spec, sched, unit: ev.backend.window_kl(
                unit[0], sched, spec.log_n, ev.chunk_tokens, spec.position_map, ev.calibration),
            _kl_summary, "KL", "KL", lambda: results.KlResult, "kl_mean",
            key=lambda ev, rope: {"reference": "native"} if rope.shipped is not None else {},  # vs as shipped
            check=_kl_check, scales=False, objective=False, at_train_len=True,
            companion=("top-1 @ L", lambda r: f"{r.top1_agreement:.1f}%"))


@functools.lru_cache(maxsize=None)
def _task(name: str) -> Metric:
    return Metric(name, "task", _task_score, _task_summary, f"{name} answer NLL", name, lambda: task_results.TaskResult, "answer_nll",
                  unit_word="prompts", passes=_task_passes, fresh=lambda ev, value: not ev.generate or value[4] is not None)


class Registry(MutableMapping):
    """{name: Metric}: ppl, key-ppl, passkey, kl (and any record set here), then one metric per RULER task, read
    from the task registry (`ropecli.evaluation.ruler.templates.TASKS`) at every look, so a task added there is a
    metric everywhere: --metric, --task, --objective, compare's columns, the cache."""

    def __init__(self, *records: Metric):
        self.own = {m.name: m for m in records}

    def _all(self) -> dict[str, Metric]:
        return {**self.own, **{t: _task(t) for t in TASKS if t not in self.own}}

    def __getitem__(self, name: str) -> Metric:  # a lookup per unit: no dict built

        if name in self.own:
            return self.own[name]
        if name in TASKS:
            return _task(name)
        raise KeyError(name)

    def __setitem__(self, name: str, record: Metric) -> None:
        self.own[name] = record

    def __delitem__(self, name: str) -> None:
        del self.own[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


REGISTRY = Registry(PPL, KEY_PPL, PASSKEY, PASSKEY_TEXT, KL)


def objective_names() -> list[str]:
    """What a search may minimize (`search --objective`): every metric whose estimand a search can take."""
    return [n for n, m in REGISTRY.items() if m.objective]


def ranking_names() -> list[str]:
    """What advise may rank by (`advise --metric`)."""
    return [n for n, m in REGISTRY.items() if m.ranks]


def is_task(name: str) -> bool:
    """A RULER task (`ropecli.evaluation.ruler`): its name is its metric's."""
    return name in REGISTRY and REGISTRY[name].units == "task"


def prompted(name: str) -> bool:
    """Whether the metric `name` scores prompts (passkey, a task) rather than windows of the text (a record:
    `Metric.prompted`)."""
    return metric_record(name).prompted


def metric_record(name: str) -> Metric:
    """The record of `name`, or one line naming the choices: where a name is read (a command's option, a stored result's
    `metric`); the layers below the commands pass records."""
    if name not in REGISTRY:
        raise RopeCliError(f"unknown metric '{name}'; choose from {', '.join(REGISTRY)}")
    return REGISTRY[name]
