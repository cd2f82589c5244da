"""The terminal tables of the evaluating commands (`ppl`, `compare`, `passkey`, `kl`, RULER's tasks, a workload served
per runtime), from their typed rows (`ropecli.evaluation.compared.Row`: a result and its verdicts): each function
returns what to print, rich Tables and lines (`ropecli.cli.console.show` prints them). Cells judged against the best of
their column: bold = best, ≈ = shown equivalent, ? = undecided. The pieces every table is made of are the package's own
(`ropecli.report`: `table`, `plain`, `lengths_of`)."""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

from rich.markup import escape

from ropecli.evaluation.bos_policy import describe_bos
from ropecli.evaluation.chat_template import describe_frame
from ropecli.evaluation.compared import Row, Verdict
from ropecli.evaluation.effective_length import effective_line
from ropecli.evaluation.inference import MARGIN, POWER
from ropecli.evaluation.metrics import PASSKEY_TEXT, PPL, Metric, metric_record
from ropecli.evaluation.passkey import KEY_RANGE
from ropecli.evaluation.results import EvalResult, PasskeyResult, PplResult
from ropecli.evaluation.stats import fmt_diff
from ropecli.evaluation.task_results import TaskResult
from ropecli.report import lengths_of, plain, table


def key_note(results: list[EvalResult]) -> list:
    """The line that says what key PPL is, once per table (nothing when no result has it)."""
    ppl = [r for r in results if isinstance(r, PplResult)]
    rule = next((r.key_rule for r in ppl if r.key_ppl is not None), None)
    stale = sum(1 for r in ppl if r.key_rule and r.key_tokens is None and r.keys_beside)  # no per-prediction NLL
    none_found = sum(1 for r in ppl if r.key_rule and r.key_tokens == 0 and r.keys_beside)
    if stale:
        return [plain(f"key PPL: not shown for {stale} result(s) whose cached windows predate the per-prediction NLL "
                      "it needs; --keep-token-losses computes those windows again")]
    if none_found and rule is None:
        rule = next(r.key_rule for r in ppl if r.key_tokens == 0)
        return [plain(f"key PPL: not shown: the rule ({rule}) found no key prediction in these windows (the tokens "
                      "that need the long context; more or longer windows may hold some)")]
    if rule is None:
        return []
    counts = sorted({r.key_tokens for r in ppl if r.key_tokens is not None})
    many = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return [plain(f"key PPL: PPL over the key predictions only ({many} per cell; rule: {rule}): the tokens that need "
                  "the long context, the same for every method, paired over the windows that have them.")]


def ppl_table(results: list[PplResult], title: str) -> list:
    t = table(title, ["method", "len", "k", "PPL", "NLL/token", "tokens", "key PPL", "key tokens", "cached"])
    for r in results:
        t.add_row(r.label, str(r.len), f"{r.factor:g}", r.cell(), f"{r.nll:.4f}", str(r.tokens), r.key_cell(),
                  "—" if r.key_tokens is None else str(r.key_tokens), "yes" if r.cached else "")
    return [t, *key_note(results)]


def _judged(verdict: Verdict | None, text: str) -> str:
    """A cell with its verdict: bold green for the best, ' ≈' / ' ?' after the others; as is without a verdict."""
    if verdict is None:
        return text
    return f"[bold green]{text}[/]" if verdict.best else text + verdict.mark


def _count(counts: set[int]) -> str:
    """How many units the cells hold: "4", or "4–16 (raced)", or "" where no cell has them."""
    counts = sorted(counts)
    return "" if not counts else f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]} (raced)"


class Column(NamedTuple):
    """A compare column: `metric`'s cells at length n, read from the rows of `rows_of` (a metric shown beside another
    reads that one's rows), each judged by the row's `against` verdict ('': none); `cell` None: the result's own cell."""
    metric: Metric
    n: int | None
    title: str
    rows_of: str
    against: str = "vs_best"
    cell: Callable[[EvalResult], str] | None = None


