"""The search of the mixed exponent b ("binary search" in Su's "Transformer Upgrade Road 11"):
the golden-section search itself and its orchestration (objective, short-length guard, references),
both free of torch and of the CLI. `search_b` takes an evaluator function, so the same code runs
under the CLI's progress bar, in tests on injected objectives, or anywhere else.

Objective: mean log-PPL over the target lengths (`ppl`), or the mean passkey answer NLL
(`passkey`, a smooth stand-in for retrieval accuracy), every b scored on the same windows/prompts.
Guards, at the training length L with the target's k: `max_short_regression` (PPL may rise at most
that many percent over the unscaled model) and `max_short_kl` (mean KL against the unscaled model,
nats per token); a b breaking either scores +inf (rejected).
References: none, PI, NTK-fixed, the article's b = 0.625, YaRN, llama3 and dynamic NTK on the same
windows; PI and NTK-fixed are the b = 0 and b = 1 evaluations, reused when the range includes them.
Statistics (`ropecli.stats`): every evaluation and reference is compared with the best b by a
paired difference over the windows; `equivalent_b` spans the evaluated b not distinguishable from
the best at 95%; the verdict says first when a reference beats the best b.

Search:

Golden-section search on [lo, hi] for a unimodal objective f(b): both ends are evaluated first
(b = 0 is PI, b = 1 is NTK-fixed, so the ends are meaningful references and expose boundary minima),
then n interior points, each shrinking the bracket by 0.618. The answer is the best evaluated b;
with the bracket [a, c] around it, |b_best - b*| <= 0.618 (c - a) = (hi - lo) * 0.618^n, so
n = ceil(log(tol / (hi - lo)) / log(0.618)) interior evaluations reach `tol`: 10 for tol 0.01 on
[0, 1], 12 evaluations in all. A uniform grid with the same guarantee needs (hi - lo) / (2 tol) + 1
points (51 on [0, 1] at tol 0.01).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.geometry import default_factor
from ropecli.specs import Spec, make_spec

# run(specs, lengths, description[, metric]) -> one result dict per (spec, length), spec-major (Session.run);
# the metric ("passkey", "kl") is passed only when it is not ppl
Evaluate = Callable[..., list[dict]]

REFERENCES = (("none", {}), ("pi", {}), ("ntk-fixed", {}), ("mixed", {"b": 0.625}), ("yarn", {}), ("llama3", {}),
              ("dynamic", {}))
# b at which mixed *is* the reference (b = 0: Lambda_m = k; b = 1: Lambda_m = k^(2m/d); both identities
# are tested in test_schedule_identities): an evaluated end of the range is reused instead of run again
SAME_AS_MIXED = {"pi": 0.0, "ntk-fixed": 1.0}

INV_PHI = (math.sqrt(5) - 1) / 2  # 0.618…


@dataclass
class SearchResult:
    best_b: float
    best_objective: float
    points: list[tuple[float, float]] = field(default_factory=list)  # (b, objective) in evaluation order
    bracket: tuple[float, float] = (0.0, 1.0)
    at_boundary: str | None = None  # "lo" / "hi" when the minimum sits at an end of the range
    non_unimodal_at: list[float] = field(default_factory=list)  # interior local maxima among the points


def interior_evaluations(lo: float, hi: float, tol: float) -> int:
    return max(1, math.ceil(math.log(tol / (hi - lo)) / math.log(INV_PHI)))


def grid_evaluations(lo: float, hi: float, tol: float) -> int:
    """Points of a uniform grid whose spacing 2*tol puts every b within tol of a grid point."""
    return math.ceil((hi - lo) / (2 * tol)) + 1


def check_range(lo: float, hi: float, tol: float) -> None:
    if not (0.0 <= lo <= 1.0 and 0.0 <= hi <= 1.0):
        raise RopeCliError(f"--lo {lo} / --hi {hi}: b must lie in [0, 1] (0 is PI, 1 is NTK-fixed)")
    if lo >= hi:
        raise RopeCliError(f"--lo {lo} must be below --hi {hi}")
    if not tol > 0:
        raise RopeCliError(f"--tol {tol} must be positive; e.g. --tol 0.01")


def golden_section(f: Callable[[float], float], lo: float = 0.0, hi: float = 1.0, tol: float = 0.01) -> SearchResult:
    check_range(lo, hi, tol)
    seen: dict[float, float] = {}
    order: list[tuple[float, float]] = []

    def F(b: float) -> float:
        b = round(b, 12)
        if b not in seen:
            v = f(b)
            seen[b] = v if v == v else math.inf  # NaN counts as worst
            order.append((b, seen[b]))
        return seen[b]

    F(lo)
    F(hi)
    a, c = lo, hi
    x1, x2 = c - INV_PHI * (c - a), a + INV_PHI * (c - a)
    f1, f2 = F(x1), F(x2)
    for _ in range(interior_evaluations(lo, hi, tol) - 2):
        if f1 <= f2:  # minimum in [a, x2]
            c, x2, f2 = x2, x1, f1
            x1 = c - INV_PHI * (c - a)
            f1 = F(x1)
        else:  # minimum in [x1, c]
            a, x1, f1 = x1, x2, f2
            x2 = a + INV_PHI * (c - a)
            f2 = F(x2)
    best_b, best_f = min(order, key=lambda p: (p[1], p[0]))
    result = SearchResult(best_b, best_f, order, (a, c))
    if best_b == lo:
        result.at_boundary = "lo"
    elif best_b == hi:
        result.at_boundary = "hi"
    result.non_unimodal_at = local_maxima(order)
    return result


def local_maxima(points: list[tuple[float, float]]) -> list[float]:
    """b values where the objective, sorted by b, goes down then up again (a second valley)."""
    pts = sorted(points)
    out = []
    for (_, fa), (b, fb), (_, fc) in zip(pts, pts[1:], pts[2:]):
        if fb > fa and fb > fc:
            out.append(b)
    return out


def search_b(run: Evaluate, train_len: int, lengths: list[int], *, lo: float = 0.0, hi: float = 1.0, tol: float = 0.01,
             log_n: bool = False, factor: float | None = None, max_short_regression: float | None = None,
             max_short_kl: float | None = None, objective: str = "ppl") -> dict:
    """Golden-section search of b for the lowest objective over `lengths`, with the guards, the
    references and the paired statistics. Returns every number the CLI prints."""
    check_range(lo, hi, tol)
    if objective not in OBJECTIVES:
        raise RopeCliError(f"--objective {objective}: choose from {', '.join(OBJECTIVES)}")
    guard_k = factor if factor is not None else default_factor(max(lengths), train_len)
    score = Scorer(run, train_len, lengths, objective, guard_k, max_short_regression, max_short_kl)
    evaluations: list[dict] = []

    def f(b: float) -> float:
        entry = {"b": b, **score(make_spec("mixed", {"b": b}, factor=factor, log_n=log_n), f"b={b:.4f}")}
        evaluations.append(entry)
        return entry["objective"] if not entry.get("violates_guard") else math.inf

    result = golden_section(f, lo, hi, tol)
    by_b = {e["b"]: e for e in evaluations}
    references = reference_rows(score, log_n, factor, by_b)
    best = by_b[result.best_b]
    stats = paired_summary(evaluations, references, best)
    return {
        "lengths": lengths, "objective_name": objective, "log_n": log_n, "factor": factor, "lo": lo, "hi": hi, "tol": tol,
        "best_b": result.best_b, "best_objective": result.best_objective, "best_ppl": best.get("ppl"),
        "at_boundary": result.at_boundary, "non_unimodal_at": result.non_unimodal_at, "bracket": list(result.bracket),
        "evaluations": evaluations, "references": references, "guard": score.guard, **stats,
        "search_evaluations": len(evaluations), "grid_evaluations_same_accuracy": grid_evaluations(lo, hi, tol),
    }


OBJECTIVES = ("ppl", "passkey")


class Scorer:
    """Scores one Spec: its objective over the target lengths, the per-window vector that pairs it
    with other candidates, and the short-context guards at L (PPL rise over none, KL against none),
    both with the target's k. `run` is Session.run (or an injected stand-in)."""

    def __init__(self, run: Evaluate, train_len: int, lengths: list[int], objective: str, guard_k: float,
                 max_short_regression: float | None, max_short_kl: float | None):
        self.run, self.train_len, self.lengths, self.objective = run, train_len, lengths, objective
        self.guard_k, self.max_rise, self.max_kl = guard_k, max_short_regression, max_short_kl
        self.guard = None
        if max_short_regression is not None or max_short_kl is not None:
            self.guard = {"len": train_len, "factor": guard_k, "max_percent": max_short_regression, "max_kl": max_short_kl}
        if max_short_regression is not None:
            self.guard["none_ppl"] = run([make_spec("none")], [train_len], "guard: none @ L")[0]["ppl"]

    def __call__(self, spec: Spec, label: str) -> dict:
        metric = "passkey" if self.objective == "passkey" else "ppl"
        rows = self.run([spec], self.lengths, label, metric) if metric != "ppl" else self.run([spec], self.lengths, label)
        entry = {"objective": mean_objective(rows), "windows": window_vector(rows), "cached": all(r["cached"] for r in rows)}
        if metric == "ppl":
            entry["ppl"] = {str(r["len"]): r["ppl"] for r in rows}
            entry["ppl_err"] = {str(r["len"]): r["ppl_err"] for r in rows}
        else:
            entry["answer_nll"] = {str(r["len"]): r["answer_nll"] for r in rows}
            entry["accuracy"] = {str(r["len"]): r["accuracy"] for r in rows}
        short = spec.but(factor=self.guard_k)
        if self.max_rise is not None:
            at_L = self.run([short], [self.train_len], f"guard {label}")[0]
            rise = 100.0 * (at_L["ppl"] / self.guard["none_ppl"] - 1.0)
            entry["short_ppl"], entry["short_rise_percent"] = at_L["ppl"], rise
            if rise > self.max_rise:
                entry["violates_guard"] = True
        if self.max_kl is not None:
            kl = self.run([short], [self.train_len], f"KL guard {label}", "kl")[0]
            entry["short_kl"], entry["short_top1"] = kl["kl_mean"], kl["top1_agreement"]
            if kl["kl_mean"] > self.max_kl:
                entry["violates_guard"] = True
        return entry


