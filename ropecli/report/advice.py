"""The report of `ropecli advise`: report.md with PNGs beside it, readable at a glance (any Markdown
viewer, GitHub, an editor's preview). Every number in it comes from advice.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table

from ropecli.evaluation.metrics import PPL, metric_record
from ropecli.evaluation.stats import fmt_diff
from ropecli.files import atomic_write_text
from ropecli.report import lengths_of, plain, plots, position_plots, result_plots
from ropecli.report.serving_plots import plot_serving
from ropecli.report.tables import serving_markdown, serving_tables
from ropecli.rope.geometry import Geometry
from ropecli.spec import make_spec


def held_out_span(result: dict) -> str:
    """Which held-out windows ranked the candidates, in words."""
    first, n = result["held_out_first_window"], result["held_out_windows"]
    if not result.get("racing"):
        return f"held-out windows {first}…{first + n - 1}"
    most = max(result["windows_per_candidate"].values())
    return f"held-out windows {first}…{first + most - 1}, raced ({n} to {most} per candidate)"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class RankingRow:
    """One candidate's line of the advise ranking, typed: what the terminal table and report.md show
    (`ranking`), read once from advice.json's row (`of`)."""
    rank: int | None  # None: out (a constraint) or diverged
    candidate: str  # e.g. yarn-tuned
    label: str  # the schedule, e.g. yarn(beta_fast=20.1, beta_slow=1.3)
    ppl: list[float]  # at each target length, on the candidate's own windows
    vs_best: dict  # the paired difference to the best (ropecli.evaluation.stats)
    passkey: float | None  # accuracy at the longest target (None: not measured)
    short_kl: float | None  # KL against the unscaled model at L (None: not measured, e.g. dropped by the race)
    short_rise: float | None  # PPL rise at L over the unscaled model, percent
    windows: int  # held-out windows it was measured on
    verdict: str  # winner, best by PPL, equivalent to the best, undecided, worse (dropped in round r), out: …
    key_ppl: list | None = None  # key-token PPL at each target length (None: no key-token rule)
    also_vs_best: dict | None = None  # its paired Δ on the metric advise does not rank by, to that metric's best

    @classmethod
    def of(cls, r: dict, result: dict) -> "RankingRow":
        key = metric_record(PPL.beside).field
        return cls(r.get("rank"), r["candidate"], r["label"], [r[PPL.field][str(n)] for n in result["lengths"]], r["vs_best"],
                   r.get("passkey_accuracy"), r.get("short_kl"), r.get("short_rise_percent"),
                   r.get("race", {}).get("windows", len(r["windows"])), verdict_note(r, result),
                   [r[key][str(n)] for n in result["lengths"]] if r.get(key) else None, r.get("also_vs_best"))


def verdict_note(r: dict, result: dict) -> str:
    """A candidate's standing in words: winner, best, equivalent, undecided, worse, dropped, out."""
    if r["excluded"]:
        return "out: " + "; ".join(r["excluded"])
    if r["candidate"] == result["winner"]:
        return "winner"
    if r.get("race", {}).get("dropped_round"):
        return f"worse: dropped in round {r['race']['dropped_round']}"
    best = f"best by {metric_record(result.get('metric') or PPL.name).column}"
    return {"best": best, "equivalent": "equivalent to the best", "undecided": "undecided",
            "worse": "worse"}.get(r.get("verdict"), r.get("verdict") or "")


