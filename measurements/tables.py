"""Markdown tables of docs/measurements/smollm2*.md from ropecli's own JSON in measurements/smollm2/ (nothing typed by hand).

    python measurements/tables.py            # prints every table whose JSON exists
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "smollm2"


def load(name: str) -> dict | None:
    path = HERE / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def header(*columns: str) -> None:
    """A markdown table's head: the column names and the rule under them."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def verdicts(results: list[dict], values: str) -> dict[int, dict]:
    """Each row's paired comparison with the best row, recomputed from its per-window `values` with
    ropecli's verdict rule (worse / equivalent within ±0.01 / undecided, 95 % for the table)."""
    from ropecli.evaluation.stats import rank_against_best

    per = {i: [math.inf if v is None else v for v in r[values]] for i, r in enumerate(results)}
    docs = results[0].get("windows") if isinstance(results[0].get("windows"), list) and values != "windows" else None
    return rank_against_best(per, docs)


def vs_best(v: dict) -> str:
    if v.get("best"):
        return "best"
    if v.get("diff") is None or v.get("half_width") is None:
        return "—"
    return f"{v['diff']:+.4f} ± {v['half_width']:.3g}: {v['verdict']}"


def half(r: dict) -> float:
    """A PPL's 95 % half-width across its windows."""
    from ropecli.evaluation.stats import ppl_half_width

    return ppl_half_width(r.get("ppl_err"), len(r.get("window_nll") or [])) or 0.0


def ppl_table(name: str) -> None:
    d = load(name)
    if d is None:
        return
    print(f"{name}: {d['model']} ({d.get('runtime', 'transformers')}, {d['dtype']}), {d['samples']} windows of {d['results'][0]['len']} tokens, "
          f"{d['forward_passes']} forward passes, cache hits {d['cache']['hits']}\n")
    header("method", "k", "PPL ± 95 %", "Δ mean log-PPL vs best (paired, ± 95 %): verdict")
    v = verdicts(d["results"], "window_nll")
    order = sorted(range(len(d["results"])), key=lambda i: d["results"][i]["ppl"] or math.inf)
    for i in order:
        r = d["results"][i]
        print(f"| {r['label']} | {r['factor']:g} | {r['ppl']:.3f} ± {half(r):.2g} | {vs_best(v[i])} |")
    print()


def kl_table(name: str) -> None:
    d = load(name)
    if d is None:
        return
    r0 = d["results"][0]
    print(f"{name}: KL(unscaled ‖ scaled) within L, {d['samples']} windows of {r0['len']} tokens at k = {r0['factor']:g}\n")
    header("method", "mean KL (nats/token)", "p99", "top-1 agreement", "vs best (paired, ± 95 %): verdict")
    v = verdicts(d["results"], "window_kl")
    for i in sorted(range(len(d["results"])), key=lambda i: d["results"][i]["kl_mean"]):
        r = d["results"][i]
        print(f"| {r['label']} | {r['kl_mean']:.5f} | {r['kl_p99']:.4f} | {r['top1_agreement']:.2f} % | {vs_best(v[i])} |")
    print()


def passkey_table(name: str) -> None:
    d = load(name)
    if d is None:
        return
    r0 = d["results"][0]
    depths = [b["depth"] for b in r0["by_depth"]]
    print(f"{name}: passkey at {r0['len']} tokens, {r0['by_depth'][0]['samples']} prompts per depth, {r0['digits']} digits\n")
    header("method", "accuracy", *(f"depth {x:g}" for x in depths), "answer NLL (nats)", "vs best (paired, ± 95 %): verdict")
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(d["results"]):
        groups.setdefault(r["len"], []).append(i)
    v = {}
    for idx in groups.values():
        ranked = verdicts([d["results"][i] for i in idx], "prompt_answer_nll")
        v.update({i: ranked[j] for j, i in enumerate(idx)})
    for i, r in enumerate(d["results"]):
        cells = " | ".join(f"{b['accuracy']:.0%}" for b in r["by_depth"])
        best = vs_best(v[i]) if len(groups[r["len"]]) > 1 else "—"
        print(f"| {r['label']} | {r['accuracy']:.0%} | {cells} | {r['answer_nll']:.3f} | {best} |")
    print()


