"""The terminal tables of `ropecli search-b` and `ropecli search`, from their JSON (`ropecli.tuning.search`):
each function returns what to print, rich Tables and lines (`ropecli.cli.console.show` prints them)."""

from __future__ import annotations

import math

from rich.markup import escape

from ropecli.evaluation.metrics import PPL, metric_record, prompted
from ropecli.evaluation.stats import fmt_diff
from ropecli.report import lengths_of, table


def objective_text(e: dict) -> str:
    """'3.9142', '≥ 3.9100' for a point stopped early (its objective is a lower bound), '3.9120 (2 of 4)' for a
    point a late-precision search scored on its first windows only (an estimate there)."""
    if "stopped_early" in e:
        return f"≥ {e['objective']:.4f}"
    if "partial" in e:
        return f"{e['objective']:.4f} ({e['partial']['windows']} of {e['partial']['of']})"
    return f"{e['objective']:.4f}"


def _p(x) -> str:
    return "inf" if x is None or x == math.inf else f"{x:.4g}"


def _cells(e: dict, lengths: list[int], passkey: bool, keyed: bool = False) -> list[str]:
    cells = [f"{e['accuracy'][str(n)]:.0%} / {e['answer_nll'][str(n)]:.2f}" if passkey else _p(e[PPL.field][str(n)])
             for n in lengths]
    key = metric_record(PPL.beside).field
    return cells + ([_p((e.get(key) or {}).get(str(n))) if e.get(key) else "—" for n in lengths] if keyed else [])


def _keyed(*groups: list[dict]) -> bool:
    """Whether the entries carry key-token PPL (then a key PPL column per length)."""
    return any(e.get(metric_record(PPL.beside).field) for g in groups for e in g)


def objective_words(name: str) -> str:
    """What a search minimizes, in words: 'mean log-PPL over lengths', 'mean passkey answer NLL over lengths'."""
    return f"mean {metric_record(name).measure} over lengths"


def per_length_heads(objective: str, lengths: list[int], keyed: bool) -> list[str]:
    """`PPL @ n` (a prompted objective: its own name) for each length, then `key PPL @ n` where the entries carry it."""
    column = objective if prompted(objective) else PPL.column
    return [f"{column} @ {n}" for n in lengths] + ([f"{metric_record(PPL.beside).column} @ {n}" for n in lengths] if keyed else [])


def _b_note(e: dict, out: dict) -> str:
    if e.get("violates_guard"):
        return "guard: " + ", ".join(x for x in [
            f"short PPL +{e['short_rise_percent']:.1f}%" if "short_rise_percent" in e else "",
            f"short KL {e['short_kl']:.4f}" if "short_kl" in e else ""] if x)
    return "best" if e["b"] == out["best_b"] else ("equivalent to the best" if e["vs_best"]["tied"] else
                                                   "stopped early: a lower bound" if "stopped_early" in e else "")


def search_b_tables(out: dict) -> list:
    """`ropecli search-b`: every evaluated b, the references on the same documents, the summary and notes."""
    lengths = out["lengths"]
    passkey = prompted(out["objective_name"])  # prompts: passkey or a task (accuracy / answer NLL)
    what = objective_words(out["objective_name"])
    keyed = _keyed(out["evaluations"], out["references"])
    per_len = per_length_heads(out["objective_name"], lengths, keyed)
    t = table(f"search-b on {out['model']} ({lengths_of(out)}), objective = {what}" + (", with log-n" if out["log_n"] else ""),
              ["b", *per_len, "objective", "Δ vs best (paired, ± 95%)", "note"], left=("note",))
    for e in sorted(out["evaluations"], key=lambda e: e["b"]):
        t.add_row(f"{e['b']:.4f}", *_cells(e, lengths, passkey, keyed), objective_text(e), fmt_diff(e["vs_best"]), _b_note(e, out),
                  style="bold green" if e["b"] == out["best_b"] else "")
    r = table("References on the same documents (Δ: minus the best b, paired over windows, ± 95% half-width)",
              ["method", *per_len, "objective", "Δ vs best b", "verdict"], left=("method", "verdict"))
    for ref in sorted(out["references"], key=lambda x: x["objective"]):
        d = ref["vs_best_b"]
        r.add_row(ref["label"], *_cells(ref, lengths, passkey, keyed), f"{ref['objective']:.4f}", fmt_diff(d),
                  "beats best b" if d["beats_best_b"] else d["verdict"])
    return [f"[bold]verdict:[/] {escape(out['verdict'])}", t, r,
            f"best b = [bold]{out['best_b']:.4f}[/] (±{out['tol']:g}), objective {out['best_objective']:.4f}; "
            f"{equivalent_words(out, 'b')}; {out['search_evaluations']} "
            f"evaluations (a uniform grid of the same accuracy needs {out['grid_evaluations_same_accuracy']}); "
            f"{out['forward_passes']} forward passes, {out['cache']['hits']} cached results reused",
            *one_dim_notes(out, "b", out["lo"], out["hi"], "--lo/--hi")]