def mean_objective(rows: list[dict]) -> float:
    """Mean over lengths of log-PPL (= NLL per token), or of the passkey answer NLL."""
    values = [r["nll"] if r.get("metric", "ppl") == "ppl" else r["answer_nll"] for r in rows]
    values = [math.inf if v is None else v for v in values]
    return float(sum(values) / len(values))


def window_vector(rows: list[dict]) -> list[float]:
    """The candidate's per-window (per-prompt) objective, window i averaged over the lengths: what
    pairs it with every other candidate scored on the same windows."""
    from ropecli.stats import mean_over_lengths, paired_values

    return mean_over_lengths([paired_values(r) if ("window_nll" in r or "prompt_answer_nll" in r) else [r["nll"]]
                              for r in rows])


def paired_summary(evaluations: list[dict], references: list[dict], best: dict) -> dict:
    """Paired differences to the best b (each evaluation's `vs_best`, each reference's `vs_best_b`),
    the interval of evaluated b not distinguishable from the best, and the verdict in plain words."""
    from ropecli.stats import paired_difference

    for e in evaluations:
        p = paired_difference(e["windows"], best["windows"])
        e["vs_best"] = {**p, "best": e is best, "tied": e is best or (not p["distinguishable"] and not e.get("violates_guard"))}
    tied_b = sorted(e["b"] for e in evaluations if e["vs_best"]["tied"])
    for r in references:
        p = paired_difference(r["windows"], best["windows"])
        r["vs_best_b"] = {**p, "beats_best_b": bool(p["distinguishable"] and p["diff"] is not None and p["diff"] < 0)}
    beating = sorted((r for r in references if r["vs_best_b"]["beats_best_b"]), key=lambda r: r["objective"])
    tied = [r["label"] for r in references if not r["vs_best_b"]["distinguishable"]]
    b = best["b"]
    if beating:
        top = beating[0]
        d = top["vs_best_b"]
        verdict = (f"{top['label']} beats the best b = {b:.4f}: {d['diff']:+.4f} nats ± {d['se']:.2g} (paired 95%)"
                   + (f"; so do {', '.join(r['label'] for r in beating[1:])}" if len(beating) > 1 else "")
                   + f". Use {top['label']}, not mixed(b).")
    elif tied:
        verdict = (f"best b = {b:.4f} is not distinguishable (paired 95%) from {', '.join(tied)}; "
                   "the windows cannot tell them apart")
    else:
        verdict = f"best b = {b:.4f} beats every reference (paired 95%)"
    return {"equivalent_b": [tied_b[0], tied_b[-1]], "verdict": verdict,
            "references_beating_best_b": [r["label"] for r in beating], "references_tied_with_best_b": tied}


def mean_nll(rows: list[dict]) -> float:
    """The PPL objective: mean over lengths of log-PPL (= NLL per token)."""
    return float(sum(r["nll"] for r in rows) / len(rows))


def reference_rows(score: Scorer, log_n: bool, factor: float | None, by_b: dict[float, dict]) -> list[dict]:
    """The methods users deploy, on the same windows: none, PI, NTK-fixed, b = 0.625, YaRN, llama3 and
    dynamic NTK (transformers' defaults). PI and NTK-fixed come from the search's b = 0 / b = 1
    evaluations when the range includes them."""
    rows = []
    for name, params in REFERENCES:
        spec = make_spec(name, params, factor=factor, log_n=log_n)
        same_b = SAME_AS_MIXED.get(name, params.get("b") if name == "mixed" else None)
        if same_b in by_b:
            e = by_b[same_b]
            rows.append({"label": spec.label, "method": spec.method, **_reference_fields(e), "same_as": f"mixed(b={same_b:g})"})
            continue
        rows.append({"label": spec.label, "method": spec.method, **_reference_fields(score(spec, f"reference {spec.label}"))})
    return rows


def _reference_fields(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k not in ("b", "vs_best")}
