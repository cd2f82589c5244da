"""Typed results of one evaluation (one schedule at one length, one metric), and how they are summed.

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
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # numpy and the schedules load when a result is summed, not when the CLI starts
    from ropecli.rope.geometry import Geometry
    from ropecli.rope.schedule import Schedule
    from ropecli.rope.spec import Spec


@dataclass(kw_only=True)
class EvalResult:
    metric: ClassVar[str]
    paired: ClassVar[str]  # the field of per-unit values that pair across schedules
    keys_beside: ClassVar[bool] = False  # carries key-token PPL beside its own value, ranked too (a ppl result)
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
        return list(self.windows) if isinstance(getattr(self, "windows", None), list) else None

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

    @staticmethod
    def cell(row: dict) -> str:
        """`59.91 ± 6.1`: PPL with the 95% half-width of its spread across windows (the row: `to_json()`); `inf` for a
        diverged run. Every result type has its `cell`: how compare's table shows a row of it."""
        return _ppl_cell(row.get("ppl"), row.get("ppl_err"), len(row.get("window_nll") or []))

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

    @staticmethod
    def cell(row: dict) -> str:
        """Key-token PPL ± its 95% half-width (over the windows that have key predictions); '—' without it (also on a
        ppl row, which carries it)."""
        if row.get("key_ppl") is None:
            return "—"
        return _ppl_cell(row["key_ppl"], row.get("key_ppl_err"), sum(1 for n in row.get("window_key_tokens") or [] if n))


@dataclass(kw_only=True)
class PasskeyResult(EvalResult):
    metric: ClassVar[str] = "passkey"
    paired: ClassVar[str] = "prompt_answer_nll"
    accuracy: float
    answer_nll: float | None
    samples: int
    digits: int
    by_depth: list  # [{depth, accuracy, answer_nll, samples}]
    prompt_correct: list
    prompt_answer_nll: list

    @staticmethod
    def cell(row: dict) -> str:
        return f"{row['accuracy']:.0%}"


@dataclass(kw_only=True)
class KlResult(EvalResult):
    metric: ClassVar[str] = "kl"
    paired: ClassVar[str] = "window_kl"
    kl_mean: float
    kl_p99: float
    kl_max: float
    top1_agreement: float  # percent of positions where both argmaxes agree
    tokens: int
    window_kl: list
    windows: list

    @staticmethod
    def cell(row: dict) -> str:
        return f"{row['kl_mean']:.4f}"


def _ppl_cell(ppl: float | None, err: float | None, windows: int) -> str:
    from ropecli.evaluation.stats import ppl_half_width  # numpy: when a table is drawn

    if ppl is None or ppl == math.inf:
        return "inf"
    half = ppl_half_width(err, windows)
    return f"{ppl:.4g}" + (f" ± {half:.3g}" if half else "")


def _head(spec: Spec, sched: Schedule, geom: Geometry, length: int, seconds: float) -> dict:
    from ropecli.rope.map_spelling import map_json  # numpy: kept off this module's import

    return {"method": sched.method, "label": spec.label, "params": {k: v for k, v in sched.params.items() if k != "factors"},
            "log_n": spec.log_n, "len": length, "factor": geom.factor, "attention_factor": sched.attention_factor,
            "seconds": round(seconds, 3),
            "position_map": map_json(spec.position_map), "temperature": dict(spec.temperature) or None}


def summarize_ppl(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_window: list[tuple[float, int]],
                  names: list[str], seconds: float, keys: dict | None = None, cls: type | None = None) -> PplResult:
    """per_window: (sum of NLL, scored tokens[, NLL summed in each position bin]) of each window; `keys`:
    the key-token fields (`key_metric.key_fields`); `cls`: the metric's result type (KeyPplResult ranks by its keys)."""
    import numpy as np

    from ropecli.evaluation.estimand import estimate

    tokens = sum(v[1] for v in per_window)
    means = np.array([v[0] / v[1] for v in per_window])
    nll = estimate(means, names, [v[1] for v in per_window])
    ppl = math.exp(nll) if nll < 700 else math.inf
    err = estimate_se(means, names, [v[1] for v in per_window], ppl)
    by_window = position_means(per_window, length)
    cls = cls or PplResult
    return cls(**_head(spec, sched, geom, length, seconds), **(keys or {}), ppl=ppl, nll=nll, tokens=tokens, ppl_err=err,
                     window_nll=[_finite(m) for m in means], windows=names,
                     window_position_nll=None if by_window is None else [[_finite(x) for x in w] for w in by_window],
                     position_nll=None if by_window is None else [_finite(x) for x in by_window.mean(axis=0)])


def estimate_se(means, names: list | None, tokens: list, ppl: float) -> float | None:
    """ppl * the standard error of the estimand (delta method) under the verdicts' inference; None without one."""
    import numpy as np

    from ropecli.evaluation.inference import paired_one

    if not math.isfinite(ppl) or len(means) < 2:
        return None
    p = paired_one(np.asarray(means, dtype=np.float64), names, tokens)
    return ppl * p.se if p.se is not None else None


def position_means(per_window: list[tuple], length: int):
    """Each window's mean NLL in each position bin, (windows, POSITION_BINS); None when a window has no
    bins (a cache entry written before they were kept)."""
    import numpy as np

    from ropecli.models.token_losses import bin_means

    if not per_window or any(len(v) < 3 or not v[2] for v in per_window):
        return None
    return np.array([bin_means(v[2], length) for v in per_window])


def summarize_passkey(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_prompt: list[tuple[float, float]],
                      prompts: list, depths, seconds: float) -> PasskeyResult:
    """Accuracy and mean answer NLL, overall and per depth; per-prompt values kept for paired statistics."""
    import numpy as np

    correct = np.array([c for c, _ in per_prompt], dtype=np.float64)
    nll = np.array([a for _, a in per_prompt], dtype=np.float64)
    by_depth = []
    for d in depths:
        idx = [i for i, p in enumerate(prompts) if p.depth == d]
        by_depth.append({"depth": d, "accuracy": float(correct[idx].mean()), "answer_nll": _finite(nll[idx].mean()),
                         "samples": len(idx)})
    return PasskeyResult(**_head(spec, sched, geom, length, seconds), accuracy=float(correct.mean()),
                         answer_nll=_finite(nll.mean()), samples=len(per_prompt), digits=len(prompts[0].key),
                         by_depth=by_depth, prompt_correct=[bool(c) for c in correct],
                         prompt_answer_nll=[_finite(v) for v in nll])


def summarize_kl(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_window: list[tuple], names: list[str],
                 seconds: float) -> KlResult:
    """KL(p_unscaled || p_scaled) per token: mean (the estimand: over documents of each one's mean per token), 99th
    percentile, max, top-1 agreement (llama.cpp's statistics, over all tokens)."""
    import numpy as np

    from ropecli.evaluation.estimand import estimate

    tokens = sum(w[1] for w in per_window)
    every = np.concatenate([np.asarray(w[3], dtype=np.float64) for w in per_window])
    kl_mean = estimate([w[0] / w[1] for w in per_window], names, [w[1] for w in per_window])  # the one estimand
    return KlResult(**_head(spec, sched, geom, length, seconds), kl_mean=kl_mean,
                    kl_p99=float(np.percentile(every, 99)), kl_max=float(every.max()),
                    top1_agreement=100.0 * sum(w[2] for w in per_window) / tokens, tokens=tokens,
                    window_kl=[w[0] / w[1] for w in per_window], windows=names)