def equivalent_words(out: dict, name: str) -> str:
    """Which evaluated values are shown equivalent to the best (paired 95%, within the margin), and which are
    undecided: points, never an interval (the values between two equivalent points were not measured)."""
    points = lambda xs: ", ".join(f"{x:.4f}" for x in xs)  # noqa: E731
    shown, undecided = out.get("equivalent_points") or [], out.get("undecided_points") or []
    said = (f"evaluated {name} shown equivalent to it: {points(shown)}" if shown else
            f"no other evaluated {name} is shown equivalent to it")
    said += f" (paired 95%, fully evaluated points); undecided: {points(undecided)}" if undecided else \
        " (paired 95%, fully evaluated points)"
    return said


def one_dim_notes(out: dict, name: str, lo: float, hi: float, flags: str) -> list[str]:
    """The notes of a one-parameter search (`ropecli.tuning.search.compare_with_best`): best at an end, bumps."""
    lines = []
    if out.get("at_boundary"):
        end = lo if out["at_boundary"] == "lo" else hi
        what = (" (PI)" if end == 0 else " (NTK-fixed)" if end == 1 else "") if name == "b" and out.get("method", "mixed") == "mixed" else ""
        lines.append(f"[yellow]note:[/] the minimum sits at the boundary {name} = {end:g}{what}; widen {flags} if the range allows")
    if out.get("non_unimodal_at"):
        lines.append(f"[yellow]warning:[/] the objective is not unimodal over the evaluated points (a bump at {name} = "
                     f"{', '.join(f'{b:.3f}' for b in out['non_unimodal_at'])}); the search may have missed a better valley")
    return lines


def _point_note(e: dict, out: dict) -> str:
    return ("best" if e["params"] == out["best_params"] else "guard" if e.get("violates_guard")
            else "outside the method's domain" if e.get("infeasible") else
            "stopped early: a lower bound" if "stopped_early" in e else
            "first windows only (not a finalist)" if "partial" in e else "finalist" if "finalist" in e else "")


def _span(out: dict, part: str) -> str:
    """Which units a part of a search scored: "windows 0…3", or a prompted objective's "prompts 0…1 per depth"."""
    if f"{part}_prompts" in out:
        first, n = out[f"{part}_prompts"]
        return f"prompts {first}…{first + n - 1} per depth"
    first, n = (0, out["samples"]) if part == "searched" else (out["held_out_first_window"], out["held_out_windows"])
    return f"windows {first}…{first + n - 1}"


def search_tables(out: dict) -> list:
    """`ropecli search`: the held-out verdict, the best 10 searched points, the held-out table, the notes."""
    held, lengths = out["held_out"], out["lengths"]
    names = [d["name"] for d in out["vary"]]
    t = table(f"search {out['method']} over {', '.join(names)} ({out['optimizer']}, {out['search_evaluations']} of "
              f"{out['budget']} evaluations) on {_span(out, 'searched')}; best 10 by objective",
              [*names, "objective", "note"], left=("note",))
    for e in sorted(out["evaluations"], key=lambda e: (e.get("violates_guard", False), e["objective"]))[:10]:
        note = _point_note(e, out)
        t.add_row(*[f"{e['params'][n]:.4g}" for n in names], objective_text(e), note, style="bold green" if note == "best" else "")
    ppl, keyed = not prompted(out["objective_name"]), _keyed(held["rows"])
    h = table("Held-out windows: the winner and the standard methods (Δ: minus the winner, paired, ± 95% half-width)",
              ["schedule", *(per_length_heads(out["objective_name"], lengths, keyed) if ppl else []), "objective", "Δ vs winner"],
              left=("schedule",))
    for r in sorted(held["rows"], key=lambda r: r["objective"]):
        h.add_row(r["label"], *(_cells(r, lengths, False, keyed) if ppl else []), f"{r['objective']:.4f}",
                  "winner" if r["role"] == "winner" else fmt_diff(r["vs_winner"]),
                  style="bold green" if r["role"] == "winner" else "")
    lines = [f"[bold]verdict (held-out {_span(out, 'held_out')}; {escape(out['held_out_split'])}):[/] "
             f"{escape(held['verdict'])}", t, h,
             f"best {out['best_label']}: objective {out['best_objective']:.4f} on the searched "
             f"{'prompts' if 'searched_prompts' in out else 'windows'}; "
             f"{out['forward_passes']} forward passes, {out['cache']['hits']} cached results reused"]
    if len(out["vary"]) == 1:
        d = out["vary"][0]
        lines += one_dim_notes(out, d["name"], d["lo"], d["hi"], f"--vary {d['name']}=LO:HI")
    return lines