def compare_columns(rows: list[Row], lengths: list[int], L: int, kl_k: float) -> list[Column]:
    """The columns of compare's table, from the metrics' records: the window metrics length by length, each with the
    metric it shows beside it (key PPL from PPL's windows, where every row at that length has it); then the prompted
    metrics (passkey, each task) and any other metric on windows, metric by metric; then those run at L (KL, with its
    companion column)."""
    records = list(dict.fromkeys(r.record for r in rows))
    have = {m.name: m for m in records}
    shown_beside = {m.beside for m in records if m.beside}
    columns = []
    for n in lengths:
        for m in (m for m in records if m.prefixes and not m.prompted and not m.at_train_len):
            at_n = [r.result for r in rows if r.record is m and r.result.len == n]
            if m.name in shown_beside and any(o.beside == m.name and all(
                    getattr(r.result, m.field) is not None for r in rows if r.record is o and r.result.len == n)
                    for o in have.values()):
                continue  # shown beside the metric whose rows carry it
            columns.append(Column(m, n, f"{m.column} {n}" + (" (train)" if n == L else ""), m.name))
            b = metric_record(m.beside) if m.beside else None
            if b and at_n and all(getattr(r, b.field) is not None for r in at_n):
                columns.append(Column(b, n, f"{b.column} {n}", m.name, b.verdict_beside, b.result().cell))
    later = [m for m in records if m.prompted] + [m for m in records if not m.prompted and not m.prefixes
                                                  and not m.at_train_len]
    columns += [Column(m, n, f"{m.column} {n}", m.name) for m in later for n in lengths]
    for m in (m for m in records if m.at_train_len):  # at L, for the target's k
        columns.append(Column(m, L, f"{m.column} @ L (k={kl_k:g})", m.name))
        columns += [Column(m, L, m.companion[0], m.name, "", m.companion[1])] if m.companion else []
    return columns


def compare_table(out: dict, labels: list[str], lengths: list[int]) -> list:
    """`ropecli compare`: methods x (PPL / passkey at each length, KL and top-1 at L), then one line per column;
    with --workload, the tables per runtime (`ropecli.report.tables`). `out["results"]`: Rows."""
    rows: list[Row] = out["results"]
    L, kl_k = out["train_len"], out["kl_factor"]
    results = [r.result for r in rows]
    by = {(r.record.name, r.result.label, r.result.len): r for r in rows}
    counts = [(_count({len(r.windows) for r in results if r.documents and r.windows}), "windows"),
              (_count({len(r.prompt_answer_nll) for r in results if isinstance(r, PasskeyResult) and r.prompt_answer_nll}),
               "passkey prompts")]
    per_cell = "; ".join(f"{n} {what} per cell" for n, what in counts if n)
    columns = compare_columns(rows, lengths, L, kl_k)
    records = {c.metric.name: c.metric for c in columns}
    tasks = [r for r in results if isinstance(r, TaskResult)]
    effective = out.get("effective_length")
    per_cell = f"{per_cell}; " if per_cell else ""
    t = table(f"{out['model']} ({lengths_of(out)}); {bos_words(out)}; {per_cell}± = 95% half-width across windows; bold = "
              "best, ≈ = shown equivalent to it, ? = undecided (paired, 95% for the whole column)",
              ["method", *[c.title for c in columns], *(["eff. length (shown)"] if effective else [])])
    for label in labels:
        cells = []
        for c in columns:
            r = by[(c.rows_of, label, c.n)]
            text = c.cell(r.result) if c.cell else r.result.cell()
            cells.append(_judged(r.against(c.against), text) if c.against else text)
        if effective:  # the candidate's effective length: point estimate (shown at 95 %)
            e = effective["candidates"].get(label, {})
            cells.append(f"{e.get('point') or '-'} ({e.get('shown') or '-'})")
        t.add_row(label, *cells)
    lines = [t, *key_note(results)] + [plain(m.note) for m in records.values() if m.note]
    if out.get("chat_template", "none") != "none" and any(m.units != "windows" for m in records.values()):
        lines.append(plain(f"passkey and task prompts {chat_words(out)}."))
    if tasks:
        lines.append(plain(f"tasks (RULER's, on this text; {tasks[0].samples} prompts per cell): the answer's NLL in nats, "
                           "-log p(answer | prompt, answer prefix), mean over prompts, lower is better; (+g) its gain over "
                           "the same prompt without the needle; with --generate, RULER's string-match score; bold/≈ rank "
                           "by the answer NLL (paired over the same prompts)."))
    races = [plain(f"race ({m}): {rec['outcome']}") for m, rec in out.get("races", {}).items()]
    races += [plain(effective_line(effective))] if effective else []
    races += [plain(agreement_line(a)) for a in out.get("agreement", [])]
    return lines + [plain(line) for line in tie_lines(rows) + undecided_footnotes(rows)] + races + serving_tables(out)


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


def judged_columns(rows: list[Row]) -> dict[tuple, list[tuple[str, Verdict]]]:
    """Each column's verdicts: (metric, length, the verdict read) -> (label, verdict), a metric shown beside another
    (key PPL) with its own verdicts read from the same rows."""
    groups: dict[tuple, list[tuple[str, Verdict]]] = {}
    for r in rows:
        m, n = r.record, r.result.len
        if r.vs_best is not None:
            groups.setdefault((m, n, "vs_best"), []).append((r.result.label, r.vs_best))
        b = metric_record(m.beside) if m.beside else None
        if b and r.against(b.verdict_beside) is not None:  # the metric shown beside it, ranked on the same rows
            groups.setdefault((b, n, b.verdict_beside), []).append((r.result.label, r.against(b.verdict_beside)))
    return groups


