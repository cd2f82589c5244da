"""What a search minimizes, and the guards that reject a schedule whatever its score.

The objective is a metric record whose `objective` is set (`ropecli.evaluation.metrics.objective_names`):
mean log-PPL over the target lengths (`ppl`, = mean NLL per token), the mean passkey answer NLL (`passkey`, a
smooth stand-in for retrieval accuracy), or a RULER task's mean answer NLL (its name); every candidate is
scored on the same windows/prompts, so candidates pair. Guards, at the training length L with the
target's k: `max_short_regression` (PPL may rise at most that many percent over the unscaled model)
and `max_short_kl` (mean KL against the unscaled model, nats per token); a schedule breaking either
is marked `violates_guard` and counts as +inf for the optimizer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from ropecli.errors import RopeCliError
from ropecli.evaluation.metrics import KEY_PPL, KL, PPL, Metric, metric_record, objective_names

if TYPE_CHECKING:  # the CLI imports Objective at start-up: numpy waits until something is scored
    from ropecli.evaluation.results import EvalResult
    from ropecli.spec import Spec
from ropecli.evaluation.stats import ONE_SIDED, mean_over_lengths, paired_difference
from ropecli.spec import make_spec


class Evaluate(Protocol):
    """How tuning reaches the model: one EvalResult per (spec, length), spec-major, on the first
    `samples` windows (prompts per depth; None: the evaluator's own number). Windows are a prefix of
    one seeded sample, so results on n and on m > n windows agree on the first n. The CLI passes
    `Session.run` (evaluator, cache, progress bar); tests pass injected objectives."""

    def __call__(self, specs: list[Spec], lengths: list[int], metric: Metric = PPL,
                 samples: int | None = None, span: int | None = None) -> list[EvalResult]: ...


class Bench(Protocol):
    """A model with its windows, as the tuning layer's orchestrations (advise, compare's race) take it:
    `ropecli.evaluation.session.Session`. `run` is the Evaluate; `check` fails in one line on too little
    text before any forward pass; `held_out` is the same model on the following windows (documents)."""
    model: Any  # ropecli.backends.backend.ModelBackend: what advise asks which maps it runs
    ev: Any  # ropecli.evaluation.evaluator.Evaluator: what decodes across the switch (`tuning.serving`)
    rope: Any  # ropecli.models.model_rope.ModelRope
    inputs: Any  # ropecli.evaluation.inputs.Inputs
    progress: Any  # ropecli.evaluation.session.Progress
    is_main: bool

    def run(self, specs: list[Spec], lengths: list[int], metric: Metric = PPL,
            samples: int | None = None, span: int | None = None) -> list[EvalResult]: ...

    def check(self, metric: Metric, length: int, samples: int | None = None) -> None: ...

    def held_out(self, samples: int | None) -> "Bench": ...

    def header(self) -> dict: ...

    def tally(self, *others: "Bench") -> dict: ...


class Scorer:
    """Scores one Spec: its objective over the target lengths, the per-window vector that pairs it
    with other candidates, and the short-context guards at L (PPL rise over none, KL against none),
    both with the target's k."""

    def __init__(self, run: Evaluate, train_len: int, lengths: list[int], objective: Metric, guard_k: float,
                 max_short_regression: float | None = None, max_short_kl: float | None = None,
                 reference: Spec | None = None):
        """`train_len`: the length the guards measure at (Ls, the shipped length); `reference`: what the PPL
        rise is over (`reference_spec`: native for a model that ships a schedule, else none)."""
        self.run, self.train_len, self.lengths = run, train_len, lengths

        if objective.name not in objective_names():
            raise RopeCliError(f"--objective {objective.name}: choose from {', '.join(objective_names())}")
        self.record = self.objective = objective
        self.guard_k, self.max_rise, self.max_kl = guard_k, max_short_regression, max_short_kl
        self.guard = None
        if max_short_regression is not None or max_short_kl is not None:
            self.guard = {"len": train_len, "factor": guard_k, "max_percent": max_short_regression, "max_kl": max_short_kl}
        if max_short_regression is not None:
            ref = reference or make_spec("none")
            self.guard["reference"] = ref.label
            self.guard["none_ppl"] = run([ref], [train_len])[0].ppl

    def __call__(self, spec: Spec, samples: int | None = None, guards: bool = True) -> dict:
        """The entry of `spec` on the first `samples` windows (default: all); `guards=False` skips the
        short-context measurements (a point stopped early, a race's first rounds)."""
        rows = self.run([spec], self.lengths, self.objective, samples)
        entry = {"objective": mean_objective(rows), "windows": window_vector(rows), "values": window_values(rows),
                 "docs": window_docs(rows), "weights": window_weights(rows), "cached": all(r.cached for r in rows)}
        if self.record.unit_metric == PPL.name:  # PPL's windows: PPL and key PPL beside each other
            entry[PPL.field] = {str(r.len): r.ppl for r in rows}
            entry["ppl_err"] = {str(r.len): r.ppl_err for r in rows}
            entry["position_nll"] = {str(r.len): r.position_nll for r in rows}
            if all(r.key_ppl is not None for r in rows):
                entry["key_ppl"] = {str(r.len): r.key_ppl for r in rows}
                entry["key_ppl_err"] = {str(r.len): r.key_ppl_err for r in rows}
                entry["key_rule"] = rows[0].key_rule
                entry["also"] = other_metric(rows, self.objective)
        else:  # the estimand's field per length (passkey and tasks: the answer NLL), and accuracy where there is one
            entry[self.record.estimand] = {str(r.len): getattr(r, self.record.estimand) for r in rows}
            if all(r.has_accuracy for r in rows):
                entry["accuracy"] = {str(r.len): r.accuracy for r in rows}
        if not guards:
            return entry
        short = spec.but(factor=self.guard_k)
        if self.max_rise is not None:
            at_L = self.run([short], [self.train_len])[0]
            rise = 100.0 * (at_L.ppl / self.guard["none_ppl"] - 1.0)
            entry["short_ppl"], entry["short_rise_percent"] = at_L.ppl, rise
            if rise > self.max_rise:
                entry["violates_guard"] = True
        if self.max_kl is not None:
            kl = self.run([short], [self.train_len], KL)[0]
            entry["short_kl"], entry["short_top1"] = kl.kl_mean, kl.top1_agreement
            if kl.kl_mean > self.max_kl:
                entry["violates_guard"] = True
        return entry


