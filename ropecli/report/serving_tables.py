"""The workload tables of `compare --workload` (`ropecli.tuning.serving`): one per runtime, each candidate
and export variant with what the runtime applies, PPL at each request length, the expected loss over the
mix, and its paired difference to the best with the verdict (95% for the table)."""

from __future__ import annotations

import math

from ropecli.evaluation.metrics import PPL
from ropecli.evaluation.stats import fmt_diff
from ropecli.report.text import plain, table



def within_cell(r: dict) -> str:
    """'+3.1% ± 0.9 (33.2)': PPL at Ls as the runtime serves the export, against the model as shipped."""
    w = r.get("within_L")
    if not w:
        return "—"
    d = w["vs_native"]
    hw = f" ± {d['half_width']:.2g}" if d.get("half_width") is not None else ""
    return f"{w['rise_percent']:+.1f}% (Δ {d['diff']:+.3f}{hw})"


def decode_cell(r: dict) -> str:
    """'+0.53 ± 0.2 damaged' / '0 (one schedule)' / '—' (not measured): the decode-across-L damage of a row."""
    d = r.get("decode")
    if not d or not d.get("damage"):
        return "—"
    if d.get("one_schedule"):
        return f"{d['damage']['diff']:+.1e} (one schedule)"
    dmg = d["damage"]
    hw = f" ± {dmg['half_width']:.2g}" if dmg.get("half_width") is not None else ""
    word = {"worse": "damaged", "equivalent": "safe"}.get(dmg.get("verdict"), "undecided")
    return f"{dmg['diff']:+.3f}{hw} {word}"


def serving_tables(out: dict) -> list:
    """Nothing without a workload; else a line on the workload, then a table and a verdict line per runtime."""
    serving = out.get("serving")
    if not serving:
        return []
    shares = serving["workload"]["shares"]
    lengths = list(shares)
    mix = ", ".join(f"{n}: {w:.0%}" for n, w in shares.items())
    tokens = ", ".join(f"{n}: {w:.0%}" for n, w in serving["workload"].get("token_shares", shares).items())
    lines = [plain(f"workload: {mix} of requests ({serving['workload']['source']}), {tokens} of served tokens; schedules "
                   f"exported for k = {serving['factor']:g}; expected loss = Σ token share × mean NLL per token at each "
                   "request length (nats per served token), paired over the same windows")]
    across = serving.get("decode")
    within = next((r["within_L"]["len"] for b in serving["runtimes"].values() for r in b["rows"] if r.get("within_L")), None)
    if within:
        lines.append(plain(f"within Ls = {within}: PPL of what each runtime serves at {within} tokens against the model as "
                           "shipped (the cost of the export where the model already worked), paired"))
    if across:
        lines.append(plain(f"decode across L: a {across['prompt_len']}-token prompt (shorter than the switch at "
                           f"{across['switch']}) decoded through the KV cache to {across['total_len']} tokens as each runtime "
                           "runs it, against one forward pass of the same tokens: Δ nats/token (paired, ± 95%)"))
    for runtime, block in serving["runtimes"].items():
        t = table(f"served by {runtime}", ["candidate", "export", *[f"PPL @ {n}" for n in lengths],
                                           "expected NLL", "Δ vs best (paired, ± 95%)", *(["decode across L"] if across else []),
                                           *([f"PPL @ {within} vs native"] if within else []), "applies"],
                  left=("candidate", "export", "applies"))
        for r in sorted(block["rows"], key=lambda r: r.get("expected_nll", math.inf)):
            applies = " / ".join(dict.fromkeys(v.split(" (")[0] for v in r["served"].values()))
            if "unservable" in r:
                t.add_row(r["candidate"], r["variant"], *["—"] * len(lengths), "—", "cannot be served",
                          *(["—"] if across else []), *(["—"] if within else []), r["unservable"])
                continue
            best = r["vs_best"].get("best")
            mark = "" if best else " ≈" if r["vs_best"].get("tied") else " ?" if r["vs_best"].get("verdict") == "undecided" else ""
            t.add_row(r["candidate"], r["variant"], *[f"{r[PPL.field][n]:.4g}" for n in lengths], f"{r['expected_nll']:.4f}",
                      fmt_diff(r["vs_best"]) + mark, *([decode_cell(r)] if across else []),
                      *([within_cell(r)] if within else []), applies,
                      style="bold green" if best else "")
        lines += [t, plain(verdict_line(runtime, block))]
    return lines


def verdict_line(runtime: str, block: dict) -> str:
    """'transformers: best yarn (--consistent); shown equivalent: …; undecided: …'."""
    rows = [r for r in block["rows"] if "vs_best" in r]
    if not block.get("best"):
        return f"{runtime}: no candidate can be served"
    name = lambda r: f"{r['candidate']} ({r['variant']})"  # noqa: E731
    best = next(r for r in rows if r["vs_best"].get("best"))
    equivalent = [name(r) for r in rows if r is not best and r["vs_best"].get("tied")]
    undecided = [name(r) for r in rows if r["vs_best"].get("verdict") == "undecided"]
    parts = [f"{runtime}: best {name(best)}"]
    parts += [f"shown equivalent: {', '.join(equivalent)}"] if equivalent else []
    parts += [f"undecided: {', '.join(undecided)}"] if undecided else []
    damaged = [name(r) for r in rows if r.get("decode") and not r.get("generation_safe")]
    parts += [f"not generation-safe (decode across L not shown harmless): {', '.join(damaged)}"] if damaged else []
    return "; ".join(parts) + (" (the rest shown worse)" if len(rows) > 1 + len(equivalent) + len(undecided) else "")


def serving_markdown(serving: dict) -> list[str]:
    """report.md's section: the workload, then per runtime a table and its verdict line."""
    shares = serving["workload"]["shares"]
    lengths = list(shares)
    md = ["## Served over your workload", "",
          f"Requests: {', '.join(f'{n} tokens {w:.0%}' for n, w in shares.items())} ({serving['workload']['source']}); "
          f"of served tokens: {', '.join(f'{n} tokens {w:.0%}' for n, w in serving['workload'].get('token_shares', shares).items())}. "
          f"Each candidate as each runtime serves it (exported for k = {serving['factor']:g}); expected loss = Σ token share × "
          "mean NLL per token at each length (nats per served token), paired over the same held-out windows (the race's first round). Deploy "
          "exports, per runtime, its best here where the tournament's winner is shown worse than it, else the winner in "
          "its better export.", ""]
    for runtime, block in serving["runtimes"].items():
        md += [f"### {runtime}", "",
               "| candidate | export | " + " | ".join(f"PPL @ {n}" for n in lengths) + " | expected NLL | Δ vs best (paired, ± 95%) "
               "| decode across L | PPL @ Ls vs native |", "|" + "---|" * (len(lengths) + 6)]
        for r in sorted(block["rows"], key=lambda r: r.get("expected_nll", math.inf)):
            if "unservable" in r:
                md.append(f"| {r['name']} | {r['variant']} | " + " | ".join("—" for _ in lengths) +
                          f" | — | cannot be served: {r['unservable']} | — | — |")
                continue
            md.append(f"| {r['name']} | {r['variant']} | " + " | ".join(f"{r[PPL.field][n]:.4g}" for n in lengths) +
                      f" | {r['expected_nll']:.4f} | {fmt_diff(r['vs_best'])} | {decode_cell(r)} | {within_cell(r)} |")
        md += ["", verdict_line(runtime, block) + ".", ""]
    return md
