"""The ranking rule of `ropecli advise`, applied to measured candidates: who is out, who is best,
how every other candidate stands against the best (shown worse / shown equivalent / undecided, the
verdicts of `ropecli.evaluation.stats`), who wins the tie-break, and the verdict in words."""

from __future__ import annotations

import math

from ropecli.errors import RopeCliError
from ropecli.evaluation.inference import GENERALITY, MARGIN
from ropecli.evaluation.metrics import PPL, Metric
from ropecli.evaluation.stats import ONE_SIDED
from ropecli.tuning.objective import pair
from ropecli.tuning.other_metric import decide_other

OTHER = ("5. the other metric (key-token PPL; PPL with --metric key-ppl) decided on the same windows: if the winner "
         "is shown worse on it than its best by more than the margin, the metrics disagree and the verdict leads with "
         "what each choice costs")
RULE = ("1. out: a candidate breaking --max-short-kl, --max-short-regression or --min-passkey; "
        "2. the best: the lowest log-PPL on held-out windows (the estimand: the mean over documents of each one's "
        "log-PPL, the mean over the target lengths); "
        "3. every other candidate judged against it, paired, at 95% for the whole ranking (one-sided 0.025/(K-1)): "
        "shown worse, shown equivalent (interval inside ±margin) or undecided; "
        "4. the winner: the candidate with the smallest short-context cost (mean KL against the unscaled model at L) "
        "among the best and those shown equivalent to it; undecided candidates rank by their point estimate and never "
        "win a tie-break; " + OTHER)
RULE_RACED = ("1. out: a candidate breaking --max-short-kl, --max-short-regression or --min-passkey; "
              "2. raced on held-out windows by log-PPL (the estimand: the mean over documents of each one's log-PPL, the "
              "mean over the target lengths): after each round every candidate is "
              "judged against the leader, paired, one-sided at 0.05 w_r/(K-1) at look r (w_r proportional to 1/r, summing to 1: "
              "95% for the whole race): shown worse "
              "(dropped), shown equivalent (interval inside ±margin) or undecided (doubled windows, up to --max-windows), "
              "until no candidate left is shown more than --delta ahead of the leader (the indifference zone); "
              "3. the winner: the smallest short-context cost (a KL race within L) among the leader and the eligible "
              "candidates shown equivalent to it; undecided candidates rank by their point estimate and never win a tie-break; "
              + OTHER)


def rank(rows: list[dict], lengths: list[int], breaks, ppl_race: dict | None, kl_race: dict | None,
         margin: float = MARGIN, measure: str = PPL.measure, metric: Metric = PPL) -> dict:
    """The rule on measured rows (`measure`: the objective in words): constraints; the best by mean log-PPL; every other eligible candidate
    judged against it (worse / equivalent within ±margin / undecided, at the race's corrected level, or
    0.025 / (K - 1) unraced: a 95% statement for the whole ranking); the tie-break (least KL within L)
    only among the candidates shown equivalent; undecided ones rank by their point estimate."""
    excluded = []
    for r in rows:  # a candidate dropped by the race has no measured cost: only divergence can exclude it
        r["excluded"] = breaks(r) if "short_kl" in r else [] if math.isfinite(r["objective"]) else ["diverged (infinite PPL)"]
        if r["excluded"]:
            excluded.append({"candidate": r["candidate"], "why": r["excluded"]})
    eligible = [r for r in rows if not r["excluded"]]
    if not eligible:
        lines = "; ".join(f"{e['candidate']}: {', '.join(e['why'])}" for e in excluded)
        raise RopeCliError(f"no candidate meets the constraints ({lines}); loosen them")
    alive = [r for r in eligible if ppl_race is None or not r["race"].get("dropped_round")]
    most = max(len(r["windows"]) for r in alive)
    best = min((r for r in alive if len(r["windows"]) == most), key=lambda r: r["objective"])
    level = ppl_race["test_level"] if ppl_race else ONE_SIDED / max(len(eligible) - 1, 1)
    capacity = ppl_race.get("capacity") if ppl_race else None
    for r in rows:
        r["vs_best"] = {**pair(r, best, level, capacity), "best": r is best}
        r["verdict"] = ("best" if r is best else "excluded" if r["excluded"] else
                        "worse" if ppl_race is not None and r["race"].get("dropped_round") else r["vs_best"]["verdict"])
        r["tied"] = r["verdict"] in ("best", "equivalent")
    tied = [r for r in eligible if r["tied"]]
    by_kl = lambda r: (r.get("short_kl", math.inf), r["objective"])  # noqa: E731
    if kl_race is not None and kl_race["leader"] in {r["candidate"] for r in tied}:
        winner = next(r for r in tied if r["candidate"] == kl_race["leader"])
    else:
        winner = min(tied, key=by_kl)
    # ranked by the paired difference to the best on the windows each shares with it (= by objective
    # when all have the same windows; a race's dropped candidates have fewer)
    order = lambda r: r["vs_best"]["diff"] if r["vs_best"]["diff"] is not None else math.inf  # noqa: E731
    for i, r in enumerate(sorted(eligible, key=order), 1):
        r["rank"] = i
    others = [r["candidate"] for r in tied if r is not winner]
    undecided = [r["candidate"] for r in eligible if r["verdict"] == "undecided"]
    both = decide_other(rows, winner, metric, margin, level)
    scope = ranking_scope([r for r in eligible if r is not best])
    words = verdict(winner, best, [r for r in eligible if r is not best], excluded, lengths, ppl_race, margin, measure,
                    scope)
    regret = regret_bound(winner, [r for r in alive if r is not winner], level, ppl_race)
    if regret:
        words += f"; {regret['line']}"
    if ppl_race and ppl_race.get("within_delta"):  # what stopped the race (racing.py: the indifference zone)
        words += (f"; the race stopped in the indifference zone: {ppl_race['leader']} is within {ppl_race['delta']:g} "
                  f"nats of the best at {1 - ppl_race['alpha']:.0%}")
    if both:
        words = f"{both['line']}. {words}" if both["disagree"] else f"{words}; {both['line']}"
    return {"rows": rows, "winner": winner["candidate"], "winner_label": winner["label"],
            "winner_spec": {"method": winner["method"], "composed": winner.get("composed", False), "params": {p: v for p, v in winner["params"].items() if v is not None},
                            "log_n": winner["log_n"], "position_map": winner.get("position_map"),
                            "temperature": winner.get("temperature")},
            "best_by_ppl": best["candidate"], "tied_with_winner": others, "equivalent_to_best": others,
            "undecided": undecided, "excluded": excluded, "margin": margin, "test_level": level,
            "inference": scope if len(rows) > 1 else None,
            "verdict": words, "other_metric": both, "regret": regret, "race": ppl_race, "kl_race": kl_race}


