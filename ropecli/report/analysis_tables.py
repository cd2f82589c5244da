"""What the analysis commands (`freqs`, `digits`, `schedule`, `methods`) print: rich Tables and lines for
people, and the JSON / CSV forms of a schedule for programs. Numpy only through the numbers they get."""

from __future__ import annotations

import csv
import io

from rich.table import Table

from ropecli.maps.map_spelling import map_from_json, map_label
from ropecli.maps.pair_selection import kept_pairs
from ropecli.maps.position_maps import MAPS
from ropecli.report import table
from ropecli.rope.methods import ALIASES, REGISTRY
from ropecli.rope.schedule import REQUIRED


def lengths(geom) -> str:
    """`L=4096`, or for a model that ships a schedule `L0=8192, Ls=131072 (ships llama3(factor=8, …))`."""
    if geom.shipped is None:
        return f"L={geom.train_len}"
    return f"L0={geom.train_len}, Ls={geom.shipped_len} (ships {geom.shipped.label})"


def g4(x: float) -> str:
    """4 significant digits, the table format for every float."""
    return f"{x:.4g}"


STATUS_STYLE = {"extrapolated": "yellow", "interpolated": "cyan", "in between": "green", "unchanged": "", "no rotation": "dim"}


def freqs_table(report: dict, geom) -> list:
    """`ropecli freqs`: per pair before and after the schedule, then the critical pair in words."""
    pmap = report.get("map")
    mapped = ["map group", "farthest distance", "turns there", "in range (map)"] if pmap else []
    under = f" under {map_label(map_from_json(pmap))}" if pmap else ""
    t = table(f"{report['label']}{under}: d={geom.rotary_dim}, base={geom.base:g}, {lengths(geom)}, k={geom.factor:g} "
              f"(target {geom.target_len}), attention factor {report['attention_factor']:.4f}",
              ["m", "inv_freq", "factor Λ", "scaled inv_freq", "wavelength", "scaled wavelength", "turns in L",
               "turns in kL", "status", "in range", *mapped], left=("status", "in range", "in range (map)"))
    for p in report["pairs"]:
        style = STATUS_STYLE[p["status"]]
        extra = [str(p["map_group"] or "all"), g4(p["map_distance"]), g4(p["map_turns"]),
                 "yes" if p["map_in_range"] else "[red]no[/]"] if pmap else []
        t.add_row(str(p["m"]), g4(p["inv_freq"]), g4(p["factor"]), g4(p["scaled_inv_freq"]), g4(p["wavelength"]),
                  g4(p["scaled_wavelength"]), g4(p["turns_in_train_len"]), g4(p["turns_in_target_len"]),
                  f"[{style}]{p['status']}[/]" if style else p["status"], "yes" if p["in_range"] else "[red]no[/]",
                  *extra)
    crit = report["critical_pair"]
    tail = ""
    if pmap:
        out = [p["m"] for p in report["pairs"] if not p["map_in_range"]]
        tail = (f" Under the map, {len(out)} pair(s) see angles at the target never seen in training"
                f"{' (m = ' + ', '.join(map(str, out[:12])) + (' …' if len(out) > 12 else '') + ')' if out else ''}.")
        if (share := pmap["params"].get("top", 1.0)) < 1.0:  # DPE's key pairs: chosen per layer and head on a model
            tail += (f" top = {share:g}: each head moves only its {kept_pairs(len(report['pairs']), share)} of "
                     f"{len(report['pairs'])} pairs of largest mean |q||k| on the model (chosen per layer and head when "
                     f"a model runs); the distances shown are a moved pair's, the others keep every true distance up "
                     f"to {geom.target_len - 1}.")
    counts = {s: sum(p["status"] == s for p in report["pairs"]) for s in STATUS_STYLE}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    if crit is None:
        return [t, f"Critical pair: none, every pair completes a full turn within L={geom.train_len}. {summary}.{tail}"]
    out_of_range = sum(not p["in_range"] for p in report["pairs"])
    return [t, f"Critical pair: m={crit} (wavelength {g4(report['pairs'][crit - 1]['wavelength'])} > L={geom.train_len}): "
               f"pairs m>={crit} never completed a turn in training. {summary}; "
               f"{out_of_range} pair(s) reach angles at k*L never seen in training.{tail}"]


