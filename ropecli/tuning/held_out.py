"""How `ropecli advise` measures its candidates on held-out windows: all of them on every window
(`racing=None`, the full tournament), or by racing (`ropecli.tuning.racing`), where a forward pass is
spent only while it can change the verdict.

The race, in `race_candidates`:
1. PPL race: every candidate on the first `start` held-out windows (mean log-PPL over the targets,
   paired per window); a candidate significantly worse than the leader (the best *eligible* one: its
   constraints are measured when it first leads) is dropped; the rest get doubled windows up to
   `max_windows`, until one is left, the windows run out, or no gap could be resolved within them.
2. The costs within L (PPL rise, KL) are measured only for the leader and the candidates shown
   equivalent to it: a dropped or undecided candidate cannot win, so its cost decides nothing.
3. KL race among those of them that meet the constraints (the rule's tie-break: the smallest cost
   within L), the same test on per-window KL at L.
The unscaled model's passkey at L (does retrieval count at all?) is decided sequentially too
(`passkey_baseline`): prompts per depth double from 2 until a Clopper-Pearson interval, corrected for the
looks, lies on one side of `PASSKEY_BASELINE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ropecli.evaluation.inference import MARGIN
from ropecli.evaluation.metrics import KL, PASSKEY, PPL, Metric
from ropecli.evaluation.proportions import clopper_pearson
from ropecli.spec import Spec, make_spec
from ropecli.tuning.objective import Evaluate, Scorer
from ropecli.tuning.racing import ALPHA, looks, race

PASSKEY_BASELINE = 0.5  # the unscaled model must retrieve at least this share of keys within L for passkey to count


@dataclass(frozen=True)
class Racing:
    """How `advise` races (None: the full measurement of every candidate on every held-out window)."""
    start: int  # held-out windows of the first round (the --held-out count)
    max_windows: int  # most held-out windows an undecided candidate gets
    prompts: int  # most passkey prompts per depth (--prompts, else the --held-out count)
    available: int | None = None  # held-out windows the text holds (what an undecided answer is compared with)
    delta: float | None = None  # the PPL race's indifference zone (`racing.race`); None: the margin, 0: off


class Measure:
    """The held-out measurements of a candidate, each made when asked for: its objective on the first
    n windows, its cost within L (PPL rise and KL against the unscaled model, with the target's k), its
    passkey. `expect(count, metric, samples)` hears of every evaluation before it runs (the progress
    bar's total grows with a race; a no-op when the total was known up front)."""

    def __init__(self, held_run: Evaluate, L: int, lengths: list[int], k: float, windows: int,
                 expect: Callable[..., None] = lambda count, metric=PPL, samples=None: None, metric: Metric = PPL,
                 reference: Spec | None = None):
        self.run, self.L, self.lengths, self.k, self.windows, self.expect = held_run, L, lengths, k, windows, expect
        self.reference = reference or make_spec("none")  # native for a model that ships a schedule (`reference_spec`)
        self.score = Scorer(held_run, L, lengths, metric, k)  # the objective: ppl or key-ppl
        self._none_L = None

    def objective(self, spec: Spec, n: int | None = None) -> dict:
        return self.score(spec, samples=n, guards=False)

    def short(self, spec: Spec) -> dict:
        """PPL at L and its rise over the unscaled model; KL against it; on the first `windows` windows."""
        n = self.windows
        self.expect(2 if self._none_L is None else 1, PPL, n)
        self.expect(1, KL, n)
        if self._none_L is None:
            self._none_L = self.run([self.reference], [self.L], PPL, n)[0]
        at_L = self.run([spec.but(factor=self.k)], [self.L], PPL, n)[0]
        kl = self.run([spec.but(factor=self.k)], [self.L], KL, n)[0]
        return {"short_ppl": at_L.ppl, "short_rise_percent": 100.0 * (at_L.ppl / self._none_L.ppl - 1.0),
                "short_kl": kl.kl_mean, "short_kl_p99": kl.kl_p99, "short_top1": kl.top1_agreement}

    def kl_windows(self, spec: Spec, n: int) -> tuple[list[float], list | None]:
        kl = self.run([spec.but(factor=self.k)], [self.L], KL, n)[0]
        return [kl.values], [kl.clusters] if kl.clusters is not None else None

    def task(self, spec: Spec, length: int, task: Metric):
        """A RULER task's result (`ropecli.evaluation.task_results.TaskResult`) at `length`, on every prompt."""
        self.expect(1, task, None)
        return self.run([spec], [length], task)[0]

    def passkey(self, spec: Spec, length: int, prompts: int | None = None):
        self.expect(1, PASSKEY, prompts)
        return self.run([spec], [length], PASSKEY, prompts)[0]


def passkey_baseline(m: Measure, racing: Racing | None) -> tuple[bool, float]:
    """Does the unscaled model retrieve at least PASSKEY_BASELINE of keys at L? (decision, accuracy).
    Full: on every prompt. Racing: prompts per depth 2, 4, … (`looks`) until the Clopper-Pearson interval at
    ALPHA / looks lies on one side of the threshold (or the prompts run out: then the accuracy decides)."""
    none = m.reference  # the model as shipped (unscaled RoPE for a model that ships none)
    if racing is None:
        acc = m.passkey(none, m.L).accuracy
        return acc >= PASSKEY_BASELINE, acc
    plan = looks(1, racing.prompts)
    for per_depth in plan:
        pk = m.passkey(none, m.L, per_depth)
        hits = sum(pk.prompt_correct)
        lo, hi = clopper_pearson(hits, len(pk.prompt_correct), ALPHA / len(plan) / 2)  # two-sided
        if lo >= PASSKEY_BASELINE or hi < PASSKEY_BASELINE:
            break
    return pk.accuracy >= PASSKEY_BASELINE, pk.accuracy


def race_candidates(m: Measure, specs: dict[str, Spec], rows: dict[str, dict], racing: Racing,
                    costs: Callable[[str], None], breaks: Callable[[dict], list[str]] | None, margin: float = MARGIN,
                    check: Callable[[dict], list[str]] = lambda row: []) -> tuple[dict, dict | None]:
    """The PPL race, then the KL race among the candidates left (module docstring). Fills `rows`;
    returns both races' records. `costs(name)` measures a candidate's cost within L and passkey into its
    row; `breaks(row)` lists the constraints it breaks (None: there are none, nothing to measure early);
    `check(row)`: the same constraints, asked of the candidates left before the KL race (only eligible
    candidates shown equivalent to the leader enter it)."""
    lengths = len(m.lengths)

    def on_round(r: int, n: int, alive: list[str]) -> None:  # every window of a round ticks, cached or new
        m.expect(len(alive) * lengths, PPL, n)

    def score(name: str, n: int):
        rows[name].update(m.objective(specs[name], n))
        return rows[name]["values"], rows[name]["docs"], rows[name].get("weights")

    def eligible(name: str) -> bool:  # asked of a would-be leader: its constraints, measured once
        if breaks is None:
            return True
        costs(name)
        rows[name]["excluded"] = breaks(rows[name])
        return not rows[name]["excluded"]

    ppl_race = race(score, list(specs), start=racing.start, max_windows=racing.max_windows, eligible=eligible,
                    on_round=on_round, margin=margin, capacity=racing.available, delta=racing.delta)
    # the cost within L decides only among the leader and the candidates shown equivalent to it (the
    # tie-break); a dropped or undecided candidate cannot win, so its cost is not measured (with
    # constraints it was measured when it first led)
    left = [n for n in ([ppl_race["leader"]] if ppl_race["leader"] else []) + ppl_race["equivalent"]]
    for name in left:
        costs(name)
    left = [n for n in left if not check(rows[n])]
    kl_race = None
    if len(left) > 1:
        kl_race = race(lambda name, n: m.kl_windows(specs[name], n), left, start=racing.start,
                       max_windows=racing.max_windows, on_round=lambda r, n, alive: m.expect(len(alive), KL, n))
    for name, r in ppl_race["candidates"].items():
        rows[name]["race"] = {k: r[k] for k in ("windows", "status", "dropped_round") if k in r}
    return ppl_race, kl_race
