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

The progress bar's total is a bound on all of it (`HeldOutBound`): the most passes each stage can take (every
look of both races for every candidate, every candidate's costs, every look of the passkey baseline), reserved
before the command's first pass; each stage gives back what it no longer needs as it decides.
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


class Allowance:
    """Forward passes a stage may take at most, put on the progress bar before the command's first pass
    (`expect(count)`), so that the bar's total is a bound from the start and only shrinks: a pass the stage plans is
    spent from it (the bar counts it already), and what the stage can no longer take is given back
    (`expect(-count)`) once it has decided. Kept per (metric, windows or prompts per depth), the way `expect` counts."""

    def __init__(self, expect: Callable[..., None]):
        self.expect = expect
        self.left: dict[tuple[str, int | None], tuple[Metric, int]] = {}  # (metric, samples) -> (metric, passes)

    def reserve(self, count: int, metric: Metric = PPL, samples: int | None = None) -> None:
        if count > 0:
            self.left[(metric.name, samples)] = (metric, self.held(metric, samples) + count)
            self.expect(count, metric, samples)

    def held(self, metric: Metric, samples: int | None) -> int:
        return self.left.get((metric.name, samples), (metric, 0))[1]

    def spend(self, count: int, metric: Metric = PPL, samples: int | None = None) -> None:
        """`count` passes about to run: out of the reserve; beyond it (a plan the bound missed) the bar grows."""
        have = self.held(metric, samples)
        self.left[(metric.name, samples)] = (metric, max(have - count, 0))
        if count > have:
            self.expect(count - have, metric, samples)

    def give_back(self, count: int, metric: Metric = PPL, samples: int | None = None, keep: int = 0) -> None:
        """`count` passes the stage will not take (at most what it holds, less `keep` still needed)."""
        back = min(count, self.held(metric, samples) - keep)
        if back > 0:
            self.left[(metric.name, samples)] = (metric, self.held(metric, samples) - back)
            self.expect(-back, metric, samples)

    def release(self, metric: Metric, samples: int | None = None, keep: int = 0) -> None:
        """Give back all but `keep` of what is held for (metric, samples)."""
        self.give_back(self.held(metric, samples), metric, samples, keep)

    def spent_by(self, run: Evaluate) -> Evaluate:
        """`run`, its passes spent from this allowance as it evaluates (every (spec, length) of a call)."""
        def spending(specs: list[Spec], lengths: list[int], metric: Metric = PPL, samples: int | None = None,
                     span: int | None = None) -> list:
            self.spend(len(specs) * len(lengths), metric, samples)
            return run(specs, lengths, metric, samples, span)
        return spending

    def close(self) -> None:
        """The stage is over: give back everything not spent."""
        for (_, samples), (metric, count) in list(self.left.items()):
            self.give_back(count, metric, samples)


class RaceBound:
    """A race's most passes: `each` per entrant at every look of `plan` (the race's own `looks`), reserved before
    the command's first pass. Each round (`on_round`, the race's hook) spends its own passes and gives back, at its
    look and every later one, the share of the entrants it no longer has (dropped, excluded); `finish` gives back
    the looks the race did not take (it stopped early, or never ran)."""

    def __init__(self, expect: Callable[..., None], entrants: int, each: int, metric: Metric, plan: list[int]):
        self.allowance, self.each, self.metric, self.plan = Allowance(expect), each, metric, plan
        self.entrants, self.taken = entrants, 0  # entrants the later looks still hold passes for; looks taken
        for n in plan:
            self.allowance.reserve(entrants * each, metric, n)

    def narrow(self, entrants: int) -> None:
        """At most `entrants` take the looks not yet taken: the others' passes there go back."""
        for later in self.plan[self.taken:]:
            self.allowance.give_back((self.entrants - entrants) * self.each, self.metric, later)
        self.entrants = min(self.entrants, entrants)

    def on_round(self, r: int, n: int, alive: list[str]) -> None:
        self.narrow(len(alive))
        self.allowance.spend(len(alive) * self.each, self.metric, n)
        self.taken = r

    def finish(self) -> None:
        self.allowance.close()


