"""How an evaluation's per-unit values are summed into its typed result (`ropecli.evaluation.results`): PPL with its
standard error under the verdicts' inference and its loss by position, passkey by depth, KL with its tail. Numpy loads
when a result is summed, not when the CLI starts."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ropecli.evaluation.results import KlResult, PasskeyResult, PplResult, _finite

if TYPE_CHECKING:
    from ropecli.rope.geometry import Geometry
    from ropecli.rope.schedule import Schedule
    from ropecli.spec import Spec

import numpy as np

from ropecli.evaluation.estimand import estimate
from ropecli.evaluation.inference import paired_one
from ropecli.maps.map_spelling import map_json
from ropecli.models.token_losses import bin_means


def _head(spec: Spec, sched: Schedule, geom: Geometry, length: int, seconds: float) -> dict:
    return {"method": sched.method, "label": spec.label, "params": {k: v for k, v in sched.params.items() if k != "factors"},
            "log_n": spec.log_n, "len": length, "factor": geom.factor, "attention_factor": sched.attention_factor,
            "seconds": round(seconds, 3),
            "position_map": map_json(spec.position_map), "temperature": dict(spec.temperature) or None}


def summarize_ppl(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_window: list[tuple[float, int]],
                  names: list[str], seconds: float, keys: dict | None = None, cls: type | None = None) -> PplResult:
    """per_window: (sum of NLL, scored tokens[, NLL summed in each position bin]) of each window; `keys`:
    the key-token fields (`key_metric.key_fields`); `cls`: the metric's result type (KeyPplResult ranks by its keys)."""
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
    if not math.isfinite(ppl) or len(means) < 2:
        return None
    p = paired_one(np.asarray(means, dtype=np.float64), names, tokens)
    return ppl * p.se if p.se is not None else None


def position_means(per_window: list[tuple], length: int):
    """Each window's mean NLL in each position bin, (windows, POSITION_BINS); None when a window has no
    bins (a cache entry written before they were kept)."""
    if not per_window or any(len(v) < 3 or not v[2] for v in per_window):
        return None
    return np.array([bin_means(v[2], length) for v in per_window])


def summarize_passkey(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_prompt: list[tuple],
                      prompts: list, depths, seconds: float, kind: type = PasskeyResult) -> PasskeyResult:
    """Accuracy and mean answer NLL, overall and per depth; per-prompt values kept for paired statistics. Units of
    four (--score generate: the published rule's verdict and the generated text beside): that accuracy too."""
    correct = np.array([v[0] for v in per_prompt], dtype=np.float64)
    nll = np.array([v[1] for v in per_prompt], dtype=np.float64)
    generated = np.array([v[2] for v in per_prompt], dtype=np.float64) if all(len(v) > 2 for v in per_prompt) else None
    by_depth = []
    for d in depths:
        idx = [i for i, p in enumerate(prompts) if p.depth == d]
        by_depth.append({"depth": d, "accuracy": float(correct[idx].mean()), "answer_nll": _finite(nll[idx].mean()),
                         "samples": len(idx),
                         **({"generated_accuracy": float(generated[idx].mean())} if generated is not None else {})})
    said = {} if generated is None else {"generated_accuracy": float(generated.mean()),
                                         "prompt_generated": [bool(g) for g in generated],
                                         "prompt_said": [str(v[3]) for v in per_prompt]}
    return kind(**_head(spec, sched, geom, length, seconds), accuracy=float(correct.mean()),
                         answer_nll=_finite(nll.mean()), samples=len(per_prompt), digits=max(len(p.key) for p in prompts),
                         by_depth=by_depth, prompt_correct=[bool(c) for c in correct],
                         prompt_answer_nll=[_finite(v) for v in nll], **said)


def summarize_kl(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_window: list[tuple], names: list[str],
                 seconds: float) -> KlResult:
    """KL(p_unscaled || p_scaled) per token: mean (the estimand: over documents of each one's mean per token), 99th
    percentile, max, top-1 agreement (llama.cpp's statistics, over all tokens)."""
    tokens = sum(w[1] for w in per_window)
    every = np.concatenate([np.asarray(w[3], dtype=np.float64) for w in per_window])
    kl_mean = estimate([w[0] / w[1] for w in per_window], names, [w[1] for w in per_window])  # the one estimand
    return KlResult(**_head(spec, sched, geom, length, seconds), kl_mean=kl_mean,
                    kl_p99=float(np.percentile(every, 99)), kl_max=float(every.max()),
                    top1_agreement=100.0 * sum(w[2] for w in per_window) / tokens, tokens=tokens,
                    window_kl=[w[0] / w[1] for w in per_window], windows=names)
