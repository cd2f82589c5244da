"""`ropecli freqs`, `ropecli digits`, `ropecli schedule`: the analytical commands (numpy only)."""

from __future__ import annotations

import csv
import io
from typing import Annotated, Optional

import typer

from ropecli.cli.common import emit_json, g4, geometry_of, handle_errors, schedules_of
from ropecli.cli.console import console
from ropecli.errors import RopeCliError
from ropecli.cli.groups import GeometryOptions, ScheduleOptions, with_option_groups
from ropecli.cli.options import DEFAULT_METHOD, OUTPUT, JsonOpt, OutputFormat


def _one_schedule(geom, opts: ScheduleOptions):
    schedules = schedules_of(geom, opts, default=DEFAULT_METHOD)
    if len(schedules) != 1:
        raise RopeCliError("this command shows one method at a time (one --method, at most one --b); "
                           "use `ropecli schedule` to compare several")
    return schedules[0]


@handle_errors
@with_option_groups
def freqs(geometry: GeometryOptions, schedule: ScheduleOptions, as_json: JsonOpt = False):
    """Per pair: frequency, factor, wavelength and turns before and after a schedule.

    Examples: ropecli freqs --d 128 --k 8 --method mixed --b 0.625
              ropecli freqs --model meta-llama/Llama-2-7b-hf --k 8
    """
    from ropecli.rope.freqs import frequency_report

    geom, rope = geometry_of(geometry)
    report = frequency_report(geom, _one_schedule(geom, schedule))
    if as_json:
        return emit_json(report)
    from rich.table import Table

    t = Table(title=f"{report['label']}: d={geom.rotary_dim}, base={geom.base:g}, L={geom.train_len}, k={geom.factor:g} "
                    f"(target {geom.target_len}), attention factor {report['attention_factor']:.4f}")
    for col in ["m", "inv_freq", "factor Λ", "scaled inv_freq", "wavelength", "scaled wavelength",
                "turns in L", "turns in kL", "status", "in range"]:
        t.add_column(col, justify="right" if col not in ("status", "in range") else "left")
    style = {"extrapolated": "yellow", "interpolated": "cyan", "in between": "green", "unchanged": ""}
    for p in report["pairs"]:
        t.add_row(str(p["m"]), g4(p["inv_freq"]), g4(p["factor"]), g4(p["scaled_inv_freq"]), g4(p["wavelength"]),
                  g4(p["scaled_wavelength"]), g4(p["turns_in_train_len"]), g4(p["turns_in_target_len"]),
                  f"[{style[p['status']]}]{p['status']}[/]" if style[p["status"]] else p["status"],
                  "yes" if p["in_range"] else "[red]no[/]")
    out = console()
    out.print(t)
    crit = report["critical_pair"]
    counts = {s: sum(p["status"] == s for p in report["pairs"]) for s in style}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    out_of_range = sum(not p["in_range"] for p in report["pairs"])
    if crit is None:
        out.print(f"Critical pair: none, every pair completes a full turn within L={geom.train_len}. {summary}.")
    else:
        out.print(f"Critical pair: m={crit} (wavelength {g4(report['pairs'][crit - 1]['wavelength'])} > L={geom.train_len}): "
                  f"pairs m>={crit} never completed a turn in training. {summary}; "
                  f"{out_of_range} pair(s) reach angles at k*L never seen in training.")


INTEGER = "Integer illustration"


@handle_errors
@with_option_groups
def digits(
    geometry: GeometryOptions,
    schedule: ScheduleOptions,
    n: Annotated[int, typer.Option("--n", min=0, help="Position (an integer >= 0).")] = 759,
    radix: Annotated[Optional[int], typer.Option("--radix", min=2, rich_help_panel=INTEGER,
                                                 help="Integer illustration instead: the radix of the trained representation.")] = None,
    width: Annotated[int, typer.Option("--width", min=1, rich_help_panel=INTEGER, help="Integer illustration: number of digits.")] = 3,
    also_radix: Annotated[Optional[list[int]], typer.Option("--also-radix", min=2, rich_help_panel=INTEGER,
                                                            help="Integer illustration: extra radices to show (repeatable).")] = None,
    as_json: JsonOpt = False,
):
    """The beta-base analogy: position n as digits, RoPE angles, and the mixed base of a method.

    Examples: ropecli digits --n 759 --d 128 --k 8 --method mixed
              ropecli digits --n 1749 --radix 10 --width 3 --k 2 --also-radix 16
    """
    if radix is not None:
        return _integer_digits(n, radix, width, geometry.k, also_radix or [], as_json)
    from ropecli.rope.digits import rope_digits

    geom, rope = geometry_of(geometry)
    sched = _one_schedule(geom, schedule)
    rows = rope_digits(n, geom, sched)
    if as_json:
        return emit_json({"n": n, "method": sched.method, "label": sched.label(), "rotary_dim": geom.rotary_dim,
                          "base": geom.base, "beta": geom.beta, "factor": geom.factor, "train_len": geom.train_len,
                          "pairs": [dict(zip(rows, vals)) for vals in zip(*(rows[c].tolist() for c in rows))]})
    from rich.table import Table

    t = Table(title=f"n={n} in base beta={geom.beta:.6g} (= {geom.base:g}^(2/{geom.rotary_dim})) and in the mixed base of {sched.label()}, k={geom.factor:g}")
    for col in ["m", "digit", "angle (turns)", "radix beta*lambda_m", "mixed digit", "scaled angle (turns)"]:
        t.add_column(col, justify="right")
    for i in range(geom.n_pairs):
        t.add_row(str(rows["m"][i]), f"{rows['digit'][i]:.4f}", f"{rows['turn_fraction'][i]:.4f}", f"{rows['radix'][i]:.4f}",
                  f"{rows['scaled_digit'][i]:.4f}", f"{rows['scaled_turn_fraction'][i]:.4f}")
    console().print(t)


