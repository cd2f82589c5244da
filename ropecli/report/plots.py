"""Figures of schedules (Agg backend, PNG/SVG/PDF by the file's suffix): wavelengths, factors, the
overview, advise's candidate factors; `check_out` and `save` for every figure. Figures of measured
results: `ropecli.report.result_plots`. Imported only where a picture is drawn."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.maps.map_pairs import pair_reach
from ropecli.maps.map_spelling import map_label
from ropecli.maps.position_maps import BoundMap
from ropecli.rope.geometry import critical_pair, wavelength

os.environ["MPLBACKEND"] = "Agg"  # pictures go to files: pyplot draws with Agg when it loads, never in a window
plt = deferred("matplotlib.pyplot")
ticker = deferred("matplotlib.ticker")
mpath = deferred("matplotlib.path")

SUFFIXES = (".png", ".svg", ".pdf")

# One look per method in every panel of a figure (`_method_styles`). A schedule that leaves every frequency as it was
# takes the original's black; the others take tab10's colours in the order the methods are listed, less the colours of
# the reference lines drawn beside them (L red, Ls orange, k*L purple, k and the critical pair gray): a method now
# and then drawn dashed must not pass for a reference line
ORIGINAL_COLOUR = "black"
METHOD_COLOURS = ("tab:blue", "tab:green", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")
# solid first; a method whose curve runs along an earlier one's (or that repeats its colour) takes the next style, so
# the line under it still shows through the gaps
LINESTYLES = ("-", "--", ":", "-.")
# L, k*L, k and the critical pair lie under every curve (a curve drawn at k itself, as PI's Lambda_m is, stays in
# sight) and above the grid (drawn at 1.5 under axes.axisbelow's default 'line')
REFERENCE_ZORDER = 1.8
# the critical pair's label: its gap from the line it names and the clearance kept from every curve and the legend
LABEL_OFFSET_PT = 5
LABEL_CLEARANCE_PT = 3


def check_out(path: str, force: bool | None = None, flag: str = "--out") -> Path:
    """A picture's path, refused in one line: a suffix matplotlib cannot write, a missing folder, and (where `force`
    is False: a command's check before it runs) a file that exists. `force` None: not asked (advise's own folder)."""
    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise RopeCliError(f"{flag} {path}: the file must end in {', '.join(SUFFIXES)}; e.g. {flag} freqs.png")
    if not p.parent.exists():
        raise RopeCliError(f"{flag} {path}: folder '{p.parent}' does not exist; create it or write elsewhere")
    if force is False and p.exists():
        raise RopeCliError(f"{flag} {path} exists; pass --force to overwrite it, or choose another path")
    return p


def save(fig, path: str) -> Path:
    p = check_out(path)
    fig.tight_layout()
    fig.savefig(p, dpi=150, bbox_inches="tight")  # long tick labels stay inside the image
    plt.close(fig)
    return p


def _unscaled(geom, schedule) -> bool:
    """The schedule leaves every frequency as it was (none, native of a plain model): its curves are the original's."""
    return np.array_equal(schedule.scaled_inv_freq(geom), geom.inv_freq())


def _share_a_stretch(a: np.ndarray, b: np.ndarray) -> bool:
    """Two curves over the same pairs agree (to 0.1 %, under a pixel on these log axes) on two neighbouring pairs: a
    segment of one is drawn over the other there. Meeting at one pair only (as the schedules reaching k at the last
    pair do) hides nothing."""
    agree = np.isfinite(a) & np.isfinite(b) & np.isclose(a, b, rtol=1e-3, atol=0)
    return bool(np.any(agree[1:] & agree[:-1]))


