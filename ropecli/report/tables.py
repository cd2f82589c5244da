"""The terminal tables of the evaluating commands (`ppl`, `compare`, `passkey`, `kl`), from their JSON
rows: each function returns what to print, rich Tables and lines (`ropecli.cli.console.show` prints
them). Cells judged against the best of their column: bold = best, ≈ = shown equivalent, ? = undecided."""

from __future__ import annotations

from typing import Callable, NamedTuple

from ropecli.evaluation.inference import MARGIN
from ropecli.evaluation.effective_length import effective_line
from ropecli.evaluation.metrics import KEY_PPL, Metric, is_task, metric_record, prompted
from ropecli.evaluation.stats import fmt_diff, tie_answer
from ropecli.report.text import lengths_of, plain, table
from ropecli.evaluation.results import KeyPplResult, PplResult
from ropecli.report.serving_tables import serving_tables


def key_note(results: list[dict]) -> list:
    """The line that says what key PPL is, once per table (nothing when no result has it)."""
    key = KEY_PPL.field
    rule = next((r["key_rule"] for r in results if r.get(key) is not None), None)
    stale = sum(1 for r in results if r.get("key_rule") and r.get(key) is None and metric_record(r["metric"]).beside)
    if stale:
        return [plain(f"key PPL: not shown for {stale} result(s) whose cached windows predate the per-prediction NLL "
                      "it needs; --keep-token-losses computes those windows again")]
    if rule is None:
        return []
    counts = sorted({r["key_tokens"] for r in results if r.get("key_tokens") is not None})
    many = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return [plain(f"key PPL: PPL over the key predictions only ({many} per cell; rule: {rule}): the tokens that need "
                  "the long context, the same for every method, paired over the windows that have them.")]


def mark(p: dict) -> str:
    """' ≈' shown equivalent to the best, ' ?' undecided, '' otherwise (a row's `vs_best`)."""
    if p.get("best"):
        return ""
    return " ≈" if p["tied"] else " ?" if p.get("verdict") == "undecided" else ""


def ppl_table(results: list[dict], title: str) -> list:
    t = table(title, ["method", "len", "k", "PPL", "NLL/token", "tokens", "key PPL", "key tokens", "cached"])
    for r in results:
        t.add_row(r["label"], str(r["len"]), f"{r['factor']:g}", PplResult.cell(r), f"{r['nll']:.4f}", str(r["tokens"]),
                  KeyPplResult.cell(r), "—" if r.get("key_tokens") is None else str(r["key_tokens"]), "yes" if r.get("cached") else "")
    return [t, *key_note(results)]


def _cell(r: dict, text: str, against: str = "vs_best") -> str:
    if against not in r:
        return text
    return f"[bold green]{text}[/]" if r[against]["best"] else text + mark(r[against])


def cell_text(r: dict) -> str:
    """A result row's compare cell: its metric's result type's `cell(row)`."""
    return metric_record(r["metric"]).result().cell(r)


def _count(results: list[dict], fields: tuple) -> str:
    """How many units the cells of `fields` hold: "4", or "4–16 (raced)", or "" where no cell has them."""
    counts = sorted({len(r[f]) for r in results if "task" not in r for f in fields if r.get(f)})
    return "" if not counts else f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} (raced)"


class Column(NamedTuple):
    """A compare column: `metric`'s cells at length n, read from the rows of `rows_of` (a metric shown beside another
    reads that one's rows), each judged by the row's `against` verdict; `cell` None: the metric's own cell."""
    metric: Metric
    n: int | None
    title: str
    rows_of: str
    against: str = "vs_best"
    cell: Callable[[dict], str] | None = None


def compare_columns(results: list[dict], lengths: list[int], L: int, kl_k: float) -> list[Column]:
    """The columns of compare's table, from the metrics' records: the window metrics length by length, each with the
    metric it shows beside it (key PPL from PPL's windows, where every row at that length has it); then the prompted
    metrics (passkey, each task) and any other metric on windows, metric by metric; then those run at L (KL, with its
    companion column)."""
    records = [metric_record(m) for m in dict.fromkeys(r["metric"] for r in results)]
    have = {m.name for m in records}
    shown_beside = {m.beside for m in records if m.beside}
    columns = []
    for n in lengths:
        for m in (m for m in records if m.prefixes and not prompted(m.name) and not m.at_train_len):
            rows = [r for r in results if r["metric"] == m.name and r["len"] == n]
            if m.name in shown_beside and any(metric_record(o).beside == m.name and o in have and all(
                    r.get(m.field) is not None for r in results if r["metric"] == o and r["len"] == n) for o in have):
                continue  # shown beside the metric whose rows carry it
            columns.append(Column(m, n, f"{m.column} {n}" + (" (train)" if n == L else ""), m.name))
            b = metric_record(m.beside) if m.beside else None
            if b and rows and all(r.get(b.field) is not None for r in rows):
                columns.append(Column(b, n, f"{b.column} {n}", m.name, b.verdict_beside, b.result().cell))
    later = [m for m in records if prompted(m.name)] + [m for m in records if not prompted(m.name) and not m.prefixes
                                                        and not m.at_train_len]
    columns += [Column(m, n, f"{m.column} {n}", m.name) for m in later for n in lengths]
    for m in (m for m in records if m.at_train_len):  # at L, for the target's k
        columns.append(Column(m, L, f"{m.column} @ L (k={kl_k:g})", m.name))
        columns += [Column(m, L, m.companion[0], m.name, "", m.companion[1])] if m.companion else []
    return columns


