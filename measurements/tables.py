"""Markdown tables of docs/real-model.md from ropecli's own JSON in measurements/smollm2/ (nothing typed by hand).

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


def vs_best(v: dict) -> str:
    if v.get("best"):
        return "best"
    if v.get("diff") is None or v.get("half_width") is None:
        return "—"
    verdict = "tied (within noise)" if not v["distinguishable"] else "worse"
    return f"+{v['diff']:.4f} ± {v['half_width']:.3g}: {verdict}"


def ppl_table(name: str) -> None:
    d = load(name)
    if d is None:
        return
    print(f"{name}: {d['model']} ({d.get('runtime', 'transformers')}, {d['dtype']}), {d['samples']} windows of {d['results'][0]['len']} tokens, "
          f"{d['forward_passes']} forward passes, cache hits {d['cache']['hits']}\n")
    header("method", "k", "PPL ± se", "Δ mean log-PPL vs best (paired 95 %)")
    for r in sorted(d["results"], key=lambda r: r["ppl"] if r["ppl"] is not None else math.inf):
        print(f"| {r['label']} | {r['factor']:g} | {r['ppl']:.3f} ± {r['ppl_err'] or 0:.2g} | {vs_best(r['vs_best'])} |")
    print()


def kl_table(name: str) -> None:
    d = load(name)
    if d is None:
        return
    r0 = d["results"][0]
    print(f"{name}: KL(unscaled ‖ scaled) within L, {d['samples']} windows of {r0['len']} tokens at k = {r0['factor']:g}\n")
    header("method", "mean KL (nats/token)", "p99", "top-1 agreement", "vs best (paired 95 %)")
    for r in sorted(d["results"], key=lambda r: r["kl_mean"]):
        print(f"| {r['label']} | {r['kl_mean']:.5f} | {r['kl_p99']:.4f} | {r['top1_agreement']:.2f} % | {vs_best(r['vs_best'])} |")
    print()


def passkey_table(name: str) -> None:
    d = load(name)
    if d is None:
        return
    r0 = d["results"][0]
    depths = [b["depth"] for b in r0["by_depth"]]
    print(f"{name}: passkey at {r0['len']} tokens, {r0['by_depth'][0]['samples']} prompts per depth, {r0['digits']} digits\n")
    header("method", "accuracy", *(f"depth {x:g}" for x in depths), "answer NLL (nats)", "vs best (paired 95 %)")
    for r in d["results"]:
        cells = " | ".join(f"{b['accuracy']:.0%}" for b in r["by_depth"])
        best = vs_best(r["vs_best"]) if "vs_best" in r else "—"
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
        header("schedule", "role", "PPL ± se", "Δ mean log-PPL vs the searched winner (paired 95 %)")
        for r in sorted(held["rows"], key=lambda r: r["objective"]):
            ppl = " / ".join(f"{v:.3f} ± {r['ppl_err'][k] or 0:.2g}" for k, v in r["ppl"].items())
            v = r["vs_winner"]
            if r["role"] == "winner":
                cell = "—"
            elif v.get("half_width") is None:
                cell = f"{v['diff']:+.4f}"
            else:
                cell = f"{v['diff']:+.4f} ± {v['half_width']:.3g}: " + ("tied (within noise)" if not v["distinguishable"]
                                                                      else "worse" if v["diff"] > 0 else "better")
            print(f"| {r['label']} | {r['role']} | {ppl} | {cell} |")
        w = held["winner_vs_best_standard"]
        if w.get("half_width") is None:
            print(f"\nwinner − {held['best_standard']}: {w['diff']}\n")
            continue
        word = ("not distinguishable" if not w["distinguishable"] else
                "the searched winner is better" if w["diff"] < 0 else f"{held['best_standard']} is better")
        print(f"\nwinner − best deployed ({held['best_standard']}): {w['diff']:+.4f} ± {w['half_width']:.3g} nats "
              f"(paired 95 % interval, {w['n']} windows): {word}\n")


if __name__ == "__main__":
    for name in ("compare-16k", "llamacpp-16k"):
        ppl_table(name)
    kl_table("kl-4k")
    kl_table("kl-4k-searched")
    for name in ("passkey-8k", "passkey-16k"):
        passkey_table(name)
    verify_rows()
    search_rows()
    sys.stdout.flush()
