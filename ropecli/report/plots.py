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

SUFFIXES = (".png", ".svg", ".pdf")


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


def _wavelengths(ax, geom, schedules: Sequence) -> None:
    """Wavelength per pair (log axis), before and after each schedule, with the L and k*L lines."""
    m = geom.pair_index()
    # a schedule that leaves every frequency as it was (none, native of a plain model) would be drawn exactly over
    # the original curve and hide it: it is named in the original's label instead
    same = [s.label() for s in schedules if np.array_equal(s.scaled_inv_freq(geom), geom.inv_freq())]
    ax.plot(m, wavelength(geom.inv_freq()), color="black", lw=2,  # p-RoPE's zero pairs: inf, not drawn
            label=" = ".join(["original", *same]))
    for s in schedules:
        if s.label() not in same:
            ax.plot(m, wavelength(s.scaled_inv_freq(geom)), lw=1.6, label=s.label())
    _zero_pairs(ax, geom)
    ax.axhline(geom.train_len, color="tab:red", ls="--", lw=1, label=f"L{'0' if geom.shipped else ''} = {geom.train_len}")
    if geom.shipped is not None:
        ax.axhline(geom.shipped_len, color="tab:orange", ls="--", lw=1, label=f"Ls = {geom.shipped_len}")
    ax.axhline(geom.target_len, color="tab:purple", ls=":", lw=1.2, label=f"k·L = {geom.target_len}")
    ax.set_yscale("log")
    ax.set_xlabel("frequency pair m (1 = fastest)")
    ax.set_ylabel("wavelength (tokens per full turn, log scale)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)


def _zero_pairs(ax, geom) -> None:
    """Shade p-RoPE's pairs at frequency 0 (Gemma 4's global layers): no position reaches them."""
    if geom.rotating_pairs is not None:
        ax.axvspan(geom.rotating_pairs + 0.5, geom.n_pairs + 0.5, color="0.9", zorder=0, label="frequency 0 (p-RoPE)")


def _factors(ax, geom, schedules: Sequence, radix: bool = False) -> None:
    """Lambda_m (or the radix multipliers lambda_m) per pair on a log2 axis, one line per schedule."""
    m = geom.pair_index()
    _zero_pairs(ax, geom)
    for s in schedules:
        ax.plot(m, s.lambdas if radix else s.factors, lw=1.6, label=s.label())
    if radix:
        ax.set_ylabel("radix multiplier λ_m = Λ_m / Λ_{m-1} (log₂ scale)")
        ax.set_title("Mixed-base radix multiplier λ_m")
    else:
        ax.axhline(geom.factor, color="gray", ls="--", lw=1, label=f"k = {geom.factor:g}")
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
    _factors(left, geom, schedules)
    _factors(right, geom, schedules, radix=True)
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
    _wavelengths(left, geom, schedules)
    left.set_title("Wavelength per pair, before and after")
    _factors(right, geom, schedules)
    crit = critical_pair(geom)
    if crit is not None:
        for ax in (left, right):
            ax.axvline(crit, color="gray", ls="-.", lw=1)
        right.annotate(f"critical pair m = {crit}", (crit, geom.factor), textcoords="offset points", xytext=(4, -14),
                       fontsize=8, color="dimgray")
    fig.suptitle(f"RoPE scaling overview: {_geometry_title(geom)} (target {geom.target_len})")
    return save(fig, path)


def _temperature(ax, geom, temperature) -> None:
    """The query scale s(n) the model applies at each position up to the target, with L0 (Ls) and k*L marked."""
    n = np.linspace(0, geom.target_len - 1, 2000)
    ax.plot(n + 1, temperature.scale(n), color="tab:green", lw=1.6)
    ax.axvline(geom.train_len, color="tab:red", ls="--", lw=1, label=f"L0 = {geom.train_len}")
    if geom.shipped is not None:
        ax.axvline(geom.shipped_len, color="tab:orange", ls="--", lw=1, label=f"Ls = {geom.shipped_len}")
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