def _integer_digits(n: int, radix: int, width: int, k: float | None, extra: list[int], as_json: bool):
    from ropecli.rope.digits import integer_illustration

    factor = 2.0 if k is None else k  # the articles' example doubles the range
    rows = integer_illustration(n, radix, width, factor, extra)
    if as_json:
        return emit_json({"n": n, "radix": radix, "width": width, "factor": factor, "schemes": rows})
    from rich.table import Table

    t = Table(title=f"n={n} with {width} digits in radix {radix} (trained range 0..{radix**width - 1}), range grown {factor:g}x")
    for col in ["scheme", "digits", f"fits in {width} digits"]:
        t.add_column(col)
    for r in rows:
        t.add_row(r["scheme"], "[" + ", ".join(f"{d:g}" for d in r["digits"]) + "]", "yes" if r["fits"] else "[red]no[/]")
    console().print(t)


@handle_errors
@with_option_groups
def schedule(
    geometry: GeometryOptions,
    schedule: ScheduleOptions,
    fmt: Annotated[OutputFormat, typer.Option("--format", rich_help_panel=OUTPUT,
                                              help="Output: table, json, csv, or hf (transformers rope_parameters block).")] = OutputFormat.table,
    as_json: JsonOpt = False,
    as_csv: Annotated[bool, typer.Option("--csv", rich_help_panel=OUTPUT, help="Same as --format csv.")] = False,
):
    """Per-pair factors Lambda_m and radix multipliers lambda_m of one or more methods.

    Examples: ropecli schedule --d 128 --k 8 --method mixed --b 0.625
              ropecli schedule --method pi,ntk-fixed,mixed --csv > factors.csv
              ropecli schedule --method mixed --b 0.5 --format hf > rope.json
    """
    if as_json and as_csv:
        raise RopeCliError("--json and --csv both choose the output; pass only one")
    fmt = "json" if as_json else "csv" if as_csv else OutputFormat(fmt).value
    geom, rope = geometry_of(geometry)
    schedules = schedules_of(geom, schedule, default=DEFAULT_METHOD)
    if fmt == "hf":
        if len(schedules) != 1:
            raise RopeCliError("--format hf writes one schedule; pass a single --method (and at most one --b)")
        from ropecli.rope.factor_files import rope_parameters_block

        return emit_json(rope_parameters_block(geom, schedules[0], rope.partial_rotary_factor if rope else 1.0))
    if fmt == "json":
        return emit_json({
            "rotary_dim": geom.rotary_dim, "base": geom.base, "train_len": geom.train_len, "factor": geom.factor,
            "target_len": geom.target_len,
            "schedules": [{"method": s.method, "label": s.label(), "params": {k: v for k, v in s.params.items() if k != "factors"},
                           "attention_factor": s.attention_factor, "factors": s.factors, "lambdas": s.lambdas} for s in schedules],
        })
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["m"] + [f"{s.label()}_{kind}" for s in schedules for kind in ("factor", "lambda")])
        for i in range(geom.n_pairs):
            w.writerow([i + 1] + [repr(float(v)) for s in schedules for v in (s.factors[i], s.lambdas[i])])
        print(buf.getvalue(), end="")
        return
    from rich.table import Table

    t = Table(title=f"Schedules for d={geom.rotary_dim}, base={geom.base:g}, L={geom.train_len}, k={geom.factor:g}")
    t.add_column("m", justify="right")
    for s in schedules:
        t.add_column(f"{s.label()}\nΛ_m", justify="right")
        t.add_column("λ_m", justify="right")
    for i in range(geom.n_pairs):
        t.add_row(str(i + 1), *[g4(v) for s in schedules for v in (s.factors[i], s.lambdas[i])])
    out = console()
    out.print(t)
    out.print("attention factor: " + ", ".join(f"{s.label()} {s.attention_factor:.4f}" for s in schedules))


@handle_errors
def methods(as_json: JsonOpt = False):
    """List the scaling methods and their parameters.

    Example: ropecli methods
    """
    from ropecli.rope.methods import ALIASES, REGISTRY, REQUIRED

    rows = [{"method": m.name, "summary": m.summary,
             "params": {p.name: ("required" if p.default is REQUIRED else p.default) for p in m.params},
             "aliases": [a for a, t in ALIASES.items() if t == m.name]} for m in REGISTRY.values()]
    if as_json:
        return emit_json(rows)
    from rich.table import Table

    t = Table(title="Scaling methods")
    for col in ["method", "parameters (default)", "what it does"]:
        t.add_column(col)
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-"
        name = r["method"] + (f" ({', '.join(r['aliases'])})" if r["aliases"] else "")
        t.add_row(name, params, r["summary"])
    console().print(t)
