"""The verdicts of a search against the methods people deploy (`ropecli.spec.STANDARD_METHODS`): search-b's
references on the same windows, PI and NTK-fixed reused from the b = 0 and b = 1 evaluations (`reference_rows`), and
whether one beats the best b (`references_verdict`); search's winner and the standard methods re-measured on held-out
windows (`held_out_verdict`); a `--reference` as typed (`parse_reference`)."""

from __future__ import annotations

from ropecli.errors import RopeCliError
from ropecli.evaluation.metrics import Metric
from ropecli.evaluation.stats import tie_answer
from ropecli.maps.map_spelling import parse_map
from ropecli.rope.geometry import Geometry
from ropecli.rope.target import Target
from ropecli.spec import Spec, make_spec, standard_specs_for
from ropecli.tuning.objective import Evaluate, Scorer, pair

# b at which mixed *is* a standard method (b = 0: Lambda_m = k; b = 1: Lambda_m = k^(2m/d); both identities
# are tested in test_schedule_identities): an evaluated end of the range is reused instead of run again
SAME_AS_MIXED = {"pi": 0.0, "ntk-fixed": 1.0}


def reference_rows(score: Scorer, geom: Geometry, log_n: bool, factor: float | None, by_b: dict[float, dict]) -> list[dict]:
    """The standard methods on the searched windows; PI, NTK-fixed (and b = 0.625) come from the
    search's evaluations at the same b when it made them."""
    rows = []
    for spec in standard_specs_for(geom, factor=factor, log_n=log_n):
        params = dict(spec.params)
        same_b = SAME_AS_MIXED.get(spec.method, params.get("b") if spec.method == "mixed" and params.get("critical") is None else None)
        if same_b in by_b:
            fields = {k: v for k, v in by_b[same_b].items() if k not in ("b", "vs_best", "params", "label")}
            rows.append({"label": spec.label, "method": spec.method, **fields, "same_as": f"mixed(b={same_b:g})"})
        else:
            rows.append({"label": spec.label, "method": spec.method, **score(spec)})
    return rows


def references_verdict(references: list[dict], best: dict) -> dict:
    """Each reference's paired difference to the best b (`vs_best_b`) and the verdict in plain words:
    a reference that beats the best b is named first."""
    for r in references:
        p = pair(r, best)
        r["vs_best_b"] = {**p, "beats_best_b": bool(p["distinguishable"] and p["diff"] is not None and p["diff"] < 0)}
    beating = sorted((r for r in references if r["vs_best_b"]["beats_best_b"]), key=lambda r: r["objective"])
    tied = [r["label"] for r in references if not r["vs_best_b"]["distinguishable"]]  # equivalent or undecided
    b = best["b"]
    if beating:
        top = beating[0]
        d = top["vs_best_b"]
        verdict = (f"{top['label']} beats the best b = {b:.4f}: {d['diff']:+.4f} nats ± {d['half_width']:.2g} (paired 95% interval)"
                   + (f"; so do {', '.join(r['label'] for r in beating[1:])}" if len(beating) > 1 else "")
                   + f". Use {top['label']}, not mixed(b).")
    elif tied:
        answers = "; ".join(f"{r['label']}: {tie_answer(r['vs_best_b'])}" for r in references
                            if not r["vs_best_b"]["distinguishable"])
        verdict = (f"best b = {b:.4f} is not shown different (paired 95%) from {', '.join(tied)} ({answers})")
    else:
        verdict = f"best b = {b:.4f} beats every reference (paired 95%)"
    return {"verdict": verdict, "references_beating_best_b": [r["label"] for r in beating],
            "references_tied_with_best_b": tied}


def held_out_verdict(run: Evaluate, target: Target, objective: Metric, winner: Spec, extra: list[Spec], log_n: bool) -> dict:
    """The winner and the standard methods on held-out windows (prompts, for a passkey or task objective); the
    winner against the best of them, paired."""
    geom, lengths, factor = target.geom, list(target.lengths), target.factor
    score = Scorer(run, geom.shipped_len, lengths, objective, 1.0)
    rows = [{"label": winner.label, "role": "winner", **score(winner)}]
    for spec in standard_specs_for(geom, factor=factor, log_n=log_n) + list(extra):
        if spec.label != winner.label:
            rows.append({"label": spec.label, "role": "standard", **score(spec)})
    win = rows[0]
    for r in rows:
        r["vs_winner"] = pair(r, win)
    best_std = min(rows[1:], key=lambda r: r["objective"])
    d = pair(win, best_std)
    where = "held-out prompts" if objective.prompted else "held-out windows"
    if d["diff"] is not None and d["diff"] < 0 and d["distinguishable"]:
        verdict = (f"{winner.label} beats the best standard method, {best_std['label']}, on {where}: "
                   f"{d['diff']:+.4f} nats ± {d['half_width']:.2g} (paired 95% interval)")
    elif d["diff"] is not None and d["diff"] > 0 and d["distinguishable"]:
        verdict = (f"{best_std['label']} beats the searched {winner.label} on {where}: "
                   f"{-d['diff']:+.4f} nats ± {d['half_width']:.2g} (paired 95% interval); use {best_std['label']}")
    else:
        verdict = (f"{winner.label} and the best standard method, {best_std['label']}, are not shown different on "
                   f"{where} ({d['diff']:+.4f} nats ± {d['half_width'] or 0:.2g}, paired 95% interval): {tie_answer(d)}")
    verdict += f" [{d.get('inference')} inference: generalizes to {d.get('generalizes_to')}]" if d.get("generalizes_to") else ""
    return {"rows": rows, "best_standard": best_std["label"], "winner_vs_best_standard": d, "verdict": verdict,
            "winner_beats_best_standard": bool(d["diff"] is not None and d["diff"] < 0 and d["distinguishable"])}


def parse_reference(text: str, factor: float | None, log_n: bool) -> Spec:
    """`--reference yarn`, `--reference mixed:b=0.95`, `--reference yarn:beta_fast=16,beta_slow=2`; under a position
    map as the tables label it, `--reference none@selfextend:G=4,W=2048`."""
    text, at, map_text = text.partition("@")
    name, _, rest = text.partition(":")
    params = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, sep, value = item.partition("=")
        try:
            params[key.strip().replace("-", "_")] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise RopeCliError(f"--reference {text}: write METHOD or METHOD:KEY=VALUE,KEY=VALUE, e.g. --reference mixed:b=0.95")
    spec = make_spec(name.strip(), params, factor=factor, log_n=log_n)
    return spec.but(position_map=parse_map(map_text)) if at else spec