def ranking(result: dict, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """The ranking table, one for the terminal and report.md: (header, rows), best rank first."""
    lengths, pk, raced = result["lengths"], result["passkey_measured"], bool(result["racing"])
    own = " (own windows)" if mixed_windows(result) else ""
    key, ranked = metric_record(PPL.beside), metric_record(result.get("metric") or PPL.name)
    keyed = any(r.get(key.field) for r in result["rows"])
    head = ["rank", "candidate", *(["schedule"] if markdown else []), *[f"{PPL.column} @ {n}{own}" for n in lengths],
            *([f"{key.column} @ {n}{own}" for n in lengths] if keyed else []),
            "Δ vs best (nats" + (f" of {ranked.measure}" if ranked is not PPL else "") + ", paired, ± 95%)",
            *([f"Δ {other_name(result)} vs its best ({result['other_metric']['best']})"] if result.get("other_metric") else []),
            *([f"passkey @ {max(lengths)}"] if pk else []),
            "KL @ L", "PPL rise @ L", *(["windows"] if raced else []), "verdict"]
    ordered = sorted(result["rows"], key=lambda r: (bool(r["excluded"]), r.get("rank", 10 ** 6)))
    rows = []
    for row in (RankingRow.of(r, result) for r in ordered):
        name = [row.candidate, f"`{row.label}`"] if markdown else [row.candidate]  # its schedule: `schedules_lines`
        keys = [_or_dash(x, "{:.4g}") for x in row.key_ppl or [None] * len(lengths)] if keyed else []
        also = [fmt_diff(row.also_vs_best) if row.also_vs_best else "—"] if result.get("other_metric") else []
        rows.append([str(row.rank or "—"), *name, *[f"{x:.4g}" for x in row.ppl], *keys, fmt_diff(row.vs_best), *also,
                     *([_or_dash(row.passkey, "{:.0%}")] if pk else []), _or_dash(row.short_kl, "{:.4f}"),
                     _or_dash(row.short_rise, "{:+.2f}%"), *([str(row.windows)] if raced else []),
                     f"**{row.verdict}**" if markdown and row.verdict == "winner" else row.verdict])
    return head, rows


def other_name(result: dict) -> str:
    return metric_record(result["other_metric"]["metric"]).column


def _or_dash(x: float | None, fmt: str) -> str:
    return "—" if x is None else fmt.format(x)


def ranking_table(result: dict) -> Table:
    """The ranking on the terminal. The candidates' names are never cut: their column is not wrapped and is as wide as
    the longest name (rich squeezes the widest column first and ellipsizes it, and a cut name names no candidate of
    the exports or of advice.json); the schedule each name stands for is said under the table (`schedules_lines`),
    in a line that wraps, so the column stays narrow."""
    t = Table(title=f"advise on {result['model']} ({lengths_of(result)}): {held_out_span(result)}, k = {result['factor']:g}")
    head, rows = ranking(result)
    for i, h in enumerate(head):
        if i == 1:
            t.add_column(h, justify="left", no_wrap=True, min_width=max(cell_len(cells[1]) for cells in rows))
        else:
            t.add_column(h, justify="left" if h == "verdict" else "right")
    for cells in rows:
        t.add_row(*cells, style="bold green" if cells[-1] == "winner" else "")
    return t


def schedules_lines(result: dict) -> list[str]:
    """'schedules: yarn-tuned = yarn(beta_fast=40, beta_slow=1); …': what each candidate the ranking table names
    runs, where that is not its name, best rank first (nothing where every name is its schedule)."""
    ordered = sorted(result["rows"], key=lambda r: (bool(r["excluded"]), r.get("rank", 10 ** 6)))
    said = [f"{r['candidate']} = {r['label']}" for r in ordered if r["label"] != r["candidate"]]
    return [f"schedules: {'; '.join(said)}"] if said else []


def advice_lines(result: dict, out_dir) -> list:
    """What `ropecli advise` prints: the winner, the ranking table and the schedules its candidates stand for, what
    the verdicts generalize to, the notes and rule, the races, the exports, the files written."""
    t = ranking_table(result)
    text = [*schedules_lines(result), inference_line(result), *[f"note: {n}" for n in result["notes"]],
            f"rule: {result['rule']}", *([result["error_budget"]["line"]] if result.get("error_budget") else [])]
    if result["race"]:
        text.append(f"race: {result['race']['outcome']}")
        if result["kl_race"]:
            text.append(f"tie-break (KL within L): {result['kl_race']['outcome']}")
    text += export_lines(result["exports"])

    served = serving_tables(result)
    text.append(f"wrote {out_dir}/advice.json and {out_dir}/report.md; {result['forward_passes']} forward passes, "
                f"{result['cache']['hits']} cached windows reused")
    return [f"[bold]winner: {escape(result['winner_label'])}[/] — {escape(result['verdict'])}", t, *served, *map(plain, text)]


def export_lines(exports: list[dict]) -> list[str]:
    """Per runtime: the export's command or why none was written, then what to type to load or serve what it wrote
    (trust_remote_code=True where the folder runs a map; vLLM's serve line); a serve line long enough to have gone to
    a script (SGLang's, longrope's factor lists inline) as where that script is, advice.json keeping it whole."""
    text = []
    for e in exports:
        text.append(f"{e['runtime']}: {'ok' if e['ok'] else 'not written'} — " + (f"{e['instead']}: " if e.get("instead") else "")
                    + (e['command'] or e['output']))
        if e["ok"] and e.get("serve"):
            serve = (f"launch line written to {e['launch_script']} ({len(e['serve'])} characters)"
                     if e.get("launch_script") else e["serve"])
            text.append(f"  {'load it' if e['runtime'] == 'transformers' else 'serve it'}: {serve}")
    return text


def mixed_windows(result: dict) -> bool:
    """Whether the candidates' PPLs come from different numbers of windows (a race's dropped ones)."""
    return len({len(r["windows"]) for r in result["rows"]}) > 1


def inference_line(result: dict) -> str:
    """What the verdicts generalize to, and the margin, in one line."""
    inf = result.get("inference") or {}
    if not inf.get("inference"):
        return ""
    docs = f" over {plural(inf['documents'], 'document')}" if inf.get("documents") else ""
    return (f"Verdicts: {inf['inference']} inference{docs}, generalizing to {inf['generalizes_to']}; equivalence "
            f"margin ±{result['margin']:g} nats of mean {metric_record(result.get('metric') or PPL.name).measure}; one-sided "
            f"level {result['test_level']:.2g} per "
            f"comparison (95% for the whole ranking). {result.get('held_out_split', '')}".rstrip() +
            (". PPL: each candidate on its own windows (the windows column); Δ: paired on the windows both share"
             if mixed_windows(result) else ""))


def race_lines(result: dict) -> list[str]:
    """The race in words: its outcome, and the tie-break's."""
    if not result.get("race"):
        return []
    out = ["## The race", "", result["race"]["outcome"] + ".", ""]
    if result.get("kl_race"):
        out += [f"Tie-break by the cost within L (KL race): {result['kl_race']['outcome']}.", ""]
    return out


def write_report(result: dict, out_dir: Path, geom, model_name: str) -> Path:
    rows = result["rows"]
    lengths = result["lengths"]
    images = []
    result_plots.plot_advice_ppl(rows, lengths, str(out_dir / "ppl_vs_length.png"),
                          f"{model_name}: PPL vs length on held-out windows (± 95% half-width across windows)",
                          winner=result["winner"])
    images.append(("Perplexity vs length", "ppl_vs_length.png"))
    measured = [r for r in rows if "short_kl" in r]  # a race measures the cost only of the candidates left
    if result["passkey_measured"]:
        result_plots.plot_passkey_heatmaps([r["passkey_result"] for r in rows if "passkey_result" in r], str(out_dir / "passkey.png"),
                                    f"{model_name}: passkey accuracy at {max(lengths)} tokens")
        images.append(("Passkey retrieval at the longest target", "passkey.png"))
    n = max(lengths)
    at_n = [position_plots.PositionCurve(r["candidate"], (r.get("position_nll") or {}).get(str(n))) for r in rows]
    if position_plots.plot_loss_by_position(at_n, n, geom.train_len, str(out_dir / "loss_by_position.png"),
                                            f"{model_name}: loss by position at {n} tokens (held-out windows)",
                                            winner=result["winner"]):
        images.append(("Loss by position at the longest target", "loss_by_position.png"))
    result_plots.plot_short_cost(measured, str(out_dir / "short_cost.png"), f"{model_name}: cost within {'Ls' if geom.shipped else 'L'} = {geom.shipped_len} (k = {geom.factor:g})")
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

    other = result.get("other_metric")
    md = [f"# ropecli advise: {model_name} at {', '.join(map(str, lengths))} tokens", "",
          *([f"**The metrics disagree.** {other['line']}.", ""] if other and other["disagree"] else []),
          f"**Winner: `{result['winner_label']}`** ({result['winner']}). {result['verdict']}.", "",
          f"Model {model_name}: d = {result['rotary_dim']}, base {result['base']:g}, L = {result['train_len']}, "
          f"k = {result['factor']:g}. Data: {result['data']}. Searched on windows 0…{result['searched_windows'] - 1}; "
          f"ranked on {held_out_span(result)}. "
          f"{result['forward_passes']} forward passes ({result['cache']['hits']} windows from the cache).", "",
          "## The rule", "", result["rule"] + ".", "",
          *([result["error_budget"]["line"][0].upper() + result["error_budget"]["line"][1:] + ".", ""]
            if result.get("error_budget") else []),
          *race_lines(result), "## Ranking (held-out windows)", ""]
    head, table = ranking(result, markdown=True)
    md += [inference_line(result), "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    md += ["| " + " | ".join(cells) + " |" for cells in table]
    md += [""] + [f"Note: {n}" for n in result["notes"]] + [""]
    if result.get("serving"):
        md += serving_markdown(result["serving"])
        plot_serving(result["serving"], geom.train_len, str(out_dir / "serving.png"), f"{model_name}: loss by request length")
        images.append(("Loss by request length, per runtime", "serving.png"))
    md += ["## Deploy", ""]
    for e in result["exports"]:
        md.append(f"- **{e['runtime']}**: " + (f"{e['instead']}: " if e.get("instead") else "") +
                  (f"`{e['command']}`" if e["command"] else "") +
                  ("" if e["ok"] else f" — {e['output']}"))
        if e["ok"] and e["output"]:
            md += ["", "```text", e["output"], "```", ""]
    md += ["", "## Reproduce", "", "```bash", *result["commands"], "```", "", "## Pictures", ""]
    for title, fname in images:
        md += [f"### {title}", "", f"![{title}]({fname})", ""]
    path = out_dir / "report.md"
    atomic_write_text(path, "\n".join(md) + "\n")
    return path
