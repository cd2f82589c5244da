"""A result in its column: each evaluation (`ropecli.evaluation.results`) with its paired verdict against the best
of its metric and length, as typed rows. This is what `ppl`, `compare`, `passkey` and `kl` hand to their tables and
plots (`ropecli.report`), and what `--json` writes: JSON is made at the edge (`Row.to_json`) and read back there
(`Row.from_json`, for a saved output), never in between.

    Row.result            the EvalResult (PplResult, PasskeyResult, KlResult, TaskResult …)
    Row.vs_best           its paired difference to the best result of the same metric and length (a Verdict)
    Row.key_vs_best       the same on the key predictions (a ppl row with a key-token rule), else None
    Row.position_vs_best  loss by position, paired with the best row bin by bin (a PositionDiff; None for the best)

A Verdict is what `ropecli.evaluation.stats.describe` decides for one pair (diff, 95 % half-width, the verdict word,
what generalizes, what would decide it), with `best` and `tied` from `rank_against_best`; the tuning layer still
passes these as dicts, and `Verdict.of` is where one becomes a record.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ropecli.evaluation.inference import MARGIN
from ropecli.evaluation.metrics import Metric, metric_record
from ropecli.evaluation.results import EvalResult, PplResult
from ropecli.evaluation.stats import key_ranking, position_differences, rank_against_best, tie_answer

_ALWAYS = ("diff", "se", "df", "half_width", "n", "inference", "generalizes_to", "documents", "margin", "level",
           "verdict", "distinguishable")  # written even when None: a reader sees that there is no number


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One paired comparison with the best of a column (nats where the values are NLLs; ± = 95 % half-width). The
    fields in `describe`'s order, so `--json` writes them as it always has."""
    diff: float | None  # mean of x - best over the paired units
    se: float | None
    df: float | None = None
    half_width: float | None  # 95 %, two-sided
    n: int  # paired units
    inference: str | None = None  # documents / windows / units / diverged
    generalizes_to: str | None = None
    documents: int | None = None
    margin: float | None = None  # the equivalence margin the verdict used
    level: float | None = None  # its one-sided level (0.025 / (K - 1) for a table of K)
    verdict: str  # best / worse / better / equivalent / undecided
    distinguishable: bool  # shown worse or better
    lower: float | None = None  # the one-sided bounds at `level`, where decided
    upper: float | None = None
    needs: dict | None = None  # undecided: the units or documents that would decide it (80 % power)
    answer: str | None = None  # the verdict in words
    best: bool = False
    tied: bool = False  # the best, or shown equivalent to it

    @classmethod
    def of(cls, d: dict) -> "Verdict":
        """From what `describe`/`rank_against_best` computed, or a saved `vs_best` (every key a field)."""
        return cls(**d)

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name in _ALWAYS or f.name in ("best", "tied") or getattr(self, f.name) is not None}

    @property
    def mark(self) -> str:
        """' ≈' shown equivalent to the best, ' ?' undecided, '' otherwise (the best: '')."""
        if self.best:
            return ""
        return " ≈" if self.tied else " ?" if self.verdict == "undecided" else ""

    @property
    def diff_text(self) -> str:
        """'+0.0214 ± 0.0061' (± the 95 % half-width); 'best' for the best; '—' without a number."""
        if self.best:
            return "best"
        if self.diff is None:
            return "—"
        return f"{self.diff:+.4f}" + (f" ± {self.half_width:.2g}" if self.half_width is not None else "")

    def words(self, unit: str = "windows") -> str:
        """The verdict in words ('undecided after 4 windows: about 38 windows would decide it (80% power)')."""
        return tie_answer(self.to_json(), unit)


@dataclass(frozen=True)
class PositionDiff:
    """Loss by position against the best row, bin by bin over the windows both have (pointwise 95 % half-widths)."""
    diff: list  # per bin (None where a bin has no finite pair)
    half_width: list
    windows: int
    inference: str
    pointwise: bool = True

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Row:
    """One evaluation and its verdicts (module docstring)."""
    result: EvalResult
    vs_best: Verdict | None = None
    key_vs_best: Verdict | None = None
    position_vs_best: PositionDiff | None = None

    @property
    def record(self) -> Metric:
        """The record of the row's metric (a task's: its task's)."""
        return metric_record(self.result.metric)

    def against(self, name: str) -> Verdict | None:
        """The verdict a column judges this row by: `vs_best`, or the one a metric shown beside another names
        (`Metric.verdict_beside`: `key_vs_best`)."""
        return {"vs_best": self.vs_best, "key_vs_best": self.key_vs_best}[name]

    def to_json(self) -> dict[str, Any]:
        """The `--json` row: the result's fields, then its verdicts."""
        out = self.result.to_json()
        for name in ("vs_best", "key_vs_best", "position_vs_best"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).to_json()
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Row":
        """A row of a saved `--json` output (older outputs: fields a result type lacks are left out)."""
        kind = metric_record(d["metric"]).result()
        names = {f.name for f in dataclasses.fields(kind)}
        result = kind(**{k: v for k, v in d.items() if k in names})
        verdict = lambda k: Verdict.of(d[k]) if d.get(k) else None  # noqa: E731
        return cls(result, verdict("vs_best"), verdict("key_vs_best"),
                   PositionDiff(**d["position_vs_best"]) if d.get("position_vs_best") else None)


def attach_paired(results: list[EvalResult], margin: float = MARGIN) -> list[Row]:
    """The results as rows, each with `vs_best`: its paired difference to the best result of the same metric and
    length (the best by the estimand of `values`: lowest NLL, answer NLL or KL), with the verdict of the whole
    table at 95 % (`rank_against_best`); a ppl row with key predictions also `key_vs_best`, and, beside the best,
    `position_vs_best` (loss by position, paired)."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(results):
        groups.setdefault((r.metric, r.len), []).append(i)
    rows = [Row(r) for r in results]
    for idx in groups.values():
        if not any(results[i].values for i in idx):  # no unit to pair (key PPL where no window has a key prediction)
            continue
        widest = max(idx, key=lambda i: len(results[i].values))  # its windows' documents cover every other's
        ranked = rank_against_best({i: results[i].values for i in idx}, results[widest].clusters, margin,
                                   weights=results[widest].weights)
        best = next((i for i in idx if ranked[i]["best"]), None)  # None: every result of the column diverged
        keyed = key_ranking([results[i] for i in idx], margin) if results[idx[0]].keys_beside else None
        for j, i in enumerate(idx):
            rows[i].vs_best = Verdict.of(ranked[i])
            if keyed:
                rows[i].key_vs_best = Verdict.of(keyed[j])
            mine, theirs = _positions(results[i]), _positions(results[best]) if best is not None else None
            if best is not None and i != best and mine and theirs:
                rows[i].position_vs_best = PositionDiff(**position_differences(mine, theirs, results[widest].clusters))
    return rows


def _positions(result: EvalResult) -> list | None:
    """A ppl result's per-window loss by position ([window][bin]); None for other results or without it."""
    return result.window_position_nll if isinstance(result, PplResult) else None
