"""`ropecli advise`: every context-extension method on the same windows, searched where it has knobs,
ranked by a written rule on held-out windows, ending in a config to deploy (`export_winner`, through
`ropecli.export.plan.export_schedule`, the function `ropecli export` runs). Free of torch and of the
CLI: `advise` takes the evaluators (Session.run of the searched and of the held-out windows).

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
3. candidates not distinguishable from the best (paired 95%, `ropecli.evaluation.stats`) are tied with it,
   and a tie goes to the smallest short-context cost (mean KL at L).
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.evaluation.stats import paired_difference
from ropecli.rope.geometry import Geometry
from ropecli.rope.spec import Spec, make_spec, target_factor
from ropecli.tuning.candidates import search_plans, static_candidates
from ropecli.tuning.objective import Evaluate, Scorer
from ropecli.tuning.search import run_search
from ropecli.tuning.space import parse_vary

PASSKEY_BASELINE = 0.5  # the unscaled model must retrieve at least this share of keys within L for passkey to count
RULE = ("1. out: a candidate breaking --max-short-kl, --max-short-regression or --min-passkey; "
        "2. ranked by mean log-PPL over the target lengths on held-out windows; "
        "3. candidates not distinguishable from the best (paired t-test, 95%) are tied with it, and a tie goes to the "
        "smallest short-context cost (mean KL against the unscaled model at L)")


def search_candidates(run: Evaluate, geom: Geometry, lengths: list[int], names: list[str], budget: int,
                      log_n: bool, factor: float | None) -> dict[str, dict]:
    """The searched candidates' winners: name -> {spec, search} (the search's JSON)."""
    plans = search_plans(budget)
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
           note: Callable[[str], None] = lambda s: None, on_passkey_skipped: Callable[[], None] = lambda: None) -> dict:
    """Search, measure on held-out windows, rank by the rule. Returns every number for advice.json."""
    # one config serves every length once deployed: every candidate runs at the longest target's k at every length
    k = factor = target_factor(factor, lengths, geom.train_len)
    searched: dict[str, dict] = {}
    for log_n in (False, True) if with_log_n else (False,):
        for name, found in search_candidates(run, geom, lengths, names, budget, log_n, factor).items():
            searched[name + ("+log-n" if log_n else "")] = found
    candidates: list[tuple[str, Spec]] = []
    static = static_candidates()
    for log_n in (False, True) if with_log_n else (False,):
        for name in names:
            key = name + ("+log-n" if log_n else "")
            if name in static:
                method, params = static[name]
                candidates.append((key, make_spec(method, params, factor=factor, log_n=log_n)))
            elif key in searched:
                candidates.append((key, searched[key]["spec"]))
    L = geom.train_len
    score = Scorer(held_run, L, lengths, "ppl", k)
    none_L = held_run([make_spec("none")], [L])[0]
    # passkey at the longest target counts only if the unscaled model retrieves within L at all
    none_pk = held_run([make_spec("none")], [L], "passkey")[0] if passkey else None
    passkey_ok = passkey and none_pk.accuracy >= PASSKEY_BASELINE
    if passkey and not passkey_ok:
        on_passkey_skipped()
        note(f"passkey skipped: the unscaled model retrieves {none_pk.accuracy:.0%} of keys within L = {L} "
             f"(under {PASSKEY_BASELINE:.0%}), so retrieval at the target says nothing about the schedules")
    rows = []
    for name, spec in candidates:
        entry = score(spec)
        at_L = held_run([spec.but(factor=k)], [L])[0]
        kl = held_run([spec.but(factor=k)], [L], "kl")[0]
        row = {"candidate": name, "label": spec.label, "method": spec.method, "params": dict(spec.params),
               "log_n": spec.log_n, **entry, "short_ppl": at_L.ppl,
               "short_rise_percent": 100.0 * (at_L.ppl / none_L.ppl - 1.0), "short_kl": kl.kl_mean,
               "short_kl_p99": kl.kl_p99, "short_top1": kl.top1_agreement}
        if passkey_ok:
            pk = held_run([spec], [max(lengths)], "passkey")[0]
            row["passkey_accuracy"] = pk.accuracy
            row["passkey_by_depth"] = pk.by_depth
            row["passkey_result"] = pk.to_json()
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
            "passkey_measured": passkey_ok, "unscaled_passkey_at_L": none_pk.accuracy if none_pk else None,
            "searches": {n: s["search"] for n, s in searched.items()}}


def estimate_units(names, with_log_n, budget, lengths, inputs, held_inputs, passkey: bool) -> int:
    """Forward passes of a full run (cached ones included, they tick at once): the progress bar's total.
    `inputs`, `held_inputs`: the searched and held-out windows (ropecli.evaluation.inputs.Inputs);
    `passkey`: whether every candidate is measured on passkey prompts too."""
    plans = search_plans(budget)
    modes = 2 if with_log_n else 1
    n_search = sum(plans[n][2] for n in names if n in plans) * modes
    per_candidate = held_inputs.units("ppl") * (len(lengths) + 2) + (held_inputs.units("passkey") if passkey else 0)
    return n_search * inputs.units("ppl") * len(lengths) + len(names) * modes * per_candidate + held_inputs.units("ppl")


def export_winner(result: dict, rope, model: str | None, gguf_file: str | None, out_dir: Path) -> list[dict]:
    """The winner through `ropecli.export.plan.export_schedule` (what `ropecli export` runs), for each
    runtime, with the `ropecli export` command that does the same; a runtime that fails is reported, not raised."""
    from ropecli.export.plan import check_export_paths, export_schedule, export_target, is_gguf
    from ropecli.models.config import BUILTIN, BUILTIN_DIR

    source = str(BUILTIN_DIR) if model in (None, BUILTIN) else model
    w = result["winner_spec"]
    spec = make_spec(w["method"], w["params"], log_n=w["log_n"])
    geom = rope.geometry(result["factor"])
    target = export_target(geom, rope, base_given=False)
    jobs = [("transformers", "hf", out_dir / "hf"), ("vllm", "vllm", out_dir / "vllm-overrides.json")]
    if is_gguf(source, gguf_file):
        jobs.append(("llama.cpp", "gguf", out_dir / "model-extended.gguf"))
    flags = ["--model", source, *(["--gguf-file", gguf_file] if gguf_file else []), "--method", spec.method,
             *[x for k, v in w["params"].items() for x in ("--param", f"{k}={v:.10g}")], *(["--log-n"] if spec.log_n else []),
             "--len", str(geom.target_len), "--force"]
    done = []
    for runtime, to, out in jobs:
        command = " ".join(shlex.quote(c) for c in ["ropecli", "export", *flags, "--to", to, "--out", str(out)])
        try:
            check_export_paths(to, str(out), source, gguf_file, force=True)
            written = export_schedule(spec, geom, target, to, str(out), model=source, gguf_file=gguf_file, force=True)
            done.append({"runtime": runtime, "command": command, "ok": True, "output": "\n".join(written["lines"])[-2000:]})
        except RopeCliError as exc:
            done.append({"runtime": runtime, "command": command, "ok": False, "output": str(exc)})
    if not is_gguf(source, gguf_file):
        done.append({"runtime": "llama.cpp", "command": None, "ok": False,
                     "output": "skipped: the model is not a GGUF file (convert it, then `ropecli export --to gguf`)"})
    return done
