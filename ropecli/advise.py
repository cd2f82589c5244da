"""`ropecli advise`: every context-extension method on the same windows, searched where it has knobs,
ranked by a written rule on held-out windows, ending in a config to deploy. Free of torch and of
the CLI: `advise` takes the evaluators (Session.run of the searched and of the held-out windows).

Candidates (all at the longest target's k at every length, as the deployed config runs them; scored
on the same windows):
    none, pi, ntk-aware, dynamic, yarn (transformers' defaults), llama3 (defaults), ntk-fixed,
    yarn-tuned      YaRN's beta_fast, beta_slow searched (`ropecli search`), as its authors advise
    mixed-b         the seed's mixed family, b in [0, 1] by golden-section (`search-b`)
    mixed-clamped   the clamped mixed family, b and the critical pair m_c searched (`ropecli search`)
Searches run on windows 0…n-1 (their evaluations are cached and reused, never repeated); the
ranking uses held-out windows n…n+h-1 that no search saw.

Measures per candidate (held-out): PPL at every target length (paired), passkey accuracy at the
longest target (skipped, with a note, when the unscaled model retrieves under `PASSKEY_BASELINE` of
keys within L), and the short-context cost at L: KL against the unscaled model and the PPL rise,
with the target's k.

The ranking rule (printed with the result):
1. a candidate breaking `max_short_kl`, `max_short_regression` or `min_passkey` is out (each
   exclusion is listed with the constraint that removed it);
2. the rest are ranked by mean log-PPL over the targets (mean over lengths of NLL per token);
3. candidates not distinguishable from the best (paired 95%, `ropecli.stats`) are tied with it,
   and a tie goes to the smallest short-context cost (mean KL at L).
"""

from __future__ import annotations

import math
from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.geometry import Geometry
from ropecli.search import Evaluate, Scorer
from ropecli.specs import Spec, make_spec

STATIC = {"none": ("none", {}), "pi": ("pi", {}), "ntk-aware": ("ntk-aware", {}), "dynamic": ("dynamic", {}),
          "yarn": ("yarn", {}), "llama3": ("llama3", {}), "ntk-fixed": ("ntk-fixed", {})}
SEARCHED = ("yarn-tuned", "mixed-b", "mixed-clamped")
CANDIDATES = ("none", "pi", "ntk-aware", "dynamic", "yarn", "yarn-tuned", "llama3", "ntk-fixed", "mixed-b", "mixed-clamped")
PASSKEY_BASELINE = 0.5  # the unscaled model must retrieve at least this share of keys within L for passkey to count
RULE = ("1. out: a candidate breaking --max-short-kl, --max-short-regression or --min-passkey; "
        "2. ranked by mean log-PPL over the target lengths on held-out windows; "
        "3. candidates not distinguishable from the best (paired t-test, 95%) are tied with it, and a tie goes to the "
        "smallest short-context cost (mean KL against the unscaled model at L)")


def check_candidates(names: list[str] | None) -> list[str]:
    chosen = [n.strip() for item in (names or list(CANDIDATES)) for n in item.split(",") if n.strip()]
    bad = [n for n in chosen if n not in CANDIDATES]
    if bad:
        raise RopeCliError(f"--candidates {bad[0]}: unknown candidate; choose from {', '.join(CANDIDATES)}")
    if not chosen:
        raise RopeCliError(f"--candidates is empty; choose from {', '.join(CANDIDATES)}")
    return list(dict.fromkeys(chosen))


def search_candidates(run: Evaluate, geom: Geometry, lengths: list[int], names: list[str], budget: int,
                      log_n: bool, factor: float | None) -> dict[str, dict]:
    """The searched candidates' winners: name -> {spec, search} (the search's JSON)."""
    from ropecli.param_search import parse_vary, run_search

    plans = {"yarn-tuned": ("yarn", ["beta_fast", "beta_slow"], max(budget, 7)),
             "mixed-b": ("mixed", ["b"], max(min(budget, 12), 4)),
             "mixed-clamped": ("mixed", ["b", "critical"], max(budget, 7))}
    out = {}
    for name in names:
        if name not in plans:
            continue
        method, vary, n_evals = plans[name]
        dims = parse_vary(vary, method, geom)
        res = run_search(run, None, geom, method, dims, {}, lengths, budget=n_evals, log_n=log_n, factor=factor)
        out[name] = {"spec": make_spec(method, res["best_params"], factor=factor, log_n=log_n), "search": res}
    return out