def other_metric(rows: list[EvalResult], objective: Metric) -> dict:
    """The metric the objective is not, on the same windows (ppl ranks: key PPL; key-ppl ranks: PPL), as a
    Scorer entry's `values`, `docs`, `weights` and `objective` (the estimand): what `advise` decides too."""
    if objective is KEY_PPL:
        return {"metric": PPL.name, "objective": mean_objective(rows, PPL), "docs": [list(r.windows) for r in rows],
                "values": [[math.inf if v is None else float(v) for v in r.window_nll] for r in rows], "weights": None}
    return {"metric": KEY_PPL.name, "objective": mean_objective(rows, KEY_PPL), "values": [r.key_values() for r in rows],
            "docs": [r.key_clusters() for r in rows], "weights": [r.key_weights() for r in rows]}


def mean_objective(rows: list[EvalResult], metric: Metric | None = None) -> float:
    """The estimand (`ropecli.evaluation.estimand`) over lengths: log-PPL (= NLL per token), log key-token PPL
    (`metric` KEY_PPL reads a ppl result's keys), or the answer NLL of passkey or a task: the field its
    metric's record names (`ropecli.evaluation.metrics`; default: each row's own metric)."""
    fields = [(metric or metric_record(r.metric)).estimand for r in rows]
    if KEY_PPL.estimand in fields:  # a length without key predictions (no far repeat within it) is left out
        rows = [r for r in rows if r.key_tokens != 0] or rows
        fields = [KEY_PPL.estimand] * len(rows)
    values = [getattr(r, v) for r, v in zip(rows, fields)]
    values = [math.inf if v is None else v for v in values]
    return float(sum(values) / len(values))


def window_values(rows: list[EvalResult]) -> list[list[float]]:
    """The candidate's per-window (per-prompt) values at each length, [length][window]: what the paired
    inference reads, length by length (`ropecli.evaluation.inference.paired`)."""
    return [r.values for r in rows]


def window_weights(rows: list[EvalResult]) -> list[list[int]] | None:
    """Each window's weight in the estimand at each length where windows differ (key PPL: key predictions)."""
    weights = [r.weights for r in rows]
    return None if any(w is None for w in weights) else weights


def window_docs(rows: list[EvalResult]) -> list[list[str]] | None:
    """The document of each window at each length (None for passkey prompts: independent units)."""
    docs = [r.clusters for r in rows]
    return None if any(d is None for d in docs) else docs


def pair(x: dict, y: dict, level: float | None = None, capacity: int | None = None) -> dict:
    """x's paired difference to y, two Scorer entries on the same windows (`ropecli.evaluation.stats`),
    its verdict at one-sided `level` (default: read off the 95% interval). Entries of earlier ropecli
    versions (one mean-over-lengths vector and `clusters`) pair on that vector."""
    xv, yv = x.get("values") or [x["windows"]], y.get("values") or [y["windows"]]
    docs = x.get("docs") or y.get("docs")
    if docs is None and (x.get("clusters") or y.get("clusters")):
        docs = [x.get("clusters") or y.get("clusters")]
    return paired_difference(xv, yv, docs, level=ONE_SIDED if level is None else level, capacity=capacity,
                             weights=x.get("weights") or y.get("weights"))


def window_vector(rows: list[EvalResult]) -> list[float]:
    """The candidate's per-window (per-prompt) objective, window i averaged over the lengths: what
    pairs it with every other candidate scored on the same windows."""
    return mean_over_lengths([r.values for r in rows])