class HeldOutBound:
    """The most passes advise's raced held-out measures can take, reserved before its first pass (module docstring):
    the passkey baseline's looks; the PPL race (`entrants` candidates at every look, `lengths` each); every
    candidate's costs within L (PPL and KL on `windows`, the reference's PPL once, the task guard's prompts with the
    reference's, passkey where `min_passkey` makes it a constraint); the KL race among them; the winner's passkey.
    `measures.spend` is the `Measure`'s expect; each stage gives back what it did not take when it ends."""

    def __init__(self, expect: Callable[..., None], racing: Racing, entrants: int, lengths: int, windows: int,
                 passkey: bool, task: Metric | None = None, min_passkey: bool = False):
        self.measures = Allowance(expect)
        self.baseline = looks(1, racing.prompts) if passkey else []
        for per_depth in self.baseline:
            self.measures.reserve(1, PASSKEY, per_depth)
        self.ppl = RaceBound(expect, entrants, lengths, PPL, looks(racing.start, racing.max_windows))
        self.measures.reserve(entrants + 1, PPL, windows)  # the reference at L once, then each candidate
        self.measures.reserve(entrants, KL, windows)
        if task is not None:
            self.measures.reserve(entrants + 1, task, None)
        self.measures.reserve((entrants if min_passkey else 1) if passkey else 0, PASSKEY, None)
        self.kl = RaceBound(expect, entrants, 1, KL, looks(racing.start, racing.max_windows))
        self.windows, self.task, self.min_passkey = windows, task, min_passkey

    def baseline_done(self, passkey_counts: bool) -> None:
        """The baseline's looks not taken; without passkey (it does not count) every candidate's prompts too."""
        for per_depth in self.baseline:
            self.measures.release(PASSKEY, per_depth)
        if not passkey_counts:
            self.measures.release(PASSKEY)

    def race_done(self, left: int, to_cost: int, costed: bool) -> None:
        """The PPL race is over with `left` candidates (the leader and those shown equivalent to it): at most they
        enter the KL race (none where one is left), and the costs still to measure are those of `to_cost` of them
        (and the reference's where no candidate was `costed` yet)."""
        self.kl.narrow(left if left > 1 else 0)
        reference = 0 if costed else 1
        self.measures.release(PPL, self.windows, keep=to_cost + reference)
        self.measures.release(KL, self.windows, keep=to_cost)
        if self.task is not None:
            self.measures.release(self.task, keep=to_cost + reference)
        self.measures.release(PASSKEY, keep=(to_cost if self.min_passkey else 0) + 1)  # and the winner's

    def costs_done(self) -> None:
        """Every cost that decides something is measured: what is left is the winner's passkey, measured at the end
        unless it was a cost (--min-passkey; the winner the ranking picks need not have been measured, so one set of
        prompts is kept until the end either way)."""
        self.measures.release(PPL, self.windows)
        self.measures.release(KL, self.windows)
        if self.task is not None:
            self.measures.release(self.task)
        self.measures.release(PASSKEY, keep=1)

    def close(self) -> None:
        for stage in (self.ppl, self.kl):
            stage.finish()
        self.measures.close()


class Measure:
    """The held-out measurements of a candidate, each made when asked for: its objective on the first
    n windows, its cost within L (PPL rise and KL against the unscaled model, with the target's k), its
    passkey. `expect(count, metric, samples)` hears of every evaluation before it runs (raced: spent from the
    passes `HeldOutBound` reserved on the progress bar; a no-op when the total was known up front)."""

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
                    check: Callable[[dict], list[str]] = lambda row: [], bound: HeldOutBound | None = None
                    ) -> tuple[dict, dict | None]:
    """The PPL race, then the KL race among the candidates left (module docstring). Fills `rows`;
    returns both races' records. `costs(name)` measures a candidate's cost within L and passkey into its
    row; `breaks(row)` lists the constraints it breaks (None: there are none, nothing to measure early);
    `check(row)`: the same constraints, asked of the candidates left before the KL race (only eligible
    candidates shown equivalent to the leader enter it). `bound`: the passes reserved for the races and the costs
    (their rounds are spent from it, the rest given back as they end); None: each round is expected as it comes."""
    lengths = len(m.lengths)
    ppl_bound = bound.ppl if bound else None
    kl_bound = bound.kl if bound else None

    def on_round(r: int, n: int, alive: list[str]) -> None:  # every window of a round ticks, cached or new
        if ppl_bound:
            ppl_bound.on_round(r, n, alive)
        else:
            m.expect(len(alive) * lengths, PPL, n)

    def on_kl_round(r: int, n: int, alive: list[str]) -> None:
        if kl_bound:
            kl_bound.on_round(r, n, alive)
        else:
            m.expect(len(alive), KL, n)

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
    if ppl_bound:
        ppl_bound.finish()
    # the cost within L decides only among the leader and the candidates shown equivalent to it (the
    # tie-break); a dropped or undecided candidate cannot win, so its cost is not measured (with
    # constraints it was measured when it first led)
    left = [n for n in ([ppl_race["leader"]] if ppl_race["leader"] else []) + ppl_race["equivalent"]]
    if bound:
        bound.race_done(len(left), sum("short_kl" not in rows[n] for n in left),
                        any("short_kl" in r for r in rows.values()))
    for name in left:
        costs(name)
    if bound:
        bound.costs_done()
    left = [n for n in left if not check(rows[n])]
    kl_race = None
    if len(left) > 1:
        kl_race = race(lambda name, n: m.kl_windows(specs[name], n), left, start=racing.start,
                       max_windows=racing.max_windows, on_round=on_kl_round)
    if kl_bound:
        kl_bound.finish()
    for name, r in ppl_race["candidates"].items():
        rows[name]["race"] = {k: r[k] for k in ("windows", "status", "dropped_round") if k in r}
    return ppl_race, kl_race
