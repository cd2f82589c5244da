"""`ropecli plot freqs` and `ropecli plot schedule`: pictures of the analytical commands."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ropecli.cli_common import (BaseOpt, BListOpt, FactorOpt, FactorsOpt, HeadDimOpt, ParamOpt, TargetLenOpt, TrainLenOpt,
                                build_schedules, console, handle_errors, make_geometry, parse_params, split_methods)

app = typer.Typer(help="Draw RoPE pictures to PNG, SVG or PDF.", no_args_is_help=True)

MethodsOpt = Annotated[Optional[list[str]], typer.Option("--method", "-m", help="Method(s); repeat or comma-separate to overlay.")]
OutOpt = Annotated[str, typer.Option("--out", "-o", help="Output file (.png, .svg or .pdf).")]


def _schedules(head_dim, base, train_len, k, target_len, method, b, factors, param, default):
    geom = make_geometry(head_dim, base, train_len, k, target_len)
    return geom, build_schedules(geom, split_methods(method, default), b, parse_params(param), factors)


@app.command("freqs")
@handle_errors
def plot_freqs(
    out: OutOpt = "freqs.png",
    method: MethodsOpt = None,
    head_dim: HeadDimOpt = 128,
    k: FactorOpt = None,
    b: BListOpt = None,
    base: BaseOpt = 10000.0,
    train_len: TrainLenOpt = 4096,
    target_len: TargetLenOpt = None,
    factors: FactorsOpt = None,
    param: ParamOpt = None,
):
    """Wavelength per pair (log axis) before and after the schedules, with the L and k*L lines.

    Example: ropecli plot freqs --d 128 --k 8 --method pi,ntk-fixed,mixed --out freqs.png
    """
    from ropecli.plots import check_out, plot_wavelengths

    check_out(out)
    geom, schedules = _schedules(head_dim, base, train_len, k, target_len, method, b, factors, param, "mixed")
    console().print(f"wrote {plot_wavelengths(geom, schedules, out)}")


@app.command("schedule")
@handle_errors
def plot_schedule(
    out: OutOpt = "schedule.png",
    method: MethodsOpt = None,
    head_dim: HeadDimOpt = 128,
    k: FactorOpt = None,
    b: BListOpt = None,
    base: BaseOpt = 10000.0,
    train_len: TrainLenOpt = 4096,
    target_len: TargetLenOpt = None,
    factors: FactorsOpt = None,
    param: ParamOpt = None,
):
    """Lambda_m and lambda_m of several methods, or of several b, overlaid.

    Examples: ropecli plot schedule --method pi,ntk-old,ntk-fixed,mixed,yarn --out schedule.png
              ropecli plot schedule --method mixed --b 0 --b 0.25 --b 0.625 --b 1 --out b.svg
    """
    from ropecli.plots import check_out, plot_factors

    check_out(out)
    geom, schedules = _schedules(head_dim, base, train_len, k, target_len, method, b, factors, param, "pi,ntk-old,ntk-fixed,mixed,yarn")
    console().print(f"wrote {plot_factors(geom, schedules, out)}")
