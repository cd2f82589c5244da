"""Per-pair frequency report: what a schedule does to each pair's frequency, wavelength and turns.

A pair "saw a full turn in training" when L*theta_m >= 2*pi; the critical pair is the first that
did not. Status of a pair under a schedule, by its factor Lambda_m against k:
- extrapolated: Lambda_m = 1, the frequency is unchanged (positions past L give unseen angles
  on pairs that never turned within L);
- interpolated: Lambda_m = k, angles over k*L stay inside the range seen over L;
- in between: 1 < Lambda_m < k (or beyond k, as dynamic NTK can);
- no rotation: a p-RoPE pair at frequency 0 (Gemma 4's global layers past their rotating pairs): no position reaches it.
`in_range` says whether the largest angle at k*L, k*L*theta'_m, lies within what training showed:
a full turn, or at most L*theta_m.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ropecli.rope.geometry import TWO_PI, Geometry, critical_pair, turns, wavelength
from ropecli.rope.schedule import Schedule

REL_TOL = 1e-9


def pair_status(factors: np.ndarray, k: float, inv_freq: np.ndarray | None = None) -> list[str]:
    out = []
    for i, f in enumerate(factors):
        if inv_freq is not None and inv_freq[i] == 0:
            out.append("no rotation")
        elif abs(f - 1.0) <= REL_TOL and abs(k - 1.0) <= REL_TOL:
            out.append("unchanged")
        elif abs(f - 1.0) <= REL_TOL:
            out.append("extrapolated")
        elif abs(f - k) <= REL_TOL * k:
            out.append("interpolated")
        else:
            out.append("in between")
    return out


def frequency_report(geom: Geometry, schedule: Schedule) -> dict[str, Any]:
    """Per pair before and after `schedule` (a position map's reach is added above, by `maps.map_pairs.with_reach`)."""
    inv = geom.inv_freq()  # (d/2,)
    scaled = schedule.scaled_inv_freq(geom)  # (d/2,)
    seen_angle = np.minimum(geom.train_len * inv, TWO_PI)  # largest angle (mod a turn) training showed
    target_angle = geom.target_len * scaled
    status = pair_status(schedule.factors, geom.factor, inv)
    pairs = [
        {
            "m": int(m),
            "inv_freq": float(inv[i]),
            "factor": float(schedule.factors[i]),
            "lambda": float(schedule.lambdas[i]),
            "scaled_inv_freq": float(scaled[i]),
            "wavelength": float(wavelength(inv[i])),
            "scaled_wavelength": float(wavelength(scaled[i])),
            "turns_in_train_len": float(turns(inv[i], geom.train_len)),
            "turns_in_target_len": float(turns(scaled[i], geom.target_len)),
            "status": status[i],
            "in_range": bool(target_angle[i] <= seen_angle[i] * (1 + 1e-12) or seen_angle[i] >= TWO_PI),
        }
        for i, m in enumerate(geom.pair_index())
    ]
    return {
        "method": schedule.method,
        "label": schedule.label(),
        "params": {k: v for k, v in schedule.params.items() if k != "factors"},
        "rotary_dim": geom.rotary_dim,
        "base": geom.base,
        "beta": geom.beta,
        "factor": geom.factor,
        "train_len": geom.train_len,
        "L0": geom.train_len,  # the length the shipped schedule was built from (the training length of a plain model)
        "Ls": geom.shipped_len,  # the length the model is shipped for
        "shipped": geom.shipped.to_json() if geom.shipped is not None else None,
        "target_len": geom.target_len,
        "attention_factor": schedule.attention_factor,
        "critical_pair": critical_pair(geom),
        "rotating_pairs": geom.rotating_pairs,  # p-RoPE: pairs past it at frequency 0 (None: every pair rotates)
        "temperature": (geom.temperature.to_json({"L0": geom.train_len, "Ls": geom.shipped_len, "target": geom.target_len})
                        if geom.temperature is not None else None),  # the model's own position temperature
        "pairs": pairs,
    }
