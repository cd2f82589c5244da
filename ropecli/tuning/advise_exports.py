"""What advise writes for each runtime: every runtime record gets the best-ranked candidate it serves (the winner
where it can), through `ropecli.export.plan.export_schedule` (what `ropecli export` runs), with the command that does
the same and a line saying why wherever that is not the winner; with a workload, each runtime's pick from its serving
table (`runtime_pick`)."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.export.p_rope import p_rope_refusal
from ropecli.export.plan import check_export_paths, export_schedule, export_target
from ropecli.export.writers import is_gguf
from ropecli.export.registry import record, records
from ropecli.models.config import BUILTIN, BUILTIN_DIR
from ropecli.models.packaged import BUILTIN_FOLDERS, resolve_model
from ropecli.maps.map_spelling import map_text
from ropecli.tuning.standings import Ranked, Standings


def export_winner(standings: Standings, result: dict, rope, model: str | None, gguf_file: str | None,
                  out_dir: Path, weights: str = "auto") -> list[dict]:
    """The winner through `ropecli.export.plan.export_schedule` (what `ropecli export` runs), for each
    runtime, with the `ropecli export` command that does the same; a runtime that fails is reported, not raised.
    With a workload (`result["serving"]`) each runtime gets `runtime_pick`'s candidate and export variant."""
    source = str(BUILTIN_DIR) if model in (None, BUILTIN) else resolve_model(model)
    served = (result.get("serving") or {}).get("runtimes", {})
    geom = rope.geometry(result["factor"])
    target = export_target(geom, rope, base_given=False)
    gguf = is_gguf(source, gguf_file)
    done = [{"runtime": rec.name, "command": None, "ok": False, "output": f"skipped: {rec.label} serves a GGUF and the "
             "model is not a GGUF file (convert it, then `ropecli export --to gguf`)"}
            for rec in records().values() if rec.needs_gguf and not gguf]
    for runtime, out in export_paths(out_dir, gguf):
        best = runtime_pick(served.get(runtime), standings.winner.candidate,
                            (result.get("constraints") or {}).get("max_short_regression"))
        picks = [standings.get(best["name"])] if best else served_in_order(standings, runtime, geom, target)
        refused: list[str] = []  # a candidate the runtime's writer refused (SGLang's DCA on an architecture it lacks)
        try:  # where the export goes: not the candidate's fault, so no next candidate
            for w in picks:
                check_export_paths(runtime, str(map_out(runtime, w, out, out_dir)), source, gguf_file, force=True,
                                   mapped=bool(w.spec.position_map))
        except RopeCliError as exc:
            done.append({"runtime": runtime, "command": None, "ok": False, "output": str(exc)})
            continue
        for w in picks:
            entry = export_one(w, best, runtime, map_out(runtime, w, out, out_dir), geom, target, model, source,
                               gguf_file, weights)
            if entry["ok"] or w is picks[-1]:
                why = "; ".join(filter(None, [picks[0].instead, *refused]))
                why += f": exporting {w.candidate}, the next-ranked candidate it serves (rank {w.rank})" if refused else ""
                done.append({**entry, **({"instead": why} if why and entry["ok"] else {})})
                break
            refused.append(f"{runtime} refused {entry['candidate']} ({entry['output']})")
    order = list(records())
    return sorted(done, key=lambda e: order.index(e["runtime"]))


def export_one(w: Ranked, best: dict | None, runtime: str, out: Path, geom, rope, model, source, gguf_file,
               weights: str = "auto") -> dict:
    """One candidate `w` exported for `runtime` (what `ropecli export` runs) as the spec the tournament measured, with
    the command that does the same: the export's lines, or the one line that refused it."""
    spec = w.spec
    params = {**{k: v for k, v in dict(spec.params).items() if v is not None and k != "factors"}, **dict(spec.temperature)}
    consistent = not best or bool(best["consistent"])  # switching only where its decode damage was shown harmless
    shown = model if model in BUILTIN_FOLDERS else source  # a short name stays one in the printed command
    name = ("native+" if spec.composed else "") + spec.method
    flags = ["--model", shown, *(["--gguf-file", gguf_file] if gguf_file else []), "--method", name,
             *[x for k, v in params.items() for x in ("--param", f"{k}={v:.10g}")], *(["--log-n"] if spec.log_n else []),
             *(["--map", map_text(spec.position_map)] if spec.position_map else []),
             "--len", str(geom.target_len), "--force", *([] if consistent else ["--switching"]),
             *(["--weights", weights] if weights != "auto" else [])]
    command = " ".join(shlex.quote(c) for c in ["ropecli", "export", *flags, "--to", runtime, "--out", str(out)])
    try:
        written = export_schedule(spec, geom, rope, runtime, str(out), model=source, gguf_file=gguf_file, force=True,
                                  consistent=consistent, measure_switching=False, weights=weights)
    except RopeCliError as exc:
        return {"runtime": runtime, "command": command, "ok": False, "output": str(exc), "candidate": w.candidate}
    return {"runtime": runtime, "command": command, "ok": True, "output": "\n".join(written["lines"])[-2000:],
            "candidate": w.candidate, "serve": written.get("load") or written.get("command"),
            **({"launch_script": written["launch_script"]} if written.get("launch_script") else {})}