def compare_table(out: dict, labels: list[str], lengths: list[int]) -> list:
    """`ropecli compare`: methods x (PPL / passkey at each length, KL and top-1 at L), then one line per column;
    with --workload, the tables per runtime (`ropecli.report.serving_tables`)."""
    results, L, kl_k = out["results"], out["train_len"], out["kl_factor"]
    by = {(r["metric"], r["label"], r["len"]): r for r in results}
    counts = [(_count(results, fields), what) for fields, what in
              ((("window_nll", "window_kl"), "windows"), (("prompt_answer_nll",), "passkey prompts"))]
    per_cell = "; ".join(f"{n} {what} per cell" for n, what in counts if n)
    columns = compare_columns(results, lengths, L, kl_k)
    records = {c.metric.name: c.metric for c in columns}
    tasks = [m for m in records if is_task(m)]
    effective = out.get("effective_length")
    per_cell = f"{per_cell}; " if per_cell else ""
    t = table(f"{out['model']} ({lengths_of(out)}); {per_cell}± = 95% half-width across windows; bold = "
              "best, ≈ = shown equivalent to it, ? = undecided (paired, 95% for the whole column)",
              ["method", *[c.title for c in columns], *(["eff. length (shown)"] if effective else [])])
    for label in labels:
        cells = []
        for c in columns:
            r = by[(c.rows_of, label, c.n)]
            text = c.cell(r) if c.cell else cell_text(r)
            cells.append(_cell(r, text, c.against) if c.against else text)
        if effective:  # the candidate's effective length: point estimate (shown at 95 %)
            e = effective["candidates"].get(label, {})
            cells.append(f"{e.get('point') or '-'} ({e.get('shown') or '-'})")
        t.add_row(label, *cells)
    lines = [t, *key_note(results)] + [plain(m.note) for m in records.values() if m.note]
    if tasks:
        some = next(r for r in results if "task" in r)
        lines.append(plain(f"tasks (RULER's, on this text; {some['samples']} prompts per cell): the answer's NLL in nats, "
                           "-log p(answer | prompt, answer prefix), mean over prompts, lower is better; (+g) its gain over "
                           "the same prompt without the needle; with --generate, RULER's string-match score; bold/≈ rank "
                           "by the answer NLL (paired over the same prompts)."))
    races = [plain(f"race ({m}): {rec['outcome']}") for m, rec in out.get("races", {}).items()]
    races += [plain(effective_line(effective))] if effective else []
    races += [plain(agreement_line(a)) for a in out.get("agreement", [])]
    return lines + [plain(line) for line in tie_lines(results)] + races + serving_tables(out)


def agreement_line(a: dict) -> str:
    """A task's ranking against PPL's (or key PPL's) at one length: Spearman's rho and its 95 % interval."""
    what = metric_record(a["vs"]).column
    if a["rho"] is None:
        return f"{a['task']} vs {what} @ {a['len']}: no rank correlation ({a['why']})"
    if a["low"] is None:
        return f"{a['task']} vs {what} @ {a['len']}: Spearman's rho {a['rho']:+.2f} ({a['why']})"
    return (f"{a['task']} vs {what} @ {a['len']}: Spearman's rho {a['rho']:+.2f} (95% simultaneous interval "
            f"{a['low']:+.2f} to {a['high']:+.2f}: the rankings allowed by {a['ordered_a']} and {a['ordered_b']} "
            f"of {a['pairs']} pairs ordered; {a['schedules']} schedules)")


