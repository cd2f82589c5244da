"""Effective length: for each candidate, the longest measured length at which its passkey retrieval stays at
least a stated fraction of the model's own within its shipped length (NoLiMa's rule: 85 % of the base score), with the
statement that carries it.

The model's own retrieval: the reference spec (the model as shipped, no map) at Ls on its own prompts. At each length
n a candidate's accuracy p_n (share of prompts whose every key token is the argmax) is compared with THRESHOLD x p_ref:

    point estimate   the longest n such that p_n' >= THRESHOLD p_ref at every measured n' <= n
    shown            the same, each step with a one-sided 95 % lower bound of p_n' - THRESHOLD p_ref at or above 0:
                     the Clopper-Pearson lower bound of p_n' minus THRESHOLD times the upper bound of p_ref, each at
                     97.5 % (prompts at n and at Ls are different prompts: unpaired; the union bound makes it valid by
                     construction, and conservative). What it generalizes to: prompts of this protocol drawn from
                     this text, at the measured lengths only (nothing is interpolated between them).

`tests/test_effective_length.py` simulates the bound where the truth sits exactly at the threshold: "shown" at most 5 %
(Newcombe's hybrid score bound, tried first, was shown 6.2 % of the time at p_ref = 0.7 with 80 prompts each).
"""

from __future__ import annotations

from ropecli.evaluation.proportions import clopper_pearson

THRESHOLD = 0.85  # NoLiMa: performance at least 85 % of the base score


def lower_bound(k1: float, n1: int, k2: float, n2: int, c: float = THRESHOLD) -> float:
    """One-sided 95 % lower bound of p1 - c p2: the exact 97.5 % lower bound of p1 minus c times the exact 97.5 % upper
    bound of p2 (both hold together with probability at least 95 %)."""
    return clopper_pearson(k1, n1)[0] - c * clopper_pearson(k2, n2)[1]


def effective_lengths(results: list, reference, threshold: float = THRESHOLD) -> dict:
    """{label: {"point": n or None, "shown": n or None, "by_length": {n: {accuracy, lower_bound, retains, shown}}}} for
    each candidate's passkey results (PasskeyResults) in `results`, against the reference result (its `prompt_correct` at
    Ls)."""
    ref = reference.prompt_correct
    k_ref, n_ref = sum(ref), len(ref)
    out: dict[str, dict] = {}
    for label in dict.fromkeys(r.label for r in results):
        rows = sorted((r for r in results if r.label == label), key=lambda r: r.len)
        point = shown = None
        point_open = shown_open = True
        by_length = {}
        for r in rows:
            k, n = sum(r.prompt_correct), len(r.prompt_correct)
            lb = lower_bound(k, n, k_ref, n_ref, threshold)
            retains = k / n >= threshold * k_ref / n_ref
            point_open, shown_open = point_open and retains, shown_open and lb >= 0
            point, shown = (r.len if point_open else point), (r.len if shown_open else shown)
            by_length[r.len] = {"accuracy": k / n, "lower_bound": lb, "retains": retains, "shown": lb >= 0}
        out[label] = {"point": point, "shown": shown, "by_length": by_length}
    return {"threshold": threshold, "metric": reference.metric,  # which passkey: the published one or passkey-text
            "reference": {"label": reference.label, "len": reference.len, "accuracy": k_ref / n_ref, "prompts": n_ref},
            "candidates": out}


def effective_line(eff: dict) -> str:
    """The verdict line: each candidate's effective length, point estimate and shown."""
    ref = eff["reference"]
    parts = [f"{label} {c['point'] or '< ' + str(min(c['by_length']))}"
             + (f" (shown {c['shown']})" if c["shown"] else " (not shown at any length)")
             for label, c in eff["candidates"].items()]
    return (f"effective length ({eff['metric']} accuracy at least {eff['threshold']:.0%} of the model's own, "
            f"{ref['accuracy']:.0%} of {ref['prompts']} prompts at Ls = {ref['len']}; shown: one-sided 95 %, unpaired, "
            f"for prompts of this protocol from this text, at the measured lengths): " + "; ".join(parts))
