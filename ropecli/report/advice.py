"""The report of `ropecli advise`: report.md with PNGs beside it, readable at a glance (any Markdown
viewer, GitHub, an editor's preview). Every number in it comes from advice.json."""

from __future__ import annotations

from pathlib import Path

from ropecli.files import atomic_write_text


def held_out_span(result: dict) -> str:
    """Which held-out windows ranked the candidates, in words."""
    first, n = result["held_out_first_window"], result["held_out_windows"]
    if not result.get("racing"):
        return f"held-out windows {first}…{first + n - 1}"
    most = max(result["windows_per_candidate"].values())
    return f"held-out windows {first}…{first + most - 1}, raced ({n} to {most} per candidate)"


def race_lines(result: dict) -> list[str]:
    """The race in words: its outcome, and the tie-break's."""
    if not result.get("race"):
        return []
    out = ["## The race", "", result["race"]["outcome"] + ".", ""]
    if result.get("kl_race"):
        out += [f"Tie-break by the cost within L (KL race): {result['kl_race']['outcome']}.", ""]
    return out


def write_report(result: dict, out_dir: Path, geom, model_name: str) -> Path:
    from ropecli.report import plots, result_plots
    from ropecli.rope.geometry import Geometry
    from ropecli.rope.spec import make_spec

    rows = result["rows"]
    lengths = result["lengths"]
    images = []
    result_plots.plot_advice_ppl(rows, lengths, str(out_dir / "ppl_vs_length.png"),
                          f"{model_name}: PPL vs length on held-out windows (± std. error across windows)",
                          winner=result["winner"])
    images.append(("Perplexity vs length", "ppl_vs_length.png"))
    measured = [r for r in rows if "short_kl" in r]  # a race measures the cost only of the candidates left
    if result["passkey_measured"]:
        result_plots.plot_passkey_heatmaps([r["passkey_result"] for r in rows if "passkey_result" in r], str(out_dir / "passkey.png"),
                                    f"{model_name}: passkey accuracy at {max(lengths)} tokens")
        images.append(("Passkey retrieval at the longest target", "passkey.png"))
    result_plots.plot_short_cost(measured, str(out_dir / "short_cost.png"), f"{model_name}: cost within L = {geom.train_len} (k = {geom.factor:g})")
    images.append(("Short-context cost", "short_cost.png"))
    g = Geometry(geom.rotary_dim, geom.base, geom.train_len, result["factor"])
    scheds = [(r["candidate"], make_spec(r["method"], r["params"], log_n=r["log_n"]).schedule(g, max(lengths)),
               r["candidate"] == result["winner"]) for r in rows]  # dynamic NTK drawn at the longest target
    plots.plot_candidate_factors(g, scheds, str(out_dir / "factors.png"))
    images.append(("Λ_m of the winner beside the others", "factors.png"))
    for name, search in result["searches"].items():
        fname = f"search_{name.replace('+', '_')}.png"
        result_plots.plot_param_search(search, str(out_dir / fname), f"{name}: search on windows 0…{result['searched_windows'] - 1}")
        images.append((f"Search of {name}", fname))

    md = [f"# ropecli advise: {model_name} at {', '.join(map(str, lengths))} tokens", "",
          f"**Winner: `{result['winner_label']}`** ({result['winner']}). {result['verdict']}.", "",
          f"Model {model_name}: d = {result['rotary_dim']}, base {result['base']:g}, L = {result['train_len']}, "
          f"k = {result['factor']:g}. Data: {result['data']}. Searched on windows 0…{result['searched_windows'] - 1}; "
          f"ranked on {held_out_span(result)}. "
          f"{result['forward_passes']} forward passes ({result['cache']['hits']} windows from the cache).", "",
          "## The rule", "", result["rule"] + ".", "", *race_lines(result), "## Ranking (held-out windows)", ""]
    head = ["rank", "candidate", "schedule", *[f"PPL @ {n}" for n in lengths], "Δ vs best (nats, paired)",
            *([f"passkey @ {max(lengths)}"] if result["passkey_measured"] else []), "KL @ L", "PPL rise @ L",
            *(["windows"] if result["racing"] else []), "note"]
    md += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    best_obj = min(r["objective"] for r in rows if r["tied"])
    for r in sorted(rows, key=lambda r: (bool(r["excluded"]), r.get("rank", 10 ** 6))):
        d = r["vs_best"]
        diff = "best" if r["objective"] == best_obj else (
            f"{d['diff']:+.4f} ± {d['se']:.2g}" if d.get("se") is not None else f"{d['diff']:+.4f}")
        note = "**winner**" if r["candidate"] == result["winner"] else ("tied with the best" if r["tied"] else "")
        if r.get("race", {}).get("dropped_round"):
            note = f"dropped in round {r['race']['dropped_round']}"
        if r["excluded"]:
            note = "out: " + "; ".join(r["excluded"])
        cells = [str(r.get("rank", "—")), r["candidate"], f"`{r['label']}`",
                 *[f"{r['ppl'][str(n)]:.4g} ± {r['ppl_err'][str(n)]:.2g}" if r["ppl_err"][str(n)] else f"{r['ppl'][str(n)]:.4g}"
                   for n in lengths], diff,
                 *([f"{r['passkey_accuracy']:.0%}" if "passkey_accuracy" in r else "—"] if result["passkey_measured"] else []),
                 f"{r['short_kl']:.4f}" if "short_kl" in r else "—",
                 f"{r['short_rise_percent']:+.2f}%" if "short_rise_percent" in r else "—",
                 *([str(r["race"]["windows"])] if result["racing"] else []), note]
        md.append("| " + " | ".join(cells) + " |")
    md += [""] + [f"Note: {n}" for n in result["notes"]] + ["", "## Deploy", ""]
    for e in result["exports"]:
        md.append(f"- **{e['runtime']}**: " + (f"`{e['command']}`" if e["command"] else "") +
                  ("" if e["ok"] else f" — {e['output']}"))
        if e["ok"] and e["output"]:
            md += ["", "```text", e["output"], "```", ""]
    md += ["", "## Reproduce", "", "```bash", *result["commands"], "```", "", "## Pictures", ""]
    for title, fname in images:
        md += [f"### {title}", "", f"![{title}]({fname})", ""]
    path = out_dir / "report.md"
    atomic_write_text(path, "\n".join(md) + "\n")
    return path
