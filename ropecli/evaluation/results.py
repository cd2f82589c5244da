"""Typed results of one evaluation (one schedule at one length, one metric); how they are summed from per-unit values
is `ropecli.evaluation.summaries`.

Every result carries its metric and its per-unit values (`values`: per-window mean NLL for ppl,
per-prompt answer NLL for passkey, per-window mean KL for kl; lower is better), which is what paired
statistics read (`ropecli.evaluation.stats`). `to_json()` is the shape printed by `--json`; a result of a
position map names it (`position_map`).

PPL = exp(the estimand, `ropecli.evaluation.estimand`: the mean over documents of each document's NLL
per scored token); `ppl_err` = ppl * its standard error under the inference the verdicts use
(`ropecli.evaluation.inference.paired_one`; delta method; None where it has none). Key PPL the same
on the key predictions.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ropecli.evaluation.stats import ppl_half_width


@dataclass(kw_only=True)
class EvalResult:
    metric: ClassVar[str]
    paired: ClassVar[str]  # the field of per-unit values that pair across schedules
    keys_beside: ClassVar[bool] = False  # carries key-token PPL beside its own value, ranked too (a ppl result)
    documents: ClassVar[str | None] = None  # the field naming each unit's source document (windows); None: prompts
    has_accuracy: ClassVar[bool] = False  # carries `accuracy` (passkey, a task): the share of units answered right
    method: str
    label: str
    params: dict  # the resolved parameters, explicit factor lists left out
    log_n: bool
    len: int
    factor: float  # k
    attention_factor: float
    seconds: float  # wall time of the forward passes (0 when cached)
    position_map: dict | None = None  # {"name", "params"} of a position map at the attention (None: none)
    temperature: dict | None = None  # the model's position temperature as changed ({"attn_scale": 0.2}; None: its own)
    cached: bool = False  # served from the cache in this run (not stored in the cache)

    @property
    def values(self) -> list[float]:
        """Per-unit values that pair across schedules (lower is better); inf where a unit diverged."""
        return [math.inf if v is None else float(v) for v in getattr(self, self.paired)]

    @property
    def weights(self) -> list | None:
        """Each unit's weight in the estimand where units differ (key PPL: key predictions); None: equal."""
        return None

    @property
    def clusters(self) -> list[str] | None:
        """The source document of each unit (windows of one document are not independent); None for
        passkey prompts (each has its own seeded key and filler offset)."""
        names = getattr(self, self.documents) if self.documents else None
        return list(names) if isinstance(names, list) else None

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    def stored(self) -> dict[str, Any]:
        """What the cache keeps: everything but `cached`."""
        out = self.to_json()
        out.pop("cached")
        return out


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(kw_only=True)
class PplResult(EvalResult):
    metric: ClassVar[str] = "ppl"
    keys_beside: ClassVar[bool] = True
    paired: ClassVar[str] = "window_nll"
    documents: ClassVar[str | None] = "windows"
    ppl: float
    nll: float  # mean NLL per scored token (nats) = log PPL
    tokens: int
    ppl_err: float | None
    window_nll: list  # per-window mean NLL (None: diverged)
    windows: list  # source document of each window
    # loss by position: mean NLL of the predictions in each of POSITION_BINS equal bins of the window,
    # [window][bin] and averaged over windows; None where a window came from a cache entry without them
    window_position_nll: list | None = None
    position_nll: list | None = None
    # the key-token metric (`ropecli.evaluation.key_metric`): the NLL of the predictions a KeyRule marks in
    # each window; None without a rule, or where a window's cache entry has no per-prediction NLL
    key_rule: str | None = None
    key_ppl: float | None = None
    key_nll: float | None = None
    key_ppl_err: float | None = None
    key_tokens: int | None = None
    window_key_nll: list | None = None  # per-window mean key NLL (None: no key prediction, or diverged)
    window_key_tokens: list | None = None

    def _with_keys(self) -> list[int]:
        return [i for i, n in enumerate(self.window_key_tokens or []) if n]

    def key_values(self) -> list[float] | None:
        """Per-window key NLL over the windows with key predictions (inf: diverged); None without them.
        The same windows for every schedule: the key set depends on the tokens only."""
        if self.window_key_nll is None:
            return None
        return [math.inf if self.window_key_nll[i] is None else float(self.window_key_nll[i]) for i in self._with_keys()]

    def key_clusters(self) -> list[str]:
        return [self.windows[i] for i in self._with_keys()]

    def cell(self) -> str:
        """`59.91 ± 6.1`: PPL with the 95% half-width of its spread across windows; `inf` for a diverged run. Every
        result type has its `cell`: how compare's table shows it."""
        return _ppl_cell(self.ppl, self.ppl_err, len(self.window_nll or []))

    def key_cell(self) -> str:
        """Key-token PPL ± its 95% half-width (over the windows that have key predictions); '—' without it."""
        if self.key_ppl is None:
            return "—"
        return _ppl_cell(self.key_ppl, self.key_ppl_err, sum(1 for n in self.window_key_tokens or [] if n))

    def key_weights(self) -> list[int]:
        """The key predictions of each window with key predictions: the estimand's weights."""
        return [int(self.window_key_tokens[i]) for i in self._with_keys()]


