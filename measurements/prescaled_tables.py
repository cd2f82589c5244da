"""docs/measurements/prescaled.md's tables of the pre-scaled built-in model (`--model builtin-llama3`), rendered from ropecli's own
JSON in measurements/prescaled/ (made by measurements/prescaled.sh; tests/test_prescaled_tables.py checks the page).

    python measurements/prescaled_tables.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent / "prescaled"


def load(name: str) -> dict:
    return json.loads((HERE / f"{name}.json").read_text())


def verdict(r: dict, key: str = "vs_best") -> str:
    p = r.get(key) or {}
    if p.get("verdict") == "best":
        return "**best**"
    return f"{p.get('diff', 0):+.4f} ± {p.get('half_width') or 0:.3f}, {p.get('verdict')}"


def compare_rows(name: str) -> None:
    """| length | schedule | PPL | Δ vs best (nats, paired ± 95 %) | key PPL | key Δ |"""
    print("| length | schedule | PPL | Δ vs best (nats, paired ± 95 %) | key PPL | key-PPL Δ vs best |")
    print("|---|---|---|---|---|---|")
    for r in load(name)["results"]:
        if r["metric"] == "ppl":
            print(f"| {r['len']} | {r['label']} | {r['ppl']:.2f} ± {r['ppl_err']:.2f} | {verdict(r)} | "
                  f"{r['key_ppl']:.2f} | {verdict(r, 'key_vs_best')} |")


def advise_rows() -> None:
    """advise at 2 x Ls: rank, candidate, PPL, Δ, verdict; then the families line."""
    out = load("advise")
    print("| rank | candidate | mean log-PPL | Δ vs best (nats, paired ± 95 %) | windows | verdict |")
    print("|---|---|---|---|---|---|")
    for r in sorted(out["rows"], key=lambda r: r.get("rank", 99)):
        p = r["vs_best"]
        delta = "best" if r["verdict"] == "best" else f"{p.get('diff') or 0:+.4f} ± {p.get('half_width') or 0:.3f}"
        print(f"| {r.get('rank', '—')} | {r['candidate']}: {r['label']} | {r['objective']:.4f} | {delta} | "
              f"{len(r['windows'])} | {r['verdict']} |")
    print()
    print(f"winner: {out['winner_label']}; {out['families']['line']}")


if __name__ == "__main__":
    for title, render in (("within Ls", lambda: compare_rows("within-Ls")), ("at 2 x Ls", lambda: compare_rows("at-2Ls")),
                          ("advise at 2 x Ls", advise_rows)):
        print(f"### {title}\n")
        render()
        print()