def verify_rows() -> None:
    rows = [(p.stem, json.loads(p.read_text())) for p in sorted(HERE.glob("verify-*.json")) if p.stat().st_size]
    if not rows:
        return
    header("export", "runtime", "verdict", "the run")
    for name, d in rows:
        run = next((c for c in d["checks"] if c["what"].startswith(("PPL", "effect"))), None)
        shown = f"{run['what']}: expected {run['expected']}, found {run['found']}" if run else "; ".join(d["notes"])
        print(f"| {name} | {d['runtime']} | {d['verdict']} | {shown} |")
    print()


def search_rows() -> None:
    """Per search: what it searched and found on its windows, then the winner against every deployed
    method on the held-out windows (paired with the winner, 95 %), and the winner against the best deployed
    one, recomputed from the numbers rather than the JSON's sentence."""
    for p in sorted(HERE.glob("search-*.json")):
        d = json.loads(p.read_text())
        vary = ", ".join(f"{v['name']} in [{v['lo']:g}, {v['hi']:g}]" for v in d["vary"])
        n_windows = len(next(e["windows"] for e in d["evaluations"] if "windows" in e))
        print(f"{p.stem}: {d['method']}, {vary}; {d['search_evaluations']} evaluations ({d['optimizer']}) on "
              f"{n_windows} windows at {', '.join(map(str, d['lengths']))}; best {d['best_label']} "
              f"(mean log-PPL {d['best_objective']:.4f})\n")
        held = d.get("held_out")
        if not held:
            continue
        print(f"held out: {len(held['rows'][0]['windows'])} windows\n")
        from ropecli.evaluation.stats import ppl_half_width
        from ropecli.tuning.objective import pair

        header("schedule", "role", "PPL ± 95 %", "Δ mean log-PPL vs the searched winner (paired, ± 95 %): verdict")
        win = next(r for r in held["rows"] if r["role"] == "winner")
        for r in sorted(held["rows"], key=lambda r: r["objective"]):
            n = len(r["windows"])
            ppl = " / ".join(f"{v:.3f} ± {ppl_half_width(r['ppl_err'][k], n) or 0:.2g}" for k, v in r["ppl"].items())
            v = pair(r, win)
            cell = "—" if r["role"] == "winner" else f"{v['diff']:+.4f} ± {v['half_width']:.3g}: {v['verdict']}"
            print(f"| {r['label']} | {r['role']} | {ppl} | {cell} |")
        best_std = min((r for r in held["rows"] if r["role"] != "winner"), key=lambda r: r["objective"])
        w = pair(win, best_std)
        word = {"better": "the searched winner is better", "worse": f"{held['best_standard']} is better",
                "equivalent": "equivalent within ±0.01 nats", "undecided": "undecided"}[w["verdict"]]
        print(f"\nwinner − best deployed ({held['best_standard']}): {w['diff']:+.4f} ± {w['half_width']:.3g} nats "
              f"(paired 95 % interval, {w['n']} windows): {word}\n")


def key_table(*names: str) -> None:
    """PPL and key-token PPL of every schedule of the `names` runs (the same windows: paired across runs), each
    ranked by ropecli's rule, and how far each metric separates the schedules (median |Δ|/SE over the pairs)."""
    from ropecli.evaluation.stats import separation

    runs = [d for d in map(load, names) if d is not None]
    if len(runs) < len(names):
        return
    results = [r for d in runs for r in d["results"] if r["metric"] == "ppl"]
    keys = [[math.inf if v is None else v for v, n in zip(r["window_key_nll"], r["window_key_tokens"]) if n] for r in results]
    ppl_v = verdicts(results, "window_nll")
    key_v = verdicts([{"k": k, "windows": [w for w, n in zip(r["windows"], r["window_key_tokens"]) if n]}
                      for k, r in zip(keys, results)], "k")
    docs = results[0]["windows"]
    print(f"{' + '.join(names)}: {results[0]['len']} tokens, {len(docs)} windows ({', '.join(docs)}); key rule "
          f"{results[0]['key_rule']}: {results[0]['key_tokens']} key predictions of {results[0]['tokens']}\n")
    header("method", "PPL ± 95 %", "key PPL ± 95 %", "Δ log-PPL vs best: verdict", "Δ key NLL vs best: verdict")
    for i in sorted(range(len(results)), key=lambda i: results[i]["ppl"]):
        r = results[i]
        khalf = ppl_half_width(r["key_ppl_err"], len(keys[i])) or 0.0
        print(f"| {r['label']} | {r['ppl']:.3f} ± {half(r):.2g} | {r['key_ppl']:.3f} ± {khalf:.2g} | {vs_best(ppl_v[i])} | "
              f"{vs_best(key_v[i])} |")
    labels = [r["label"] for r in results]
    kdocs = [w for w, n in zip(docs, results[0]["window_key_tokens"]) if n]
    sep = {m: separation(dict(zip(labels, v)), d) for m, v, d in
           (("PPL", [r["window_nll"] for r in results], docs), ("key PPL", keys, kdocs))}
    n = len(sep["PPL"]["pairs"])
    print("\n" + "; ".join(f"median |Δ|/SE over the {n} pairs, {m}: {s['median_ratio']:.2f}" for m, s in sep.items()))
    for m, order in (("PPL", sorted(results, key=lambda r: r["ppl"])), ("key PPL", sorted(results, key=lambda r: r["key_ppl"]))):
        print(f"\nranked by {m}: " + " < ".join(short_label(r["label"]) for r in order))
    print()