def advise(run: Evaluate, held_run: Evaluate, geom: Geometry, lengths: list[int], *, names: list[str], budget: int,
           with_log_n: bool = False, factor: float | None = None, max_short_kl: float | None = None,
           max_short_regression: float | None = None, min_passkey: float | None = None, passkey: bool = True,
           note: Callable[[str], None] = lambda s: None) -> dict:
    """Search, measure on held-out windows, rank by the rule. Returns every number for advice.json."""
    from ropecli.geometry import default_factor
    from ropecli.stats import paired_difference

    # one config serves every length once deployed: every candidate runs at the longest target's k at every length
    k = factor if factor is not None else default_factor(max(lengths), geom.train_len)
    factor = k
    searched: dict[str, dict] = {}
    for log_n in (False, True) if with_log_n else (False,):
        for name, found in search_candidates(run, geom, lengths, names, budget, log_n, factor).items():
            searched[name + ("+log-n" if log_n else "")] = found
    candidates: list[tuple[str, Spec]] = []
    for log_n in (False, True) if with_log_n else (False,):
        for name in names:
            key = name + ("+log-n" if log_n else "")
            if name in STATIC:
                method, params = STATIC[name]
                candidates.append((key, make_spec(method, params, factor=factor, log_n=log_n)))
            elif key in searched:
                candidates.append((key, searched[key]["spec"]))
    L = geom.train_len
    score = Scorer(held_run, L, lengths, "ppl", k, None, None)
    none_L = held_run([make_spec("none")], [L], "held-out: none @ L")[0]
    # passkey at the longest target counts only if the unscaled model retrieves within L at all
    none_pk = held_run([make_spec("none")], [L], "held-out: passkey none @ L", "passkey")[0] if passkey else None
    passkey_ok = passkey and none_pk["accuracy"] >= PASSKEY_BASELINE
    if passkey and not passkey_ok:
        note(f"passkey skipped: the unscaled model retrieves {none_pk['accuracy']:.0%} of keys within L = {L} "
             f"(under {PASSKEY_BASELINE:.0%}), so retrieval at the target says nothing about the schedules")
    rows = []
    for name, spec in candidates:
        entry = score(spec, f"held-out {name}")
        at_L = held_run([spec.but(factor=k)], [L], f"held-out {name} @ L")[0]
        kl = held_run([spec.but(factor=k)], [L], f"held-out KL {name}", "kl")[0]
        row = {"candidate": name, "label": spec.label, "method": spec.method, "params": dict(spec.params),
               "log_n": spec.log_n, **entry, "short_ppl": at_L["ppl"],
               "short_rise_percent": 100.0 * (at_L["ppl"] / none_L["ppl"] - 1.0), "short_kl": kl["kl_mean"],
               "short_kl_p99": kl["kl_p99"], "short_top1": kl["top1_agreement"]}
        if passkey_ok:
            pk = held_run([spec], [max(lengths)], f"held-out passkey {name}", "passkey")[0]
            row["passkey_accuracy"] = pk["accuracy"]
            row["passkey_by_depth"] = pk["by_depth"]
            row["passkey_result"] = pk
        rows.append(row)
    excluded = []
    for r in rows:
        why = []
        if max_short_kl is not None and r["short_kl"] > max_short_kl:
            why.append(f"short KL {r['short_kl']:.4f} > --max-short-kl {max_short_kl:g}")
        if max_short_regression is not None and r["short_rise_percent"] > max_short_regression:
            why.append(f"PPL at L +{r['short_rise_percent']:.2f}% > --max-short-regression {max_short_regression:g}")
        if min_passkey is not None and passkey_ok and r["passkey_accuracy"] < min_passkey:
            why.append(f"passkey {r['passkey_accuracy']:.0%} < --min-passkey {min_passkey:g}")
        if not math.isfinite(r["objective"]):
            why.append("diverged (infinite PPL)")
        r["excluded"] = why
        if why:
            excluded.append({"candidate": r["candidate"], "why": why})
    eligible = [r for r in rows if not r["excluded"]]
    if not eligible:
        lines = "; ".join(f"{e['candidate']}: {', '.join(e['why'])}" for e in excluded)
        raise RopeCliError(f"no candidate meets the constraints ({lines}); loosen them")
    best = min(eligible, key=lambda r: r["objective"])
    for r in rows:
        r["vs_best"] = paired_difference(r["windows"], best["windows"])
        r["tied"] = (r is best or not r["vs_best"]["distinguishable"]) and not r["excluded"]
    tied = [r for r in eligible if r["tied"]]
    winner = min(tied, key=lambda r: (r["short_kl"], r["objective"]))
    ranking = sorted(eligible, key=lambda r: r["objective"])
    for i, r in enumerate(ranking, 1):
        r["rank"] = i
    others = [r["candidate"] for r in tied if r is not winner]
    if winner is best:
        why = f"{winner['candidate']} has the lowest mean log-PPL over {', '.join(map(str, lengths))} ({winner['objective']:.4f})"
    else:
        why = (f"{winner['candidate']} is tied (paired 95%) with the lowest mean log-PPL, {best['candidate']} "
               f"({best['objective']:.4f} vs {winner['objective']:.4f}), and costs less within L "
               f"(KL {winner['short_kl']:.4f} vs {best['short_kl']:.4f})")
    verdict = why + (f"; statistically tied with it: {', '.join(others)}" if others else
                     "; every other eligible candidate is distinguishably worse (paired 95%)")
    if excluded:
        verdict += "; excluded: " + "; ".join(f"{e['candidate']} ({', '.join(e['why'])})" for e in excluded)
    return {"lengths": lengths, "factor": k, "rule": RULE, "candidates": [n for n, _ in candidates],
            "rows": rows, "winner": winner["candidate"], "winner_label": winner["label"], "winner_spec": {
                "method": winner["method"], "params": {p: v for p, v in winner["params"].items() if v is not None},
                "log_n": winner["log_n"]},
            "best_by_ppl": best["candidate"], "tied_with_winner": others, "excluded": excluded, "verdict": verdict,
            "passkey_measured": passkey_ok, "unscaled_passkey_at_L": none_pk["accuracy"] if none_pk else None,
            "searches": {n: s["search"] for n, s in searched.items()}}