@dataclass(kw_only=True)
class KeyPplResult(PplResult):
    """A ppl evaluation read on its key predictions: pairs on the per-window key NLL (`key_values`)."""
    metric: ClassVar[str] = "key-ppl"
    keys_beside: ClassVar[bool] = False
    paired: ClassVar[str] = "window_key_nll"

    @property
    def values(self) -> list[float]:
        return self.key_values() or []

    @property
    def clusters(self) -> list[str] | None:
        return self.key_clusters()

    @property
    def weights(self) -> list | None:
        return self.key_weights()

    def cell(self) -> str:
        return self.key_cell()


@dataclass(kw_only=True)
class PasskeyResult(EvalResult):
    metric: ClassVar[str] = "passkey"
    paired: ClassVar[str] = "prompt_answer_nll"
    has_accuracy: ClassVar[bool] = True
    accuracy: float
    answer_nll: float | None
    samples: int
    digits: int
    by_depth: list  # [{depth, accuracy, answer_nll, samples}]
    prompt_correct: list  # teacher-forced: every key token the argmax
    prompt_answer_nll: list
    generated_accuracy: float | None = None  # --score generate: the published rule on 10 greedy tokens
    prompt_generated: list | None = None  # per prompt: the rule's verdict
    prompt_said: list | None = None  # per prompt: the generated text

    def cell(self) -> str:
        return f"{self.accuracy:.0%}" + (f" (gen {self.generated_accuracy:.0%})" if self.generated_accuracy is not None else "")

    def agreement(self) -> int | None:
        """Prompts on which the teacher-forced and the published (generated) verdicts agree; None without generation."""
        if self.prompt_generated is None:
            return None
        return sum(a == b for a, b in zip(self.prompt_correct, self.prompt_generated))


@dataclass(kw_only=True)
class PasskeyTextResult(PasskeyResult):
    """ropecli's real-text passkey (`ropecli.evaluation.passkey`: passkey-text), read as the published one is."""
    metric: ClassVar[str] = "passkey-text"
    cell = PasskeyResult.cell  # its own cell in compare's table, the published one's


@dataclass(kw_only=True)
class KlResult(EvalResult):
    metric: ClassVar[str] = "kl"
    paired: ClassVar[str] = "window_kl"
    documents: ClassVar[str | None] = "windows"
    kl_mean: float
    kl_p99: float
    kl_max: float
    top1_agreement: float  # percent of positions where both argmaxes agree
    tokens: int
    window_kl: list
    windows: list

    def cell(self) -> str:
        return f"{self.kl_mean:.4f}"


def _ppl_cell(ppl: float | None, err: float | None, windows: int) -> str:
    if ppl is None or ppl == math.inf:
        return "inf"
    half = ppl_half_width(err, windows)
    return f"{ppl:.4g}" + (f" ± {half:.3g}" if half else "")
