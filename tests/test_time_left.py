"""The progress a long command shows (issue 92, "Time"): its forward passes bounded before the first one (a race's
most rounds reserved up front, given back as it decides), so the total never grows past the bound it said first;
and the time left said as a range whose high end is never below what remains."""

import re
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

import ropecli.cli.session_opening as session
from ropecli.cli.app import app
from ropecli.evaluation.metrics import KL, PPL
from ropecli.tuning.held_out import Allowance, RaceBound
from ropecli.tuning.racing import looks

from helpers import runner
from tiny_models import save_tiny

PLANNED = re.compile(r"advise: up to (\d+) forward passes? planned")
LINE = re.compile(r"advise: (\d+)/(\d+) forward passes, (.+) elapsed, (?:up to )?about (?:(.+) to )?(.+) left$")


def seconds(said: str) -> int:
    """'42 s', '3 min 05 s', '1 h 12 min' (`session_opening.clock`) back in seconds."""
    m = re.fullmatch(r"(?:(\d+) h )?(?:(\d+) min)?\s*(?:(\d+) s)?", said.strip())
    h, mins, s = (int(x) if x else 0 for x in m.groups())
    return 3600 * h + 60 * mins + s


class Clock:
    """The progress bar's clock, one `step` of seconds per reading: RichProgress reads it once as its task opens and
    once a tick, so every tick costs what the simulated passes cost, whatever the machine's load."""

    def __init__(self, steps):
        self.now, self.steps = 0.0, iter(steps)

    def monotonic(self) -> float:
        self.now += next(self.steps)
        return self.now


def per_pass(monkeypatch, seconds_a_pass: float) -> None:
    """Every pass the bar counts takes `seconds_a_pass` on the bar's clock (a tick of several passes, several times
    it: a static schedule scores every length of a window in one tick)."""
    clock = Clock(iter(lambda: 0.0, None))
    real = session.RichProgress.advance

    def advance(self, count):
        clock.now += count * seconds_a_pass
        real(self, count)

    monkeypatch.setattr(session, "time", clock)
    monkeypatch.setattr(session.RichProgress, "advance", advance)


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):  # the tiny model of tests/test_advise.py: a whole advise in seconds
    return str(save_tiny(tmp_path_factory.mktemp("qwen") / "model", "qwen2"))


