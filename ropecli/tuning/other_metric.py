"""Both metrics decided: `ropecli advise` ranks by one metric (--metric ppl or key-ppl) and decides the
other one too, on the same held-out windows, with the same estimand and paired inference, under a
written rule for when they disagree.

RULE: the winner by the ranking metric must not be shown worse on the other metric than that metric's
best by more than the margin (the lower one-sided (1 - a) bound of the gap above +margin, a the
ranking's level: 0.025 / (K - 1), 95% for the table). When it is, the two metrics disagree: the winner
stays the ranking metric's (the one the user chose with --metric), and the verdict and report.md lead
with the disagreement and what each choice costs, each a paired Δ with its 95% interval: the winner's
loss on the other metric, and the other metric's best's loss on the ranking metric.

Cells of the other metric come from each candidate's own windows (a race's dropped candidates have
fewer); every Δ pairs on the windows both candidates have, and the report marks cells on fewer windows.
"""

from __future__ import annotations

from ropecli.evaluation.metrics import Metric, metric_record
from ropecli.evaluation.stats import rank_against_best
from ropecli.tuning.objective import pair

def decide_other(rows: list[dict], winner: dict, metric: Metric, margin: float, level: float) -> dict | None:
    """The other metric's ranking of the eligible candidates, the winner's standing on it, and whether the
    metrics disagree (module docstring); None when fewer than two candidates have it (no key-token rule)."""
    have = [r for r in rows if not r["excluded"] and r.get("also")]
    if winner not in have or len(have) < 2:
        return None
    widest = max(have, key=lambda r: sum(map(len, r["also"]["values"])))
    ranked = rank_against_best({r["candidate"]: r["also"]["values"] for r in have}, widest["also"]["docs"], margin,
                               level, weights=widest["also"]["weights"])
    other = widest["also"]["metric"]
    best = next(r for r in have if ranked[r["candidate"]]["best"])
    standing = ranked[winner["candidate"]]
    for r in have:
        r["also_vs_best"] = ranked[r["candidate"]]
    lower = standing.get("lower")
    disagree = best is not winner and lower is not None and lower > margin
    cost = pair(best, winner, level) if best is not winner else None  # the other best on the ranking metric
    out = {"metric": other, "best": best["candidate"], "winner_vs_best": standing, "disagree": disagree,
           "other_best_on_ranking_metric": cost, "level": level, "margin": margin}
    out["line"] = line(out, winner["candidate"], metric)
    return out


def line(d: dict, winner: str, metric: Metric) -> str:
    """The rule's outcome in words."""
    other = metric_record(d["metric"])
    mine, theirs = metric.column, other.column
    s, m = d["winner_vs_best"], d["margin"]
    if d["best"] == winner:
        return f"{theirs} agrees: {winner} is also the best by {theirs}"
    gap = f"{s['diff']:+.4f} ± {s['half_width']:.2g} nats" if s.get("half_width") is not None else f"{s['diff']:+.4f} nats"
    if not d["disagree"]:
        return (f"{theirs} does not contradict it: {winner} is not shown worse than the {theirs} best, {d['best']}, by "
                f"more than ±{m:g} nats ({gap}, {s.get('verdict')})")
    c = d["other_best_on_ranking_metric"]
    cost = f"{c['diff']:+.4f} ± {c['half_width']:.2g} nats" if c.get("half_width") is not None else f"{c['diff']:+.4f} nats"
    return (f"{mine} and {theirs} disagree: {winner} (best by {mine}) is shown worse by {theirs} than {d['best']} by "
            f"{gap}, more than the ±{m:g} margin; choosing {d['best']} instead costs {cost} of {metric.measure} "
            f"({c.get('verdict')}). The winner stays the {mine} one (--metric); pass --metric "
            f"{d['metric']} to rank by {theirs}")
