"""Injected evaluation results for tests of the tuning layer (no model): typed like the evaluator's."""

import math

from ropecli.evaluation.results import KlResult, PplResult


def ppl_result(spec, length: int, window_nll: list[float]) -> PplResult:
    """A PplResult whose windows have the given mean NLL each (equal token counts)."""
    nll = sum(window_nll) / len(window_nll)
    return PplResult(method=spec.method, label=spec.label, params=dict(spec.params), log_n=spec.log_n, len=length,
                     factor=spec.factor or 1.0, attention_factor=1.0, seconds=0.0, ppl=math.exp(nll), nll=nll,
                     tokens=100 * len(window_nll), ppl_err=None, window_nll=list(window_nll),
                     windows=[f"doc{i}" for i in range(len(window_nll))])


def kl_result(length: int, window_kl: list[float]) -> KlResult:
    return KlResult(method="none", label="none", params={}, log_n=False, len=length, factor=1.0, attention_factor=1.0,
                    seconds=0.0, kl_mean=sum(window_kl) / len(window_kl), kl_p99=max(window_kl), kl_max=max(window_kl),
                    top1_agreement=100.0, tokens=100, window_kl=list(window_kl), windows=["d"] * len(window_kl))