def digits_json(n: int, geom, sched, rows: dict) -> dict:
    return {"n": n, "method": sched.method, "label": sched.label(), "rotary_dim": geom.rotary_dim, "base": geom.base,
            "beta": geom.beta, "factor": geom.factor, "train_len": geom.train_len,
            "pairs": [dict(zip(rows, vals)) for vals in zip(*(rows[c].tolist() for c in rows))]}


def digits_table(n: int, geom, sched, rows: dict) -> list:
    """`ropecli digits`: position n as beta-base digits, angles, and the mixed base of a schedule."""
    t = table(f"n={n} in base beta={geom.beta:.6g} (= {geom.base:g}^(2/{geom.rotary_dim})) and in the mixed base of "
              f"{sched.label()}, k={geom.factor:g}",
              ["m", "digit", "angle (turns)", "radix beta*lambda_m", "mixed digit", "scaled angle (turns)"], left=())
    for i in range(geom.n_pairs):
        t.add_row(str(rows["m"][i]), *[f"{rows[c][i]:.4f}" for c in ("digit", "turn_fraction", "radix", "scaled_digit",
                                                                     "scaled_turn_fraction")])
    return [t]


def integer_digits_table(n: int, radix: int, width: int, factor: float, rows: list[dict]) -> list:
    t = table(f"n={n} with {width} digits in radix {radix} (trained range 0..{radix**width - 1}), range grown {factor:g}x",
              ["scheme", "digits", f"fits in {width} digits"], left=("scheme", "digits", f"fits in {width} digits"))
    for r in rows:
        t.add_row(r["scheme"], "[" + ", ".join(f"{d:g}" for d in r["digits"]) + "]", "yes" if r["fits"] else "[red]no[/]")
    return [t]


def schedule_json(geom, schedules: list) -> dict:
    return {"rotary_dim": geom.rotary_dim, "base": geom.base, "train_len": geom.train_len, "factor": geom.factor,
            "target_len": geom.target_len,
            "schedules": [{"method": s.method, "label": s.label(), "params": {k: v for k, v in s.params.items() if k != "factors"},
                           "attention_factor": s.attention_factor, "factors": s.factors, "lambdas": s.lambdas}
                          for s in schedules]}


def schedule_csv(geom, schedules: list) -> str:
    """m, then each schedule's factor and lambda per pair, full precision (repr)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["m"] + [f"{s.label()}_{kind}" for s in schedules for kind in ("factor", "lambda")])
    for i in range(geom.n_pairs):
        w.writerow([i + 1] + [repr(float(v)) for s in schedules for v in (s.factors[i], s.lambdas[i])])
    return buf.getvalue()


def schedule_table(geom, schedules: list) -> list:
    t = Table(title=f"Schedules for d={geom.rotary_dim}, base={geom.base:g}, {lengths(geom)}, k={geom.factor:g}")
    t.add_column("m", justify="right")
    for s in schedules:
        t.add_column(f"{s.label()}\nΛ_m", justify="right")
        t.add_column("λ_m", justify="right")
    for i in range(geom.n_pairs):
        t.add_row(str(i + 1), *[g4(v) for s in schedules for v in (s.factors[i], s.lambdas[i])])
    return [t, "attention factor: " + ", ".join(f"{s.label()} {s.attention_factor:.4f}" for s in schedules)]


def methods_rows() -> list[dict]:
    """Every scaling method ("kind": "scaling method"), then every position map ("kind": "position map")."""

    shown = lambda params: {p.name: ("required" if p.default is REQUIRED else p.choices[int(p.default)] if p.choices  # noqa: E731
                                     else p.default) for p in params}
    return [*({"kind": "scaling method", "method": m.name, "summary": m.summary, "params": shown(m.params),
               "aliases": [a for a, t in ALIASES.items() if t == m.name]} for m in REGISTRY.values()),
            *({"kind": "position map", "map": m.name, "summary": m.summary, "params": shown(m.params)} for m in MAPS.values())]


def methods_table(rows: list[dict]) -> list:
    """The scaling methods, then the position maps (`--map`), each with its parameters."""
    out = []
    for kind, title, key in (("scaling method", "Scaling methods (--method)", "method"),
                             ("position map", "Position maps at the attention (--map NAME:K=V,…)", "map")):
        t = table(title, [key, "parameters (default)", "what it does"], left=(key, "parameters (default)", "what it does"))
        for r in (r for r in rows if r["kind"] == kind):
            name = r[key] + (f" ({', '.join(r['aliases'])})" if r.get("aliases") else "")
            t.add_row(name, ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-", r["summary"])
        out.append(t)
    return out