def _method_styles(geom, schedules: Sequence, wavelengths: bool = True, radix: bool = False) -> list[dict]:
    """Colour and line style of each schedule (in order), the same in every panel of a figure: panels drawing from
    matplotlib's colour cycle gave a method another colour in a panel that leaves a schedule out (the wavelengths
    name "none" in the original's entry). A schedule whose curve runs along an earlier one's over some stretch takes
    a line style none of those uses, so each stays in sight. The figure's panels say which curves are drawn:
    `wavelengths`, the original's (as Lambda_m = 1; without it, only where a schedule leaves every frequency as it
    was); `radix`, lambda_m too, where curves coincide whose Lambda_m do not (mixed b=0's and none's are 1 from pair 2)."""
    original = dict(color=ORIGINAL_COLOUR, ls=LINESTYLES[0])
    unscaled = np.ones(geom.n_pairs)
    original_drawn = wavelengths or any(_unscaled(geom, s) for s in schedules)
    drawn = [(unscaled, unscaled, original)] if original_drawn else []  # (Lambda_m, lambda_m, style) of each curve
    styles, colours = [], iter(METHOD_COLOURS * len(schedules))
    for s in schedules:
        if _unscaled(geom, s):
            styles.append(original)  # drawn once, as the original
            continue
        colour = next(colours)
        taken = {style["ls"] for factors, lambdas, style in drawn
                 if style["color"] == colour or _share_a_stretch(s.factors, factors)
                 or (radix and _share_a_stretch(s.lambdas, lambdas))}
        free = [ls for ls in LINESTYLES if ls not in taken]
        style = dict(color=colour, ls=free[0] if free else LINESTYLES[len(drawn) % len(LINESTYLES)])
        styles.append(style)
        drawn.append((s.factors, s.lambdas, style))
    return styles