def regret_bound(winner: dict, rivals: list[dict], level: float, ppl_race: dict | None) -> dict | None:
    """What the equivalence guarantees against the true best: the largest upper (1 - level) bound of winner -
    c over the candidates c still standing. The true best is among them unless the race dropped it (at most
    the race's alpha), and each bound holds at 1 - level, so with probability at least 1 - alpha - K' level
    the winner's estimand is at most that far above the true best's (0: shown the best)."""
    if not rivals:
        return None
    bounds = [pair(winner, r, level).get("upper") for r in rivals]
    if any(b is None for b in bounds):
        return None
    confidence = 1 - (ppl_race["alpha"] if ppl_race else 0.0) - level * len(rivals)
    nats = max(0.0, max(bounds))
    return {"nats": nats, "confidence": confidence, "line": (
        f"guarantee: with {confidence:.0%} confidence {winner['candidate']} is at most {nats:.4f} nats of the "
        f"estimand above the true best of the {len(rivals) + 1} candidates left (each bound one-sided at {level:.2g}"
        + (f", plus the race's {ppl_race['alpha']:g} chance of dropping the true best)" if ppl_race else ")"))}


def ranking_scope(others: list[dict]) -> dict | None:
    """What the ranking's verdicts generalize to, one statement for all of them: the least general inference among
    the comparisons with the best (`evaluation.inference`: documents, prompts, this text's documents, these windows),
    its unit count the smallest; None where no comparison has one (a single candidate, or none estimable)."""
    scoped = [r["vs_best"] for r in others if r["vs_best"].get("generalizes_to")]
    if not scoped:
        return None
    least = max(scoped, key=lambda p: (GENERALITY.index(p["inference"]) if p["inference"] in GENERALITY else -1,
                                       -(p.get("documents") or p.get("n") or 0)))
    return {"inference": least["inference"], "generalizes_to": least["generalizes_to"],
            "documents": least.get("documents"), "n": least.get("n")}


def verdict(winner: dict, best: dict, others: list[dict], excluded: list[dict], lengths: list[int],
            ppl_race: dict | None, margin: float, measure: str = "log-PPL", scope: dict | None = None) -> str:
    """The winner and why, every other candidate's standing, what would decide the undecided ones."""
    over = ", ".join(map(str, lengths))
    if winner is best:
        why = f"{winner['candidate']} has the lowest mean {measure} over {over} ({winner['objective']:.4f})"
    else:
        why = (f"{winner['candidate']} is shown equivalent within ±{margin:g} nats to the lowest mean {measure}, "
               f"{best['candidate']} ({best['objective']:.4f} vs {winner['objective']:.4f}), and costs less within L "
               f"(KL {winner['short_kl']:.4f} vs {best.get('short_kl', math.nan):.4f})")
    equivalent = [r["candidate"] for r in others if r["verdict"] == "equivalent"]
    undecided = [r for r in others if r["verdict"] == "undecided"]
    worse = [r["candidate"] for r in others if r["verdict"] == "worse"]
    better = [r for r in others if r["verdict"] == "better"]  # only on fewer shared windows: never hidden
    if better:
        why += ("; shown better than the best on the windows both have (it was measured on fewer): " +
                ", ".join(f"{r['candidate']} ({r['vs_best']['diff']:+.4f})" for r in better))
    if equivalent:
        why += f"; equivalent to the best within ±{margin:g} nats: {', '.join(equivalent)}"
    if undecided:
        why += ("; undecided (neither shown worse nor shown equivalent; ranked by their point estimate): " +
                "; ".join(f"{r['candidate']} ({r['vs_best']['diff']:+.4f}, {r['vs_best'].get('answer', '')})"
                          for r in undecided))
    if worse and not undecided and not equivalent:
        why += "; every other eligible candidate is shown worse"
    elif worse:
        why += f"; shown worse: {', '.join(worse)}"
    if scope:
        p = scope
        count, unit = (p["documents"], "document") if p.get("documents") else (p["n"], "unit")
        why += (f" ({p['inference']} inference over {count} {unit}{'' if count == 1 else 's'}: generalizes to "
                f"{p['generalizes_to']})")
    if ppl_race is not None:
        dropped = sum(1 for r in ppl_race["candidates"].values() if r["dropped_round"])
        why += f"; raced: {ppl_race['rounds'][-1]['windows'] if ppl_race['rounds'] else 0} windows, {dropped} dropped"
    if excluded:
        why += "; excluded: " + "; ".join(f"{e['candidate']} ({', '.join(e['why'])})" for e in excluded)
    return why