def short_label(label: str) -> str:
    """A schedule's name, with its parameters only where they tell two of one method apart (mixed)."""
    return label if label.startswith("mixed") else label.split("(")[0]


def ppl_half_width(err, n):
    from ropecli.evaluation.stats import ppl_half_width as hw

    return hw(err, n)


def key_rules_rows() -> None:
    d = load("key-rules-8k")
    if d is None:
        return
    s = d["summary"]
    print(f"key-rules-8k: {d['model']}, the first L = {d['L']} tokens of {len(d['windows'])} windows; predictions judged "
          f"by LongPPL's rule (after the first {d['trunc_len']}): {s['judged']}\n")
    header("rule", "key predictions", "mean long-context gain (nats)")
    print(f"| far-repeat | {s['far_repeat']} | {s['gain_far_repeat']:.3f} |")
    print(f"| long-short (LongPPL, SmolLM2 itself as the evaluator) | {s['long_short']} | {s['gain_long_short']:.3f} |")
    print(f"| every prediction | {s['judged']} | {s['gain_all']:.3f} |")
    print(f"\nboth rules: {s['both']} predictions; far-repeat finds {s['recall_of_long_short']:.0%} of LongPPL's key tokens, "
          f"{s['precision_against_long_short']:.0%} of far-repeat's are LongPPL's\n")


def workload_rows(name: str) -> None:
    """One run of `compare --workload`: per runtime, every candidate and export with its PPL at each request
    length, the expected NLL and the paired Δ to the runtime's best with the verdict, its decode across L (a prompt
    shorter than L decoded past it through the KV cache, against one pass) and its PPL at L against the model
    as shipped (both as that runtime serves the export)."""
    d = load(name)
    if d is None or "serving" not in d:
        return
    s = d["serving"]
    shares = s["workload"]["shares"]
    across = s.get("decode")
    print(f"{name}: requests {', '.join(f'{n}: {w:.0%}' for n, w in shares.items())}; exported for k = {s['factor']:g}; "
          f"{d['samples']} windows" + (f"; decode across L: a {across['prompt_len']}-token prompt decoded to "
                                       f"{across['total_len']}" if across else "") + "\n")
    for runtime, block in s["runtimes"].items():
        print(f"{runtime}:\n")
        header("candidate", "export", *[f"PPL @ {n}" for n in shares], "expected NLL", "Δ vs best (paired, ± 95 %): verdict",
               *(["decode across L (Δ nats/token)", "PPL @ L vs native"] if across else []))
        for r in sorted(block["rows"], key=lambda r: r.get("expected_nll", math.inf)):
            if "unservable" in r:
                print(f"| {short_label(r['candidate'])} | {r['variant']} | " + " | ".join("—" for _ in shares) +
                      f" | — | cannot be served: {r['unservable']} |" + (" — | — |" if across else ""))
                continue
            print(f"| {short_label(r['candidate'])} | {r['variant']} | " + " | ".join(f"{r['ppl'][n]:.3f}" for n in shares) +
                  f" | {r['expected_nll']:.4f} | {vs_best(r['vs_best'])} |" +
                  (f" {decode_cell(r)} | {within_cell(r)} |" if across else ""))
        print()