def tie_lines(results: list[dict]) -> list[str]:
    """One line per column: the best, the candidates shown equivalent to it, the undecided ones and what
    would decide each, and what the verdicts generalize to."""
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        m = metric_record(r["metric"])
        groups.setdefault((m, r["len"], "vs_best"), []).append(r)
        b = metric_record(m.beside) if m.beside else None
        if b and b.verdict_beside in r:  # the metric shown beside it, ranked on the same rows
            groups.setdefault((b, r["len"], b.verdict_beside), []).append(r)
    lines = []
    for (m, n, against), rows in groups.items():
        if len(rows) < 2:
            continue
        best = next(r for r in rows if r[against]["best"])
        others = [r for r in rows if not r[against]["best"]]
        equivalent = [r["label"] for r in others if r[against]["tied"]]
        undecided = [r for r in others if r[against].get("verdict") == "undecided"]
        what = f"{m.words} @ L={n}" if m.at_train_len else f"{m.words} @ {n}"
        unit = m.unit_word
        parts = [f"equivalent within ±{others[0][against]['margin']:g}: {', '.join(equivalent)}"] if equivalent else []
        if undecided:
            parts.append("undecided: " + "; ".join(f"{r['label']} ({tie_answer(r[against], unit)})" for r in undecided))
        p = others[0][against]
        scope = f" [{p['inference']} inference: generalizes to {p['generalizes_to']}]" if p.get("generalizes_to") else ""
        lines.append(f"{what}: best {best['label']}; {'; '.join(parts or ['every other candidate is shown worse'])} "
                     f"(paired, 95% for the column){scope}")
    return lines


def passkey_table(out: dict) -> list:
    """`ropecli passkey`: accuracy per depth, overall, the answer NLL and its paired Δ to the best."""
    depths, results = out["depths"], out["results"]
    t = table(f"Passkey accuracy on {out['model']} ({lengths_of(out)}): {out.get('prompts', out['samples'])} key(s) of "
              f"{out['digits']} digits per depth; depth 0 = key farthest from the question",
              ["method", "len", "k", *[f"depth {d:g}" for d in depths], "all", "answer NLL", "Δ NLL vs best (paired)"])
    for r in sorted(results, key=lambda r: (r["len"], r["label"])):
        t.add_row(r["label"], str(r["len"]), f"{r['factor']:g}", *[f"{d['accuracy']:.0%}" for d in r["by_depth"]],
                  f"[bold]{r['accuracy']:.0%}[/]", "inf" if r["answer_nll"] is None else f"{r['answer_nll']:.3f}",
                  fmt_diff(r["vs_best"]) + mark(r["vs_best"]))
    return [t, plain("Δ NLL: answer NLL minus the best method's at that length, over the same prompts, ± the 95% half-width; "
               f"≈ = shown equivalent to the best within ±{MARGIN:g} nats, ? = undecided (paired, 95% for the column).")]


def kl_table(out: dict) -> list:
    """`ropecli kl`: mean, p99 and max KL against the unscaled model, top-1 agreement, paired Δ to the lowest."""
    t = table(f"KL({'native' if out.get('shipped') else 'unscaled'} || scaled) per token on {out['model']} ({lengths_of(out)}), schedules for "
              f"k = {out['factor']:g}; {out['samples']} windows",
              ["method", "len", "mean KL", "p99 KL", "max KL", "top-1 agree", "Δ vs best (paired)"])
    for r in sorted(out["results"], key=lambda r: (r["len"], r["kl_mean"])):
        t.add_row(r["label"], str(r["len"]), f"{r['kl_mean']:.5f}", f"{r['kl_p99']:.4f}", f"{r['kl_max']:.3f}",
                  f"{r['top1_agreement']:.2f}%", fmt_diff(r["vs_best"]) + mark(r["vs_best"]))
    return [t, plain("nats per token; Δ: mean KL minus the lowest one over the same windows, ± the 95% half-width; "
               f"≈ = shown equivalent to the lowest within ±{MARGIN:g} nats, ? = undecided (paired, 95% for the column).")]


def verify_table(verdict, exp, target) -> list:
    """`ropecli verify`: each check (expected, found, ok), the notes, the verdict line."""
    from rich.markup import escape

    t = table(f"verify {target} for {verdict.runtime} against {exp.source}", ["layer type", "check", "expected", "found", "ok"],
              left=("layer type", "check", "expected", "found", "ok"))
    t.title_justify = "left"
    for c in verdict.checks:
        t.add_row(c.layer_type or "", escape(c.what), escape(c.expected), escape(c.found), "[green]yes[/]" if c.ok else "[red]NO[/]")
    return [t, *map(plain, verdict.notes), plain(verdict.line())]


def export_lines(result: dict, consistent: bool) -> list[str]:
    """What `ropecli export` prints: what it wrote, and what each runtime does with it."""
    if result.get("native") or not result.get("runtimes"):  # as shipped, or a map in a runtime's own config: its lines
        return [plain(line) for line in result["lines"]]
    lines = [*result["lines"], "What each runtime does with it:", *[f"  {n}: {what}" for n, what in result["runtimes"].items()]]
    if consistent:
        lines.append("  (consistent: short_factor = long_factor, so every runtime applies the schedule at every length and "
                     "generation through a KV cache is safe; --switching keeps transformers' short/long switch)")
    return [plain(line) for line in lines]