def progress_lines(output: str) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(the bound said before the first pass, [(done, total, elapsed s, high end of the time left s)] per line)."""
    bound = int(next(m.group(1) for m in map(PLANNED.search, output.splitlines()) if m))
    lines = [(int(m.group(1)), int(m.group(2)), seconds(m.group(3)), seconds(m.group(5)))
             for m in map(LINE.match, output.splitlines()) if m]
    return bound, lines


def every_line_and_closing(monkeypatch) -> list[tuple[int, int]]:
    """A progress line after every tick, each pass one simulated second; the returned list gets (done, total) of each
    task as it closes."""
    monkeypatch.setattr(session.RichProgress, "LINE_EVERY", 0.0)
    monkeypatch.setattr(session.RichProgress, "LONG", 0.0)
    per_pass(monkeypatch, 1.0)
    closed = []

    class Closing(session.RichProgress):
        @contextmanager
        def task(self, total, label):
            with super().task(total, label):
                yield
            closed.append((self.done, self.total))

    monkeypatch.setattr(session, "RichProgress", Closing)
    return closed


@pytest.mark.parametrize("extra", [[], ["--min-passkey", "0.0", "--max-short-kl", "1"], ["--no-race"],
                                   ["--workload", "64:0.5,256:0.5"]],
                         ids=["raced", "raced-with-constraints", "full", "raced-and-served"])
def test_advise_never_plans_past_its_first_bound_nor_says_less_time_than_is_left(qwen_dir, tmp_path, monkeypatch,
                                                                                 extra):
    """A small advise with a progress line after every tick, each pass one simulated second: every total is at most
    the bound said before the first pass and none grows (the race's rounds, the costs, the served candidates were
    reserved up front), the bar closes full (its total the work done), and every line's time left reaches the
    seconds still to come. --no-race knew its total before; it must stay so."""
    closed = every_line_and_closing(monkeypatch)
    r = runner.invoke(app, ["advise", "--model", qwen_dir, "--len", "128", "--len", "256", "--samples", "2",
                            "--budget", "7", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c"), *extra])
    assert r.exit_code == 0, r.output
    bound, lines = progress_lines(r.output)
    totals = [total for _, total, _, _ in lines]
    assert lines and max(totals) <= bound, (bound, totals)
    assert all(later <= earlier for earlier, later in zip(totals, totals[1:])), totals  # it only gives back
    done, total = closed[-1]  # the outer task's, as it closes: the bar ends full, its total the work done
    assert done == total == lines[-1][0], (closed, lines[-1])
    end = lines[-1][2]
    short = [(done, total, end - elapsed, high) for done, total, elapsed, high in lines if high < end - elapsed]
    assert not short, short  # (done, total, seconds left, the time left said)


def test_the_bound_is_said_before_the_first_pass_with_what_was_reserved_after_the_task_opened(monkeypatch):
    """A command reserves its race's most passes as it starts, after the bar opened and before its first pass: the
    plan line says them too."""
    monkeypatch.setattr(session, "time", Clock(iter(lambda: 1.0, None)))
    said = []
    bar = session.RichProgress()
    with bar.task(42, "advise"):
        bar.err = SimpleNamespace(print=lambda line, **kw: said.append(line), is_terminal=True)
        bar.grow(100)
        bar.show("the first candidate")
        bar.advance(1)
    assert "advise: up to 142 forward passes planned" in said[0], said


def test_the_high_end_prices_the_passes_left_at_a_slow_pass(monkeypatch):
    """Passes of two kinds, one in four four times slower (a map's attention, the longest length), the slow one
    last in each cycle of four, and no slack in the bound: once each kind has run (the first cycle), the high end
    (every pass of the bound at the slow quantile) is never below the seconds left, where the mean of the passes
    so far says too little before every slow pass."""
    costs = [0.5, 0.5, 0.5, 2.0] * 10
    monkeypatch.setattr(session, "time", Clock([0.0, *costs]))
    said = {}
    bar = session.RichProgress()
    with bar.task(len(costs), "eval"):
        bar.err = SimpleNamespace(print=lambda line, **kw: None, is_terminal=True)
        for done in range(1, len(costs) + 1):
            bar.advance(1)
            said[done] = bar.time_left()
    seen = 4  # every kind of pass has run once
    left = {done: sum(costs[done:]) for done in said}
    assert all(said[done][1] >= left[done] for done in said if done >= seen), \
        [(done, said[done], left[done]) for done in said if done >= seen and said[done][1] < left[done]]
    assert all(said[done][0] <= said[done][1] for done in said)
    mean = {done: sum(costs[:done]) / done * (len(costs) - done) for done in said}  # what one mean would say
    assert any(mean[done] < left[done] for done in said if done >= seen)


def reserved(expect_calls: list, metric=PPL) -> int:
    return sum(count for count, m, _ in expect_calls if m is metric)


def test_a_race_that_takes_every_look_spends_exactly_its_bound():
    """The bound is the race's true most: every entrant at every look of its plan, nothing more; a race that keeps
    every entrant to its last look spends all of it and gives nothing back."""
    calls = []
    plan = looks(3, 12)
    bound = RaceBound(lambda count, metric, samples: calls.append((count, metric, samples)), 5, 2, PPL, plan)
    assert reserved(calls) == 5 * 2 * len(plan) and [s for _, _, s in calls] == plan
    for r, n in enumerate(plan, 1):
        bound.on_round(r, n, list("abcde"))
    bound.finish()
    assert reserved(calls) == 5 * 2 * len(plan) and all(count > 0 for count, _, _ in calls)


def test_a_race_gives_back_the_looks_of_the_entrants_it_drops_and_the_looks_it_does_not_take():
    """The bound shrinks as the race decides: a dropped entrant's later looks at once, the looks after the race
    stopped at its end; what is left is what the race ran."""
    calls = []
    plan = looks(2, 16)  # 2, 4, 8, 16

    def expect(count, metric, samples):
        calls.append((count, metric, samples))

    bound = RaceBound(expect, 4, 1, KL, plan)
    bound.on_round(1, 2, list("abcd"))
    bound.on_round(2, 4, list("ab"))  # two dropped: their passes at 4, 8 and 16 go back at once
    assert reserved(calls, KL) == 4 + 2 + 2 * 2  # 4 at the first look, 2 at the second, 2 held at each later one
    bound.finish()  # decided after the second look: 8 and 16 go back
    assert reserved(calls, KL) == 4 + 2 and bound.allowance.left and not any(
        count for _, count in bound.allowance.left.values())


def test_an_allowance_grows_the_bar_only_for_passes_beyond_what_it_holds():
    calls = []
    held = Allowance(lambda count, metric, samples: calls.append(count))
    held.reserve(3, PPL, 4)
    held.spend(2, PPL, 4)
    held.spend(2, PPL, 4)  # one more than held: that one grows the bar
    held.close()
    assert calls == [3, 1]


def test_compares_race_says_its_bound_first_and_only_gives_back(qwen_dir, tmp_path, monkeypatch):
    """`compare --race` reserves every entrant at every look before its first pass (it grew round by round): the
    plan line comes first, no total passes it, none grows, the bar closes at the work done, and no time left said is
    below what remained."""
    closed = every_line_and_closing(monkeypatch)
    r = runner.invoke(app, ["compare", "--model", qwen_dir, "--len", "128", "--len", "256", "--samples", "2", "--race",
                            "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    text = r.output.replace("race (ppl)", "advise")  # the patterns' label
    bound, lines = progress_lines(text)
    totals = [total for _, total, _, _ in lines]
    assert text.index("forward passes planned") < text.index(f"{lines[0][0]}/{lines[0][1]} forward passes")
    assert lines and max(totals) <= bound and all(b <= a for a, b in zip(totals, totals[1:])), (bound, totals)
    done, total = closed[-1]
    assert done == total == lines[-1][0], (closed, lines[-1])
    end = lines[-1][2]
    assert not [x for x in lines if x[3] < end - x[2]]