def decode_cell(r: dict) -> str:
    d = r.get("decode")
    if not d or not d.get("damage"):
        return "—"
    dmg = d["damage"]
    if d.get("one_schedule"):
        return f"{dmg['diff']:+.1e} (one schedule, 1 window)"
    hw = f" ± {dmg['half_width']:.3g}" if dmg.get("half_width") is not None else ""
    return f"{dmg['diff']:+.4f}{hw}: {dmg['verdict']}; worst token {d['worst_token']:.2f}"


def within_cell(r: dict) -> str:
    w = r.get("within_L")
    return "—" if not w else f"{w['ppl']:.3f} ({w['rise_percent']:+.1f} %)"


def advise_rows(name: str) -> None:
    """One `ropecli advise` run: its ranking (PPL and key PPL on each candidate's windows, the paired Δ on each
    metric to that metric's best, the windows, the verdict), then the verdict, the other metric's rule and the
    error budget, as advice.json has them."""
    d = load(name)
    if d is None:
        return
    n = str(max(d["lengths"]))
    print(f"{name}: {d['model']}, {d['held_out_windows']} held-out windows in the first round, {d['forward_passes']} forward passes\n")
    header("rank", "candidate", f"PPL @ {n}", f"key PPL @ {n}", "Δ vs best (nats, ± 95 %)", "Δ key PPL vs its best",
           "windows", "verdict")
    for r in sorted(d["rows"], key=lambda r: r.get("rank") or 99):
        verdict = "winner" if r["candidate"] == d["winner"] else (
            f"dropped in round {r['race']['dropped_round']}" if r.get("race", {}).get("dropped_round") else r["verdict"])
        print(f"| {r.get('rank') or '—'} | {r['candidate']} | {r['ppl'][n]:.3f} | {(r.get('key_ppl') or {}).get(n, math.nan):.3f} | "
              f"{vs_best(r['vs_best'])} | {vs_best(r['also_vs_best']) if r.get('also_vs_best') else '—'} | "
              f"{r.get('race', {}).get('windows', len(r['windows']))} | {verdict} |")
    print(f"\nverdict: {d['verdict']}\n\n{d['error_budget']['line']}\n")


def tasks_rows(name: str) -> None:
    """One `compare --task` run: per task and length, each schedule's answer NLL, its gain over the needle-free
    prompt, the gain at each depth, and the paired Δ to the column's best (as compare judged it); then the rank
    agreement lines with PPL where the run measured PPL too."""
    d = load(name)
    if d is None:
        return
    rows = [r for r in d["results"] if "task" in r]
    if not rows:
        return
    depths = [x["depth"] for x in rows[0]["by_depth"]]
    print(f"{name}: {d['model']}, {rows[0]['samples']} prompts per cell, {d['forward_passes']} forward passes\n")
    header("task", "len", "schedule", "answer NLL", "gain", *[f"gain @ {x:g}" for x in depths], "Δ vs best (nats, ± 95 %)")
    for r in sorted(rows, key=lambda r: (r["task"], r["len"], r["answer_nll"] if r["answer_nll"] is not None else math.inf)):
        gains = [f"{x['gain']:+.2f}" if x["gain"] is not None else "—" for x in r["by_depth"]]
        nll = "inf" if r["answer_nll"] is None else f"{r['answer_nll']:.2f}"
        gain = "—" if r["gain"] is None else f"{r['gain']:+.2f}"
        print(f"| {r['task']} | {r['len']} | {short_label(r['label'])} | {nll} | {gain} | {' | '.join(gains)} | "
              f"{vs_best(r['vs_best'])} |")
    print()
    tasks_ppl_rows(d)


def tasks_ppl_rows(d: dict) -> None:
    """A `compare --task --metric ppl` run's PPL side: each schedule's PPL and key-token PPL at each length on the
    run's windows, the paired Δ to each column's best; then each task's rank agreement with them."""
    rows = [r for r in d["results"] if r["metric"] == "ppl"]
    if not rows:
        return
    windows = len(rows[0]["window_nll"])
    print(f"PPL beside the tasks: {windows} windows per length ({', '.join(dict.fromkeys(rows[0]['windows']))})\n")
    header("len", "schedule", "PPL ± 95 %", "Δ log-PPL vs best", "key PPL", "Δ log key PPL vs best")
    for r in sorted(rows, key=lambda r: (r["len"], r["nll"])):
        key = "—" if r.get("key_ppl") is None else f"{r['key_ppl']:.3f}"
        print(f"| {r['len']} | {short_label(r['label'])} | {r['ppl']:.3f} ± {half(r):.2g} | {vs_best(r['vs_best'])} | {key} | "
              f"{vs_best(r['key_vs_best']) if r.get('key_vs_best') else '—'} |")
    print()
    for a in d.get("agreement", []):
        what = {"ppl": "PPL", "key-ppl": "key PPL"}[a["vs"]]
        if a["rho"] is None:
            print(f"{a['task']} vs {what} @ {a['len']}: no rank correlation ({a['why']})")
            continue
        print(f"{a['task']} vs {what} @ {a['len']}: Spearman's rho {a['rho']:+.2f} (95 % simultaneous interval "
              f"{a['low']:+.2f} to {a['high']:+.2f}; pairs ordered: {a['ordered_a']} by the task, {a['ordered_b']} by "
              f"{what}, of {a['pairs']})")
    print()