def tie_lines(rows: list[Row]) -> list[str]:
    """One line per column: the best, the candidates shown equivalent to it, the undecided ones (what would decide
    them: `undecided_footnotes`), and what the verdicts generalize to."""
    lines = []
    for (m, n, _), judged in judged_columns(rows).items():
        if len(judged) < 2:
            continue
        what = f"{m.words} @ L={n}" if m.at_train_len else f"{m.words} @ {n}"
        best = next((label for label, v in judged if v.best), None)
        if best is None:  # every candidate diverged (an inf in each one's units): nothing to rank
            lines.append(f"{what}: no best, every candidate diverged (a unit with infinite loss in each)")
            continue
        others = [(label, v) for label, v in judged if not v.best]
        equivalent = [label for label, v in others if v.tied]
        undecided = [label for label, v in others if v.verdict == "undecided"]
        parts = [f"equivalent within ±{others[0][1].margin:g}: {', '.join(equivalent)}"] if equivalent else []
        parts += [f"undecided: {', '.join(undecided)}"] if undecided else []
        p = others[0][1]
        scope = f" [{p.inference} inference: generalizes to {p.generalizes_to}]" if p.generalizes_to else ""
        lines.append(f"{what}: best {best}; {'; '.join(parts or ['every other candidate is shown worse'])} "
                     f"(paired, 95% for the column){scope}")
    return lines


class Remedy(NamedTuple):
    """What would decide an undecided verdict, without the sizes that differ from one method to the next (the units it
    was judged on, the units that would decide it): the methods that share one are named in one footnote."""
    unit: str  # what the verdict counted: windows, or prompts (as `ropecli.evaluation.stats.answer` words it)
    more: str  # what to add: "windows" (of these documents), "documents", "text" (no size reaches it); "": no spread
    documents: int | None  # the documents the text holds, where more documents are needed
    said: str  # "text": why no size reaches it (`sample_size.units_needed`); "": the verdict's own words


def remedy_of(v: Verdict) -> Remedy:
    """The remedy `v`'s answer names, read from its fields (`needs`, `documents`), not from its words."""
    unit = "prompts" if v.inference == "units" else "windows"
    needs = v.needs or {}
    if needs.get("windows"):
        return Remedy(unit, "windows", None, "")
    if needs.get("documents"):
        return Remedy(unit, "documents", v.documents, "")
    if needs.get("why"):
        return Remedy(unit, "text", None, needs["why"])
    return Remedy(unit, "", None, v.answer or v.verdict)


def undecided_footnotes(rows: list[Row]) -> list[str]:
    """What would decide the undecided cells, one line per remedy over every column (not one per method: a table of
    15 methods said the same sentence 15 times): the methods sharing it named together, with the range of the units
    they were judged on and of those that would decide them. Each method's own numbers stay in --json (`needs`)."""
    shared: dict[Remedy, list[tuple[str, Verdict]]] = {}
    for judged in judged_columns(rows).values():
        for label, v in judged:
            if v.verdict == "undecided" and not v.best:
                shared.setdefault(remedy_of(v), []).append((label, v))
    return [footnote(remedy, undecided) for remedy, undecided in shared.items()]


def footnote(remedy: Remedy, undecided: list[tuple[str, Verdict]]) -> str:
    """'undecided after 2 windows for yarn, pi: not reachable with these 2 documents; add text: about 4–8 documents
    would decide them (80% power)', in `ropecli.evaluation.stats.answer`'s words."""
    names = list(dict.fromkeys(label for label, _ in undecided))  # a method undecided in several columns: named once
    if not remedy.more:
        return f"{', '.join(names)}: {remedy.said}"
    who = f"undecided after {span([v.n for _, v in undecided])} {remedy.unit} for {', '.join(names)}"
    if remedy.more == "text":
        return f"{who}: not reachable with these documents ({remedy.said}): add text"
    needed = span([v.needs[remedy.more] for _, v in undecided])
    decide = f"would decide {'it' if len(names) == 1 else 'them'} ({POWER:.0%} power)"
    if remedy.more == "windows":
        return f"{who}: about {needed} {remedy.unit} {decide}"
    return f"{who}: not reachable with these {remedy.documents} documents; add text: about {needed} documents {decide}"


def span(counts: list[int]) -> str:
    """'4', or '4–16' where the counts differ."""
    low, high = min(counts), max(counts)
    return f"{low}" if low == high else f"{low}–{high}"


def bos_words(out: dict) -> str:
    """What stood before every window and prompt (`--bos`, `ropecli.evaluation.bos_policy`), for a caption."""
    return describe_bos(out.get("bos"), out.get("bos_tokens", []))