def map_out(runtime: str, w: Ranked, out: Path, out_dir: Path) -> Path:
    """Where candidate `w` goes for `runtime`: `out`, or for a position map to a runtime that serves maps from a model
    folder (vLLM's plugin: `Runtime.map_output`) the folder out_dir/NAME."""
    return out_dir / runtime if w.spec.position_map and record(runtime).map_output == "folder" else out


def export_paths(out_dir: Path, gguf: bool) -> list[tuple[str, Path]]:
    """(runtime, --out) for every runtime record advise exports to, by what the runtime's --out takes; the ones that
    serve a GGUF only where the model is one."""
    where = {"folder-or-json": lambda rec: out_dir / "hf", "json": lambda rec: out_dir / f"{rec.name}-overrides.json",
             "gguf": lambda rec: out_dir / "model-extended.gguf", "folder": lambda rec: out_dir / rec.name}
    return [(rec.name, where[rec.output](rec)) for rec in records().values() if gguf or not rec.needs_gguf]


def served_winner(standings: Standings, runtime: str, geom=None, rope=None) -> Ranked:
    """The first of `served_in_order`: what `runtime` is exported unless its writer refuses it."""
    return served_in_order(standings, runtime, geom, rope)[0]


def served_in_order(standings: Standings, runtime: str, geom=None, rope=None) -> list[Ranked]:
    """The candidates `runtime` is offered, in order: the winner, or where the runtime cannot serve it (a position map
    it does not serve or whose current builds break it, `Runtime.maps`; a p-RoPE schedule its config cannot carry,
    `export.p_rope`) the best-ranked eligible candidate it does serve, with the line that says so (`instead`); then
    every other eligible candidate it serves, by rank (where its writer refuses one, advise takes the next)."""
    rec = record(runtime)

    def why(r: Ranked) -> str | None:
        pm = r.spec.position_map
        if pm and not rec.serves_map(pm.name):
            return f"{runtime} does not serve the winner's position map ({pm.name})"
        if pm and (broken := dict(rec.maps_broken).get(pm.name)):
            return f"{runtime} does not serve the winner's position map ({pm.name}) as measured: {broken}"
        if rope is None or rope.rotating_pairs is None:
            return None
        return p_rope_refusal(r.spec, geom, rope, rec)

    w = standings.winner
    rest = [r for r in standings.ranked if r.candidate != w.candidate and why(r) is None]
    if (reason := why(w)) is None:
        return [w, *rest]
    if not rest:
        return [w]  # nothing it serves was eligible: the export says why it cannot serve the winner
    first = replace(rest[0], instead=f"{reason}: exporting {rest[0].candidate}, the best-ranked candidate it serves "
                                     f"(rank {rest[0].rank})")
    return [first, *rest[1:]]


def runtime_pick(block: dict | None, winner: str, max_rise: float | None = None) -> dict | None:
    """The export one runtime gets over the workload, among the rows that generate safely (`generation_safe`: one
    schedule at every decoding step, or decode damage across the switch shown within the margin; unmeasured rows
    count as safe only if consistent): the best such row where every safe variant of the tournament's winner is
    shown worse than it, else the winner's best safe variant; None without a workload or where the winner cannot be
    served safely (the tournament's export, consistent, stands). `max_rise` (--max-short-regression, percent): rows
    whose PPL at Ls as this runtime serves them (`within_L`) rises more over the model as shipped are left out."""
    if not block:
        return None
    rows = [r for r in block["rows"] if "vs_best" in r and r.get("generation_safe", r["consistent"])
            and (max_rise is None or r.get("within_L", {}).get("rise_percent", 0.0) <= max_rise)]
    mine = sorted((r for r in rows if r["name"] == winner), key=lambda r: r["expected_nll"])
    best = min(rows, key=lambda r: r["expected_nll"], default=None)
    if best is not None and mine and all(_worse_than(r, best) for r in mine):
        return best
    return mine[0] if mine else None


def _worse_than(row: dict, best: dict) -> bool:
    """`row` shown worse than `best` by the table's paired verdict (only where `best` is the table's best)."""
    return best["vs_best"].get("best") and row["vs_best"].get("verdict") == "worse"