def published_rows() -> None:
    """The published passkey raw and in the chat template, and passkey-text, per method and length
    (published-raw-N.json: passkey and passkey-text; published-chat-N.json: passkey under --chat-template auto); the
    paired difference of the answer NLL to the model as shipped (none) on the same prompts, ± its 95 % half-width."""
    from ropecli.evaluation.inference import paired

    cells: dict = {}
    for n in (8192, 16384):
        for name, frame in ((f"published-raw-{n}", "raw"), (f"published-chat-{n}", "chat")):
            d = load(name)
            for r in (d or {}).get("results", []):
                variant = "passkey-text" if r["metric"] == "passkey-text" else f"passkey {frame}"
                cells[(n, short_label(r["label"]), variant)] = r
    if not cells:
        return
    variants = ("passkey raw", "passkey chat", "passkey-text")
    header("len", "method", *(f"{v}: retrieved, NLL, Δ vs none" for v in variants), "chat − raw (same keys)")
    for n in (8192, 16384):
        for label in ("none", "yarn", "none@selfextend"):  # short_label: Self-Extend G = 4, W = 2048
            row = []
            for v in variants:
                r, ref = cells.get((n, label, v)), cells.get((n, "none", v))
                if r is None:
                    row.append("—")
                    continue
                hits = sum(r["prompt_correct"])
                cell = f"{hits:g}/{len(r['prompt_correct'])}, {r['answer_nll']:.2f}"
                if ref is not None and label != "none":
                    p = paired(r["prompt_answer_nll"], ref["prompt_answer_nll"])
                    cell += f", {p.diff:+.2f} ± {p.half_width():.2f}"
                row.append(cell)
            raw, chat = cells.get((n, label, "passkey raw")), cells.get((n, label, "passkey chat"))
            if raw is not None and chat is not None:  # the same keys at each depth under both frames: paired
                p = paired(chat["prompt_answer_nll"], raw["prompt_answer_nll"])
                row.append(f"{p.diff:+.2f} ± {p.half_width():.2f}")
            else:
                row.append("—")
            if any(c != "—" for c in row):
                print(f"| {n} | {label} | " + " | ".join(row) + " |")
    print()


def lm_eval_rows(name: str) -> None:
    """Benchmarks/lm_eval_agreement.py's rows (its --out JSON)."""
    path = HERE / f"{name}.json"
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    header("folder", "len", "lm-eval", "ropecli on lm-eval's prompts", "paired diff [95 %]", "same ids",
           "ropecli's prompts", "lm-eval − ropecli [95 %]")
    for r in rows:
        d, lo, hi = r["paired_difference"]
        du, lou, hiu = r["difference"]
        n = r["prompts"]
        print(f"| {r['folder'].removeprefix('SmolLM2-135M-Instruct.Q4_1-')} | {r['len']} | {sum(r['lm_eval_scores']):g}/{n} | "
              f"{sum(r['ropecli_on_lm_eval_scores']):g}/{n} | {d:+.2f} [{lo:+.2f}, {hi:+.2f}] | {r['same_token_ids']}/{n} | "
              f"{sum(r['ropecli_scores']):g}/{len(r['ropecli_scores'])} | {du:+.2f} [{lou:+.2f}, {hiu:+.2f}] |")
    print()