def chat_words(out: dict) -> str:
    """The prompts' chat template in words (`--chat-template`, `ropecli.evaluation.chat_template`)."""
    return describe_frame(out.get("chat_template", "none"))


def passkey_table(out: dict) -> list:
    """`ropecli passkey`: accuracy per depth, overall, the answer NLL and its paired Δ to the best (`out["results"]`:
    Rows of PasskeyResults)."""
    depths, rows = out["depths"], out["results"]
    text = any(r.record is PASSKEY_TEXT for r in rows)
    said = all(r.result.generated_accuracy is not None for r in rows)  # --score generate: the published score beside
    prompt = (f"ropecli's real-text prompt (passkey-text), keys of {out['digits']} digits" if text else
              f"the published prompt (landmark attention's, as YaRN and LongRoPE run it), keys {KEY_RANGE[0]}–{KEY_RANGE[1]:,}")
    t = table(f"Passkey accuracy on {out['model']} ({lengths_of(out)}): {prompt} {chat_words(out)}, {out.get('prompts', out['samples'])} "
              f"per depth; depth 0 = key farthest from the question; {bos_words(out)}",
              ["method", "len", "k", *[f"depth {d:g}" for d in depths], "all", *(["generated", "agree"] if said else []),
               "answer NLL", "Δ NLL vs best (paired)"])
    for row in sorted(rows, key=lambda row: (row.result.len, row.result.label)):
        r = row.result
        gen = [f"{r.generated_accuracy:.0%}", f"{r.agreement()}/{r.samples}"] if said else []
        t.add_row(r.label, str(r.len), f"{r.factor:g}", *[f"{d['accuracy']:.0%}" for d in r.by_depth],
                  f"[bold]{r.accuracy:.0%}[/]", *gen, "inf" if r.answer_nll is None else f"{r.answer_nll:.3f}",
                  row.vs_best.diff_text + row.vs_best.mark)
    lines = [t]
    if said:
        lines.append(plain("depths and all: teacher-forced (every key token the argmax); generated: the published scripts' "
                           "score (10 greedy tokens, the first integer is the key: YaRN's eval/passkey.py); agree: prompts "
                           "on which the two verdicts agree."))
    return lines + [plain("Δ NLL: answer NLL minus the best method's at that length, over the same prompts, ± the 95% half-width; "
               f"≈ = shown equivalent to the best within ±{MARGIN:g} nats, ? = undecided (paired, 95% for the column).")]


def kl_table(out: dict) -> list:
    """`ropecli kl`: mean, p99 and max KL against the unscaled model, top-1 agreement, paired Δ to the lowest
    (`out["results"]`: Rows of KlResults)."""
    t = table(f"KL({'native' if out.get('shipped') else 'unscaled'} || scaled) per token on {out['model']} ({lengths_of(out)}), schedules for "
              f"k = {out['factor']:g}; {out['samples']} windows; {bos_words(out)}",
              ["method", "len", "mean KL", "p99 KL", "max KL", "top-1 agree", "Δ vs best (paired)"])
    for row in sorted(out["results"], key=lambda row: (row.result.len, row.result.kl_mean)):
        r = row.result
        t.add_row(r.label, str(r.len), f"{r.kl_mean:.5f}", f"{r.kl_p99:.4f}", f"{r.kl_max:.3f}",
                  f"{r.top1_agreement:.2f}%", row.vs_best.diff_text + row.vs_best.mark)
    return [t, plain("nats per token; Δ: mean KL minus the lowest one over the same windows, ± the 95% half-width; "
               f"≈ = shown equivalent to the lowest within ±{MARGIN:g} nats, ? = undecided (paired, 95% for the column).")]


def verify_table(verdict, exp, target) -> list:
    """`ropecli verify`: each check (expected, found, ok), the notes, the verdict line."""
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



def _num(x, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def task_table(results: list[TaskResult], title: str) -> list:
    if not results:
        return []
    depths = [d["depth"] for d in results[0].by_depth]
    t = table(title, ["task", "len", "prompts", "answer NLL", "gain", "argmax", "RULER score",
                      *[f"gain @ {d:g}" for d in depths if d is not None]])
    for r in results:
        t.add_row(r.task, str(r.len), str(r.samples), _num(r.answer_nll), _num(r.gain, "{:+.2f}"),
                  f"{r.accuracy:.0%}", _num(r.match, "{:.0%}"),
                  *[_num(d["gain"], "{:+.2f}") for d in r.by_depth if d["depth"] is not None])
    return [t, plain("answer NLL: -log p(answer | prompt, answer prefix), nats, mean over prompts; gain: the same prompt "
                     "without the needle minus it (what the needle is worth); argmax: answers the model reproduces token "
                     "by token; RULER score: string match of a greedy answer (--generate).")]


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
