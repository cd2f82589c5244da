"""`ropecli advise`: the tournament (`ropecli.advise`), one progress bar, and the deliverables in --out:
advice.json, report.md with its pictures, and the winner exported through `ropecli export`."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ropecli.cli_common import console, emit_json, handle_errors
from ropecli.errors import RopeCliError
from ropecli.options import OUTPUT, DataOptions, EvalOptions, ModelOptions, PasskeyOptions, with_option_groups
from ropecli.session import open_session

ADVISE = "Advise"
MARKER = ".ropecli-advise"  # a folder advise made: a rerun may write into it again


@handle_errors
@with_option_groups
def advise(
    model: ModelOptions,
    data: DataOptions,
    evaluation: EvalOptions,
    prompts: PasskeyOptions,
    out: Annotated[str, typer.Option("--out", "-o", rich_help_panel=OUTPUT, help="Folder for advice.json, report.md, pictures and configs.")] = "ropecli-advice",
    candidates: Annotated[Optional[list[str]], typer.Option(
        "--candidates", rich_help_panel=ADVISE,
        help="Narrow the candidates (comma list): none, pi, ntk-aware, dynamic, yarn, yarn-tuned, llama3, ntk-fixed, mixed-b, mixed-clamped.")] = None,
    with_log_n: Annotated[bool, typer.Option("--with-log-n", rich_help_panel=ADVISE, help="Add every candidate with log-n.")] = False,
    budget: Annotated[int, typer.Option("--budget", min=4, rich_help_panel=ADVISE, help="Evaluations per searched candidate.")] = 12,
    held_out: Annotated[Optional[int], typer.Option(
        "--held-out", min=2, rich_help_panel=ADVISE, help="Held-out windows for the ranking (default: as many as --samples).")] = None,
    max_short_kl: Annotated[Optional[float], typer.Option(
        "--max-short-kl", min=0.0, rich_help_panel=ADVISE, help="Out if mean KL against the unscaled model at L exceeds this.")] = None,
    max_short_regression: Annotated[Optional[float], typer.Option(
        "--max-short-regression", min=0.0, rich_help_panel=ADVISE, help="Out if PPL at L rises more than this many percent.")] = None,
    min_passkey: Annotated[Optional[float], typer.Option(
        "--min-passkey", min=0.0, max=1.0, rich_help_panel=ADVISE, help="Out if passkey accuracy at the longest target is below this.")] = None,
    as_json: Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT, help="Print advice.json to stdout too.")] = False,
):
    """Which context extension for my model: every method on the same windows, ranked, exported.

    Searches YaRN's betas, the mixed b and the clamped mixed family on the searched windows, then
    ranks every candidate on held-out windows by the rule in the README (constraints, mean log-PPL,
    ties by paired 95% going to the smallest cost within L) and exports the winner for transformers,
    vLLM and (GGUF input) llama.cpp. Every evaluation is cached: an interrupted run resumes.

    Examples: ropecli advise
              ropecli advise --model meta-llama/Llama-2-7b-hf --len 32768 --len 65536 --out llama-advice
    """
    from ropecli.advise import advise as run_advice, check_candidates
    from ropecli.evaluate import check_lengths
    from ropecli.geometry import Geometry, default_factor
    from ropecli.session import Session, overall_progress

    names = check_candidates(candidates)
    prompts.parsed_depths(), prompts.checked_digits()
    out_dir = prepare_out(out)
    session = open_session(model, data, evaluation, quiet=as_json, passkey=prompts)
    lm = session.lm
    lengths = check_lengths(evaluation.length or [8 * lm.train_len])
    k = evaluation.k if evaluation.k is not None else default_factor(max(lengths), lm.train_len)
    geom = Geometry(lm.rotary_dim, lm.base, lm.train_len, k)
    held = Session(lm, session.ev.held_out(held_out or session.ev.samples))
    held.ev.depths, held.ev.digits = session.ev.depths, session.ev.digits
    for n in lengths:
        session.ev.check_inputs("ppl", n), held.ev.check_inputs("ppl", n)
    notes: list[str] = []
    try:
        held.ev.check_inputs("passkey", lm.train_len)
        passkey = True
    except RopeCliError as exc:  # L shorter than the prompt: no passkey test possible at all
        passkey = False
        notes.append(f"passkey skipped: {exc}")
    if passkey:
        held.ev.check_inputs("passkey", max(lengths))
    total = estimate_units(names, with_log_n, budget, lengths, session.ev, held.ev)
    with overall_progress(total, "advise") as progress:
        session.progress = held.progress = progress
        result = run_advice(session.run, held.run, geom, lengths, names=names, budget=budget, with_log_n=with_log_n,
                            factor=evaluation.k, max_short_kl=max_short_kl, max_short_regression=max_short_regression,
                            min_passkey=min_passkey, passkey=passkey, note=notes.append)
    result = {**session.header(), **result, "notes": notes, "searched_windows": session.ev.samples,
              "held_out_windows": held.ev.samples, "held_out_first_window": held.ev.first_window,
              "forward_passes": session.forward_passes() + held.forward_passes(), "cache": session.cache_stats()}
    if session.is_main:
        result["exports"] = export_winner(result, model, lengths, out_dir)
        result["commands"] = reproduce_commands(result, model, data, evaluation, lengths, out, with_log_n, budget, names)
        from ropecli.advice_report import write_report

        write_report(result, out_dir, geom, lm.name)
        from ropecli.files import atomic_write_text

        atomic_write_text(out_dir / "advice.json", json.dumps(result, indent=1, default=_plain))
    if as_json:
        return emit_json(result)
    print_advice(result, out_dir)


def prepare_out(out: str) -> Path:
    """--out must be creatable and writable, and empty unless an earlier advise made it."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise RopeCliError(f"--out {out} is a file; pass a folder")
    if p.exists() and any(p.iterdir()) and not (p / MARKER).exists():
        raise RopeCliError(f"--out {out} is not empty and was not made by ropecli advise; pass a new or empty folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
        (p / MARKER).write_text("made by ropecli advise; a rerun writes here again\n")
    except OSError as exc:
        raise RopeCliError(f"--out {out} is not writable ({exc.strerror}); pass a folder you can write") from None
    return p


def estimate_units(names, with_log_n, budget, lengths, ev, held_ev) -> int:
    """Forward passes of a full run (cached ones included, they tick at once): the progress bar's total."""
    from ropecli.advise import SEARCHED

    modes = 2 if with_log_n else 1
    n_search = sum(budget if n != "mixed-b" else min(budget, 12) for n in names if n in SEARCHED) * modes
    per_candidate = held_ev.units("ppl") * (len(lengths) + 2) + held_ev.units("passkey")
    return n_search * ev.units("ppl") * len(lengths) + len(names) * modes * per_candidate + held_ev.units("ppl") + held_ev.units("passkey")


def _export_flags(spec: dict) -> list[str]:
    flags = ["--method", spec["method"]]
    for key, value in spec["params"].items():
        flags += ["--param", f"{key}={value:.10g}"]
    return flags + (["--log-n"] if spec["log_n"] else [])


def export_winner(result: dict, model: ModelOptions, lengths: list[int], out_dir: Path) -> list[dict]:
    """The winner through `ropecli export` (the user-facing command, run as a subprocess), for each runtime."""
    from ropecli.model_config import BUILTIN, BUILTIN_DIR

    source = str(BUILTIN_DIR) if model.model in (None, BUILTIN) else model.model
    base = [sys.executable, "-m", "ropecli", "export", "--model", source,
            *(["--gguf-file", model.gguf_file] if model.gguf_file else []), *_export_flags(result["winner_spec"]),
            "--len", str(max(lengths)), "--force"]
    gguf_in = source.endswith(".gguf") or model.gguf_file
    jobs = [("transformers", ["--to", "hf", "--out", str(out_dir / "hf")]),
            ("vllm", ["--to", "vllm", "--out", str(out_dir / "vllm-overrides.json")])]
    if gguf_in:
        jobs.append(("llama.cpp", ["--to", "gguf", "--out", str(out_dir / "model-extended.gguf")]))
    done = []
    for runtime, extra in jobs:
        cmd = base + extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        shown = " ".join(shlex.quote(c) for c in ["ropecli", *cmd[3:]])
        done.append({"runtime": runtime, "command": shown, "ok": r.returncode == 0,
                     "output": (r.stdout if r.returncode == 0 else r.stderr).strip()[-2000:]})
    if not gguf_in:
        done.append({"runtime": "llama.cpp", "command": None, "ok": False,
                     "output": "skipped: the model is not a GGUF file (convert it, then `ropecli export --to gguf`)"})
    return done


def reproduce_commands(result, model: ModelOptions, data: DataOptions, evaluation: EvalOptions, lengths, out, with_log_n,
                       budget, names) -> list[str]:
    parts = ["ropecli", "advise"]
    if model.model:
        parts += ["--model", model.model]
    for n in lengths:
        parts += ["--len", str(n)]
    for d in data.data or []:
        parts += ["--data", d]
    parts += ["--samples", str(data.samples), "--seed", str(data.seed), "--budget", str(budget), "--out", out]
    if with_log_n:
        parts.append("--with-log-n")
    return [" ".join(shlex.quote(p) for p in parts), *[e["command"] for e in result.get("exports", []) if e["command"]]]


def print_advice(result: dict, out_dir: Path) -> None:
    from rich.table import Table

    from ropecli.stats import fmt_diff

    con = console()
    con.print(f"[bold]winner: {result['winner_label']}[/] — {result['verdict']}", highlight=False)
    t = Table(title=f"advise on {result['model']} (L = {result['train_len']}): held-out windows "
                    f"{result['held_out_first_window']}…{result['held_out_first_window'] + result['held_out_windows'] - 1}, "
                    f"k = {result['factor']:g}")
    t.add_column("rank", justify="right")
    t.add_column("candidate")
    for n in result["lengths"]:
        t.add_column(f"PPL @ {n}", justify="right")
    t.add_column("Δ vs best (paired)", justify="right")
    if result["passkey_measured"]:
        t.add_column(f"passkey @ {max(result['lengths'])}", justify="right")
    t.add_column("KL @ L", justify="right")
    t.add_column("PPL rise @ L", justify="right")
    t.add_column("note")
    for r in sorted(result["rows"], key=lambda r: (bool(r["excluded"]), r["objective"])):
        note = "winner" if r["candidate"] == result["winner"] else ("tied" if r["tied"] else "")
        if r["excluded"]:
            note = "out: " + "; ".join(r["excluded"])
        cells = [str(r.get("rank", "—")), f"{r['candidate']}: {r['label']}",
                 *[f"{r['ppl'][str(n)]:.4g}" for n in result["lengths"]], fmt_diff({**r["vs_best"], "best": r["objective"] ==
                                                                                     min(x["objective"] for x in result["rows"])})]
        if result["passkey_measured"]:
            cells.append(f"{r['passkey_accuracy']:.0%}")
        cells += [f"{r['short_kl']:.4f}", f"{r['short_rise_percent']:+.2f}%", note]
        t.add_row(*cells, style="bold green" if note == "winner" else "")
    con.print(t)
    for n in result["notes"]:
        con.print(f"note: {n}", highlight=False)
    con.print(f"rule: {result['rule']}", highlight=False)
    for e in result["exports"]:
        con.print(f"{e['runtime']}: {'ok' if e['ok'] else 'not written'} — {e['command'] or e['output']}", highlight=False,
                  soft_wrap=True)
    con.print(f"wrote {out_dir}/advice.json and {out_dir}/report.md; {result['forward_passes']} forward passes, "
              f"{result['cache']['hits']} cached results reused", highlight=False)


def _plain(x):
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON: {type(x)}")