def bos_rows() -> None:
    """What --bos changes on SmolLM2 (its tokenizer adds nothing before a text: auto is no BOS) against BOS
    before every window and prompt (always, what ropecli measured before --bos): bos-{always,auto}-ppl-passkey.json and
    bos-{always,auto}-niah.json. Paired by unit: the same windows of the same plays (a window with BOS holds one text
    token fewer), the same keys and needles at the same depths; auto − always, ± the 95 % half-width (PPL: mean
    log-PPL over windows, clustered by play; prompts: answer NLL; retrieved: Newcombe's paired interval)."""
    from ropecli.evaluation.inference import paired
    from ropecli.evaluation.proportions import newcombe_paired

    runs = {bos: [r for part in ("ppl-passkey", "niah") for r in (load(f"bos-{bos}-{part}") or {}).get("results", [])]
            for bos in ("always", "auto")}
    cells = {bos: {(r["metric"], r["len"], short_label(r["label"])): r for r in rs} for bos, rs in runs.items()}
    if not cells["always"] or not cells["auto"]:
        return
    header("metric", "len", "method", "BOS always", "BOS auto (none)", "auto − always (paired, ± 95 %)", "retrieved: auto − always [95 %]")
    for key in sorted(set(cells["always"]) & set(cells["auto"]), key=lambda k: (k[0] != "ppl", k[0], k[1], k[2])):
        a, b = cells["auto"][key], cells["always"][key]
        metric, n, label = key
        if metric == "ppl":
            assert a["windows"] == b["windows"], (a["windows"], b["windows"])  # the same plays, window by window
            p = paired(a["window_nll"], b["window_nll"], docs=a["windows"])
            print(f"| PPL | {n} | {label} | {b['ppl']:.2f} | {a['ppl']:.2f} | {p.diff:+.4f} ± {p.half_width():.4f} nats/token "
                  f"({len(a['windows'])} windows) | — |")
            continue
        p = paired(a["prompt_answer_nll"], b["prompt_answer_nll"])
        d, lo, hi = newcombe_paired([float(x) for x in a["prompt_correct"]], [float(x) for x in b["prompt_correct"]])
        k = len(a["prompt_correct"])
        print(f"| {metric} | {n} | {label} | {sum(b['prompt_correct'])}/{k}, NLL {b['answer_nll']:.2f} | "
              f"{sum(a['prompt_correct'])}/{k}, NLL {a['answer_nll']:.2f} | {p.diff:+.2f} ± {p.half_width():.2f} nats (answer) | "
              f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}] |")
    print()


def scores_rows(*names: str) -> None:
    """The published passkey scored twice (passkey --score generate): teacher-forced (every key token the
    argmax) and as the scripts do (10 greedy tokens, the first integer), per run and method; where they disagree,
    what the model said."""
    from ropecli.evaluation.proportions import clopper_pearson

    rows = [r for name in names for r in (load(name) or {}).get("results", []) if r.get("prompt_generated") is not None]
    if not rows:
        return
    header("len", "method", "prompts", "teacher-forced", "generated", "agree [95 %, exact]", "disagreements: what it said (teacher, generated)")
    for r in rows:
        t, g = r["prompt_correct"], r["prompt_generated"]
        agree = sum(x == y for x, y in zip(t, g))
        lo, hi = clopper_pearson(agree, len(t))
        odd = "; ".join(f"{said!r} ({'✓' if x else '✗'}, {'✓' if y else '✗'})" for x, y, said in zip(t, g, r["prompt_said"])
                        if x != y) or "—"
        print(f"| {r['len']} | {short_label(r['label'])} | {len(t)} | {sum(t)} | {sum(g)} | {agree}/{len(t)} [{lo:.2f}, {hi:.2f}] | {odd} |")
    print()


if __name__ == "__main__":
    for name in ("compare-16k", "llamacpp-16k", "maps-16k-ppl"):
        ppl_table(name)
    kl_table("kl-4k")
    kl_table("kl-4k-searched")
    for name in ("passkey-8k", "passkey-16k"):
        passkey_table(name)
    verify_rows()
    search_rows()
    key_table("tokens-16k", "tokens-16k-winner")
    key_rules_rows()
    for name in ("workload-short", "workload-long", "workload-decode"):
        workload_rows(name)
    advise_rows("advise-16k")
    advise_rows("advise-16k-maps")
    for name in ("tasks-8k", "tasks-16k", "tasks", "maps-16k", "maps-16k-llamacpp"):
        tasks_rows(name)
    published_rows()
    for name in ("lm-eval-niah-8192", "lm-eval-niah-16384"):
        lm_eval_rows(name)
    bos_rows()
    passkey_table("lampe-16k")
    scores_rows("passkey-scores-8k")
    sys.stdout.flush()
