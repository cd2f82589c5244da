"""The beta-base analogy of Su's "Transformer Upgrade Road" 10 and 11: RoPE's angle of pair m is n / beta^(m-1) taken mod 2*pi,
just as the m-th digit of n in base beta is floor(n / beta^(m-1)) mod beta.

A scaled schedule turns the base into a mixed base with radices beta*lambda_m, whose m-th digit is
floor(n / (beta^(m-1) * Lambda_{m-1})) mod (beta*lambda_m).
"""

from __future__ import annotations

import math

import numpy as np

from ropecli.rope.geometry import TWO_PI, Geometry
from ropecli.rope.schedule import Schedule


def rope_digits(n: int, geom: Geometry, schedule: Schedule) -> dict[str, np.ndarray]:
    """Per pair m (shape (d/2,) each): beta-base digit, angle as a fraction of a turn, mixed-base
    radix, digit and scaled angle fraction."""
    beta = geom.beta
    m = geom.pair_index()
    place = beta ** (m - 1)  # beta^(m-1)
    prev_factor = np.concatenate(([1.0], schedule.factors[:-1]))  # Lambda_{m-1}, Lambda_0 = 1
    radix = beta * schedule.lambdas  # beta * lambda_m
    return {
        "m": m.astype(int),
        "digit": np.mod(np.floor(n / place), beta),
        "turn_fraction": np.mod(n * geom.inv_freq() / TWO_PI, 1.0),
        "radix": radix,
        "scaled_digit": np.mod(np.floor(n / (place * prev_factor)), radix),
        "scaled_turn_fraction": np.mod(n * schedule.scaled_inv_freq(geom) / TWO_PI, 1.0),
    }


def integer_digits(n: int, radix: int, width: int | None = None) -> list[int]:
    """Digits of n in `radix`, most significant first, left-padded to `width`."""
    out = []
    while n:
        n, r = divmod(n, radix)
        out.append(r)
    out = out[::-1] or [0]
    if width is not None and len(out) < width:
        out = [0] * (width - len(out)) + out
    return out


def conversion_radix(radix: int, width: int, factor: float) -> int:
    """Smallest integer radix whose `width` digits cover factor * radix^width numbers (Su, "RoPE is a beta-base encoding": 13 for 10, 3, 2x)."""
    need = factor * radix**width
    r = max(radix, math.ceil(need ** (1.0 / width) - 1e-9))
    while r**width < need:
        r += 1
    return r


def integer_illustration(n: int, radix: int, width: int, factor: float, extra_radices: list[int]) -> list[dict]:
    """Seed 002's three ways to fit n into `width` digits once the range grows `factor` times."""
    rows = [{
        "scheme": f"extrapolation (radix {radix})",
        "radix": radix,
        "digits": integer_digits(n, radix, width),
        "fits": n < radix**width,
    }]
    scaled = n / factor  # interpolation: squeeze n back into the trained range, digits stop being integers
    whole = integer_digits(int(scaled), radix, width)
    frac = scaled - int(scaled)
    rows.append({
        "scheme": f"interpolation (n/{factor:g} in radix {radix})",
        "radix": radix,
        "digits": whole[:-1] + [round(whole[-1] + frac, 6)],
        "fits": scaled < radix**width,
    })
    for r in [conversion_radix(radix, width, factor), *extra_radices]:
        rows.append({
            "scheme": f"base conversion (radix {r})",
            "radix": r,
            "digits": integer_digits(n, r, width),
            "fits": n < r**width,
        })
    return rows
