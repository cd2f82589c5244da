"""The error rates behind one `ropecli advise` recommendation, each family's where it is spent, and the
level of the whole (a union bound: the chance that any family errs is at most the sum of their rates).

Families, each at its own stated rate:
    PPL race         the true best is dropped, or where the race stopped in its indifference zone the leader is
                     more than delta behind it (raced: one event, the same one-sided bounds), or: some verdict of the
                     ranking is wrong (unraced,
                     one-sided 0.025 / (K - 1) per comparison and side)
    KL tie-break     the candidate with the least cost within L among the tied ones is dropped
    passkey baseline the unscaled model's retrieval within L is misjudged (Clopper-Pearson, corrected for looks)
    other metric     some verdict on the metric advise does not rank by is wrong (one-sided 0.025 / (K - 1))
    task guard       a candidate is wrongly shown worse on the task (`ropecli.tuning.task_guard`, 0.025 each)
The serving tables and the decode-across-L verdicts are statements about each runtime on their own, each
at 95%, and are not part of the winner's level.
"""

from __future__ import annotations


def error_budget(result: dict) -> dict:
    """{families: [{family, rate, risk}], level, line} for a tournament's result (advise.json's fields)."""
    fam = []
    if result.get("race"):
        fam.append({"family": "PPL race", "rate": result["race"]["alpha"], "risk": "the true best is dropped" + (
            f", or the leader is more than {result['race']['delta']:g} nats behind it (one event: the same bounds)"
            if result["race"].get("within_delta") else "")})
    elif len(result.get("rows", [])) > 1:
        tests = max(len([r for r in result["rows"] if not r.get("excluded")]) - 1, 1)
        fam.append({"family": "ranking", "rate": 2 * result["test_level"] * tests, "risk": "a verdict of the ranking is wrong"})
    if result.get("kl_race"):
        fam.append({"family": "KL tie-break", "rate": result["kl_race"]["alpha"],
                    "risk": "the least cost within L among the tied is dropped"})
    if result.get("passkey_baseline_alpha"):
        fam.append({"family": "passkey baseline", "rate": result["passkey_baseline_alpha"],
                    "risk": "the unscaled model's retrieval within L is misjudged"})
    guarded = [r["task_guard"] for r in result.get("rows", []) if r.get("task_guard")]
    if guarded:  # one one-sided test per candidate guarded: a wrong exclusion may drop the true best
        fam.append({"family": f"{guarded[0]['task']} guard", "rate": sum(g["level"] for g in guarded),
                    "risk": "a candidate is wrongly shown worse at the target than as shipped within Ls"})
    other = result.get("other_metric")
    if other:
        tests = max(len([r for r in result["rows"] if r.get("also_vs_best")]) - 1, 1)
        fam.append({"family": f"{other['metric']} verdicts", "rate": 2 * other["level"] * tests,
                    "risk": "a verdict on the other metric is wrong"})
    level = max(0.0, 1 - sum(f["rate"] for f in fam))
    parts = ", ".join(f"{f['family']} {f['rate']:.3g} ({f['risk']})" for f in fam)
    return {"families": fam, "level": level,
            "line": (f"error rates: {parts}; the recommendation as a whole holds with at least {level:.0%} "
                     "(union bound); each runtime's serving table and decode verdicts at 95% on their own")}
