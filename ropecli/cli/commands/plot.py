"""`ropecli plot` (an overview), `ropecli plot freqs` and `ropecli plot schedule`: pictures of the
analytical commands, for a given geometry or the one in `--model`'s config."""

from __future__ import annotations

import typer

from ropecli.cli.common import OneLineErrorsGroup, geometry_of, handle_errors, schedules_of
from ropecli.cli.console import console
from ropecli.cli.groups import GeometryOptions, ScheduleOptions, with_option_groups
from ropecli.cli.options import DEFAULT_METHOD, OVERVIEW_METHODS, PLOT_SCHEDULE_METHODS, ForceOpt, MapOpt, OutOpt
from ropecli.maps.map_spelling import one_map
from ropecli.report.plots import check_out, plot_factors, plot_overview, plot_wavelengths

app = typer.Typer(help="Draw RoPE pictures to PNG, SVG or PDF; with no subcommand, an overview.", cls=OneLineErrorsGroup,
                  invoke_without_command=True)


def _draw(draw, out: str, geometry: GeometryOptions, schedule: ScheduleOptions, default: str, force: bool, **kw) -> None:
    check_out(out, force)
    geom, _ = geometry_of(geometry)
    console().print(f"wrote {draw(geom, schedules_of(geom, schedule, default), out, **kw)}")


@app.callback()
@handle_errors
@with_option_groups
def overview(ctx: typer.Context, geometry: GeometryOptions, schedule: ScheduleOptions, out: OutOpt = None, force: ForceOpt = False):
    """Without a subcommand: wavelengths before and after, and Lambda_m, of none, PI, NTK-fixed and
    mixed on one figure (default ropecli.png).

    Examples: ropecli plot
              ropecli plot --model meta-llama/Llama-2-7b-hf --k 8 --out llama.png
    """
    if ctx.invoked_subcommand is not None:
        return

    _draw(plot_overview, out or "ropecli.png", geometry, schedule, OVERVIEW_METHODS, force)


@app.command("freqs")
@handle_errors
@with_option_groups
def plot_freqs(geometry: GeometryOptions, schedule: ScheduleOptions, position_map: MapOpt = None, out: OutOpt = None, force: ForceOpt = False):
    """Wavelength per pair (log axis) before and after the schedules, with the L and k*L lines (and a --map's reach).

    Example: ropecli plot freqs --d 128 --k 8 --method pi,ntk-fixed,mixed --out freqs.png
    """
    _draw(plot_wavelengths, out or "freqs.png", geometry, schedule, DEFAULT_METHOD, force, position_map=one_map(position_map))


@app.command("schedule")
@handle_errors
@with_option_groups
def plot_schedule(geometry: GeometryOptions, schedule: ScheduleOptions, out: OutOpt = None, force: ForceOpt = False):
    """Lambda_m and lambda_m of several methods, or of several b, overlaid.

    Examples: ropecli plot schedule --method pi,ntk-old,ntk-fixed,mixed,yarn --out schedule.png
              ropecli plot schedule --method mixed --b 0 --b 0.25 --b 0.625 --b 1 --out b.svg
    """
    _draw(plot_factors, out or "schedule.png", geometry, schedule, PLOT_SCHEDULE_METHODS, force)