def _wavelengths(ax, geom, schedules: Sequence, styles: Sequence[dict] | None = None) -> None:
    """Wavelength per pair (log axis), before and after each schedule, with the L and k*L lines."""
    m = geom.pair_index()
    styles = styles or _method_styles(geom, schedules)
    # a schedule that leaves every frequency as it was (none, native of a plain model) would be drawn exactly over
    # the original curve and hide it: it is named in the original's label instead
    same = [s.label() for s in schedules if _unscaled(geom, s)]
    ax.plot(m, wavelength(geom.inv_freq()), color=ORIGINAL_COLOUR, lw=2,  # p-RoPE's zero pairs: inf, not drawn
            label=" = ".join(["original", *same]))
    for s, style in zip(schedules, styles):
        if s.label() not in same:
            ax.plot(m, wavelength(s.scaled_inv_freq(geom)), lw=1.6, label=s.label(), **style)
    _zero_pairs(ax, geom)
    ax.axhline(geom.train_len, color="tab:red", ls="--", lw=1, zorder=REFERENCE_ZORDER,
               label=f"L{'0' if geom.shipped else ''} = {geom.train_len}")
    if geom.shipped is not None:
        ax.axhline(geom.shipped_len, color="tab:orange", ls="--", lw=1, zorder=REFERENCE_ZORDER,
                   label=f"Ls = {geom.shipped_len}")
    ax.axhline(geom.target_len, color="tab:purple", ls=":", lw=1.2, zorder=REFERENCE_ZORDER,
               label=f"k·L = {geom.target_len}")
    ax.set_yscale("log")
    ax.set_xlabel("frequency pair m (1 = fastest)")
    ax.set_ylabel("wavelength (tokens per full turn, log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)


def _zero_pairs(ax, geom) -> None:
    """Shade p-RoPE's pairs at frequency 0 (Gemma 4's global layers): no position reaches them."""
    if geom.rotating_pairs is not None:
        ax.axvspan(geom.rotating_pairs + 0.5, geom.n_pairs + 0.5, color="0.9", zorder=0, label="frequency 0 (p-RoPE)")


def _factors(ax, geom, schedules: Sequence, radix: bool = False, styles: Sequence[dict] | None = None) -> None:
    """Lambda_m (or the radix multipliers lambda_m) per pair on a log2 axis, one line per schedule; those that leave
    every frequency as it was share one line, as in the wavelengths (two lines there would lie one over the other)."""
    m = geom.pair_index()
    styles = styles or _method_styles(geom, schedules, wavelengths=False, radix=radix)
    _zero_pairs(ax, geom)
    same = [s.label() for s in schedules if _unscaled(geom, s)]
    for s, style in zip(schedules, styles):
        if s.label() in same[1:]:
            continue
        ax.plot(m, s.lambdas if radix else s.factors, lw=1.6, label=" = ".join(same) if s.label() in same else s.label(),
                **style)
    if radix:
        ax.set_ylabel("radix multiplier λ_m = Λ_m / Λ_{m-1} (log₂ scale)")
        ax.set_title("Mixed-base radix multiplier λ_m")
    else:
        ax.axhline(geom.factor, color="gray", ls="--", lw=1, zorder=REFERENCE_ZORDER, label=f"k = {geom.factor:g}")
        ax.set_ylabel("factor Λ_m (θ'_m = θ_m / Λ_m, log₂ scale)")
        ax.set_title("Per-pair factor Λ_m")
    ax.set_xlabel("frequency pair m")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _geometry_title(geom) -> str:
    lengths = (f"L={geom.train_len}" if geom.shipped is None else
               f"L0={geom.train_len}, Ls={geom.shipped_len} (ships {geom.shipped.label})")
    return f"d={geom.rotary_dim}, base={geom.base:g}, {lengths}, k={geom.factor:g}"


def plot_wavelengths(geom, schedules: Sequence, path: str, position_map: BoundMap | None = None) -> Path:
    """Wavelength per pair on a log axis, before and after each schedule, with the L and k*L lines; under a position
    map, the farthest rotation distance it leaves each pair at the target (tokens too), its pairs whose angle there
    training never showed crossed out."""
    fig, ax = plt.subplots(figsize=(8, 5))
    _wavelengths(ax, geom, schedules)
    title = f"RoPE wavelengths: {_geometry_title(geom)}"
    if position_map:
        _map_distances(ax, geom, schedules[0], position_map)
        title += f"\nunder {map_label(position_map)}"
    ax.set_title(title, fontsize=10)
    return save(fig, path)


def _map_distances(ax, geom, schedule, position_map) -> None:
    """The map's farthest rotation distance per pair at the target (`map_pairs.pair_reach`), a step per group."""
    inv = geom.inv_freq()
    rows = pair_reach(position_map, geom.target_len, schedule.scaled_inv_freq(geom),
                      np.minimum(geom.train_len * inv, 2 * np.pi))
    m = geom.pair_index()
    ax.step(m, [r["map_distance"] for r in rows], where="mid", color="tab:green", lw=2,
            label=f"farthest distance under {position_map.name}")
    out = [(mi, r["map_distance"]) for mi, r in zip(m, rows) if not r["map_in_range"]]
    if out:
        ax.plot(*zip(*out), "x", color="tab:red", ms=7, label="angle there never seen in training")
    ax.legend(loc="upper left", fontsize=8)


def plot_factors(geom, schedules: Sequence, path: str) -> Path:
    """Lambda_m curves (log axis) and the radix multipliers lambda_m, one line per schedule."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = _method_styles(geom, schedules, wavelengths=False, radix=True)
    _factors(left, geom, schedules, styles=styles)
    _factors(right, geom, schedules, radix=True, styles=styles)
    fig.suptitle(f"Schedules: {_geometry_title(geom)}")
    return save(fig, path)


def plot_overview(geom, schedules: Sequence, path: str) -> Path:
    """`ropecli plot`: wavelengths before/after (left) and Lambda_m (right) of the schedules, with the
    critical pair (the first that never completes a turn within L) marked on both; a third panel with the model's
    position temperature over positions up to the target, where it ships one (Llama 4, Mistral 4)."""
    temperature = geom.temperature
    fig, axes = plt.subplots(1, 3 if temperature is not None else 2, figsize=(19 if temperature is not None else 13, 5))
    left, right = axes[0], axes[1]
    if temperature is not None:
        _temperature(axes[2], geom, temperature)
    styles = _method_styles(geom, schedules)
    _wavelengths(left, geom, schedules, styles)
    left.set_title("Wavelength per pair, before and after")
    _factors(right, geom, schedules, styles=styles)
    crit = critical_pair(geom)
    if crit is not None:
        for ax in (left, right):
            ax.axvline(crit, color="gray", ls="-.", lw=1, zorder=REFERENCE_ZORDER)
    fig.suptitle(f"RoPE scaling overview: {_geometry_title(geom)} (target {geom.target_len})")
    if crit is not None:
        fig.tight_layout()  # save's own layout, reached here first: the label's place is chosen where it will be drawn
        _label_clear_of_lines(right, f"critical pair m = {crit}", crit)
    return save(fig, path)


def _display_runs(line) -> list:
    """A line's drawn pieces as paths in display coordinates: its runs of finite points (a gap where a point is not
    drawn, such as p-RoPE's infinite wavelengths)."""
    xy = line.get_transform().transform(line.get_xydata())
    finite = np.isfinite(xy).all(axis=1)
    edges = np.flatnonzero(np.diff(np.concatenate(([0], finite.astype(int), [0]))))
    return [mpath.Path(xy[a:b]) for a, b in zip(edges[::2], edges[1::2])]


def _label_clear_of_lines(ax, text: str, x: float) -> None:
    """Write `text` beside the vertical line at data x, at the first height (from the top down, right of the line
    then left) where its box, with a margin, crosses no line of the panel, leaves the legend free and stays inside the
    axes: a label at a fixed offset from the line lay on whatever curve passed there. Extents are display
    coordinates, so the figure's final layout must be in place. Where no place is clear, the one crossing fewest; the
    label's white box keeps a line there from running through its letters."""
    fig = ax.figure
    fig.canvas.draw()  # places the legend ('best') and makes the extents below those of the saved picture
    renderer = fig.canvas.get_renderer()
    runs = [run for line in ax.get_lines() for run in _display_runs(line)]
    legend = ax.get_legend()
    legend_box = legend.get_window_extent(renderer) if legend is not None else None
    inside = ax.get_window_extent(renderer)
    clearance = renderer.points_to_pixels(LABEL_CLEARANCE_PT)
    label = ax.annotate(text, (x, 0.5), xycoords=ax.get_xaxis_transform(), textcoords="offset points",
                        xytext=(LABEL_OFFSET_PT, 0), va="center", fontsize=8, color="dimgray",
                        bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.85))

    def crossings(height: float, side: int) -> int:
        label.xy = (x, height)
        label.set_position((side * LABEL_OFFSET_PT, 0))
        label.set_horizontalalignment("left" if side > 0 else "right")
        box = label.get_window_extent(renderer).padded(clearance)
        return (sum(run.intersects_bbox(box, filled=False) for run in runs)
                + int(legend_box is not None and legend_box.overlaps(box))
                + int(not (inside.contains(box.x0, box.y0) and inside.contains(box.x1, box.y1))))

    places = [(height, side) for height in np.linspace(0.95, 0.05, 19) for side in (1, -1)]
    fewest = None
    for height, side in places:
        n = crossings(height, side)
        if n == 0:
            return
        if fewest is None or n < fewest[0]:
            fewest = (n, height, side)
    crossings(*fewest[1:])


