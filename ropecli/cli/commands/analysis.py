"""`ropecli freqs`, `ropecli digits`, `ropecli schedule`: the analytical commands (numpy only)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ropecli.cli.common import emit_json, geometry_of, handle_errors, schedules_of
from ropecli.cli.console import show
from ropecli.cli.groups import GeometryOptions, ScheduleOptions, with_option_groups
from ropecli.cli.options import DEFAULT_METHOD, OUTPUT, ConsistentOpt, JsonOpt, MapOpt, OutputFormat
from ropecli.errors import RopeCliError
from ropecli.maps.map_pairs import with_reach
from ropecli.maps.map_spelling import one_map
from ropecli.report.analysis_tables import (
    digits_json,
    digits_table,
    freqs_table,
    integer_digits_table,
    methods_rows,
    methods_table,
    schedule_csv,
    schedule_json,
    schedule_table,
)
from ropecli.rope.digits import integer_illustration, rope_digits
from ropecli.rope.factor_files import rope_parameters_block
from ropecli.rope.freqs import frequency_report


def _one_schedule(geom, opts: ScheduleOptions):
    schedules = schedules_of(geom, opts, default=DEFAULT_METHOD)
    if len(schedules) != 1:
        raise RopeCliError("this command shows one method at a time (one --method, at most one --b); "
                           "use `ropecli schedule` to compare several")
    return schedules[0]


@handle_errors
@with_option_groups
def freqs(geometry: GeometryOptions, schedule: ScheduleOptions, position_map: MapOpt = None, as_json: JsonOpt = False):
    """Per pair: frequency, factor, wavelength and turns before and after a schedule (and a --map's reach per pair).

    Examples: ropecli freqs --d 128 --k 8 --method mixed --b 0.625
              ropecli freqs --model meta-llama/Llama-2-7b-hf --k 8
    """
    geom, rope = geometry_of(geometry)
    bound = one_map(position_map)  # LaMPE's fit = auto with no model: the scaled fit at this geometry's L
    bound = rope.on_model(bound)[0] if rope is not None else bound.on_model("", geom.base, geom.train_len, None)[0] \
        if bound else bound
    sched = _one_schedule(geom, schedule)
    report = with_reach(frequency_report(geom, sched), geom, sched, bound)
    return emit_json(report) if as_json else show(freqs_table(report, geom))


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
        factor = 2.0 if geometry.k is None else geometry.k  # the articles' example doubles the range
        rows = integer_illustration(n, radix, width, factor, also_radix or [])
        if as_json:
            return emit_json({"n": n, "radix": radix, "width": width, "factor": factor, "schemes": rows})
        return show(integer_digits_table(n, radix, width, factor, rows))
    geom, rope = geometry_of(geometry)
    sched = _one_schedule(geom, schedule)
    rows = rope_digits(n, geom, sched)
    return emit_json(digits_json(n, geom, sched, rows)) if as_json else show(digits_table(n, geom, sched, rows))


@handle_errors
@with_option_groups
def schedule(
    geometry: GeometryOptions,
    schedule: ScheduleOptions,
    fmt: Annotated[OutputFormat, typer.Option("--format", rich_help_panel=OUTPUT,
                                              help="Output: table, json, csv, or hf (transformers rope_parameters block).")] = OutputFormat.table,
    as_json: JsonOpt = False,
    as_csv: Annotated[bool, typer.Option("--csv", rich_help_panel=OUTPUT, help="Same as --format csv.")] = False,
    consistent: ConsistentOpt = True,
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

        return emit_json(rope_parameters_block(geom, schedules[0], rope.partial_rotary_factor if rope else 1.0,
                                               consistent=consistent))
    if not consistent:
        raise RopeCliError("--switching shapes the --format hf block only; add --format hf, or leave --switching out")
    if fmt == "csv":
        return print(schedule_csv(geom, schedules), end="")
    return emit_json(schedule_json(geom, schedules)) if fmt == "json" else show(schedule_table(geom, schedules))


@handle_errors
def methods(as_json: JsonOpt = False):
    """List the scaling methods and the position maps, with their parameters.

    Example: ropecli methods
    """
    rows = methods_rows()
    return emit_json(rows) if as_json else show(methods_table(rows))
