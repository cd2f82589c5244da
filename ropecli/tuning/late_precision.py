"""Searches that buy precision late (successive halving across a search's steps, Jamieson & Talwalkar 2016;
Li et al.'s Hyperband for the same budget split): advise's raced searches score every point the optimizer asks
for on the first half of the search windows, then re-score the best quarter of the points (the finalists, at
least 2) on every window and take the best of those. The first windows of a finalist are cached, so it costs only
its second half; a search of B points on W windows costs B W / 2 + finalists W / 2 forward passes instead of B W.

Where the path changes, and why: the optimizer compares points on W / 2 windows, so where two points' order on
the first half differs from their order on all W (a difference inside the noise of W / 2 windows), it steps
elsewhere than the full search would; the finalists and the winner are then compared on all W. `ropecli
search` and `search-b` keep their path-preserving screen (`run_search`'s `screened`: the same points as the full
search, pinned by tests/test_racing.py); only `advise`'s raced searches take this one, and the held-out race
judges their winners against every other candidate on windows no search saw. A point not re-scored keeps its
estimate on the first windows, marked `partial` (not a bound: its tie with the best is unknown).
"""

from __future__ import annotations

import math
from typing import Callable


def first_windows(windows: int | None, finalists: int) -> int | None:
    """The windows every point is scored on (None: no late precision: every point on all of them)."""
    return max(2, windows // 2) if finalists and windows and windows >= 4 else None


def promote(evaluations: list[dict], finalists: int, rescore: Callable[[dict], dict], windows: int,
            expect: Callable[[int], None]) -> dict:
    """Re-score the best `finalists` partial points on every window (`rescore(entry)` -> a Scorer entry), mark
    them whole; `expect(windows_not_taken)` hears of the others; returns the best finalist."""
    ok = [e for e in evaluations if "partial" in e and math.isfinite(e["objective"]) and not e.get("violates_guard")]
    chosen = sorted(ok, key=lambda e: e["objective"])[:finalists]
    for e in chosen:
        first, before = e.pop("partial"), e["objective"]
        e.update(rescore(e), finalist={"first_windows": first["windows"], "first_objective": before})
    for e in evaluations:
        if "partial" in e:
            expect(windows - e["partial"]["windows"])
    whole = [e for e in chosen if math.isfinite(e["objective"]) and not e.get("violates_guard")]
    return min(whole, key=lambda e: e["objective"]) if whole else (chosen or ok or evaluations)[0]