def _temperature(ax, geom, temperature) -> None:
    """The query scale s(n) the model applies at each position up to the target, with L0 (Ls) and k*L marked."""
    n = np.linspace(0, geom.target_len - 1, 2000)
    # the model's own scale, in the original's black: a method's colour here would pass for that method's
    ax.plot(n + 1, temperature.scale(n), color=ORIGINAL_COLOUR, lw=1.6)
    ax.axvline(geom.train_len, color="tab:red", ls="--", lw=1, zorder=REFERENCE_ZORDER, label=f"L0 = {geom.train_len}")
    if geom.shipped is not None:
        ax.axvline(geom.shipped_len, color="tab:orange", ls="--", lw=1, zorder=REFERENCE_ZORDER,
                   label=f"Ls = {geom.shipped_len}")
    ax.set_title(f"Position temperature {temperature.label}", fontsize=9)
    ax.set_xlabel("query position n (tokens)")
    ax.set_ylabel(f"query scale s(n), on {temperature.layers}")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)


def plot_candidate_factors(geom, schedules: list, path: str) -> Path:
    """Lambda_m of every candidate, the winner drawn thick: (name, Schedule, is_winner) triples."""
    fig, ax = plt.subplots(figsize=(8, 5))
    m = geom.pair_index()
    for name, s, winner in schedules:
        ax.plot(m, s.factors, lw=3.2 if winner else 1.1, alpha=1.0 if winner else 0.7,
                label=f"{name} (winner)" if winner else name, zorder=3 if winner else 2)
    ax.axhline(geom.factor, color="gray", ls="--", lw=1, label=f"k = {geom.factor:g}")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("frequency pair m")
    ax.set_ylabel("factor Λ_m (θ'_m = θ_m / Λ_m)")
    ax.set_title(f"Per-pair factors of the candidates: {_geometry_title(geom)}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, path)
