"""What a position map does to positions (numpy): each query-key pair's relative position (`relative_positions`, the
twin the tests and pictures read), and to each rotary pair: the farthest rotation distance the last query of a T-token
sequence sees on the pair, its angle there, and whether training showed that angle. A map that moves every pair alike
(Self-Extend, DCA, …) gives every pair the same distance; a per-pair map (DPE) gives each group of pairs its own, so a
pair whose distance stays within L keeps trained angles however far its keys lie. `ropecli freqs --map` and
`ropecli plot freqs --map` show it beside each pair's wavelength and factor (the seeds' per-pair view, for positions).
"""

from __future__ import annotations

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.maps.map_spelling import map_json
from ropecli.maps.position_maps import BoundMap, map_params, map_regions
from ropecli.rope.geometry import TWO_PI


def farthest_distance(position_map: BoundMap, length: int) -> np.ndarray:
    """(groups,) the largest rotation distance (query's position minus key's) the last of `length` queries sees, per
    group of pairs ((1,) for a map that moves every pair alike): the farthest any query sees, since each map's
    distances grow with the query's position."""
    i, j = np.array([length - 1]), np.arange(length)
    best = None
    for r in position_map.regions(length):
        keep = (r.where(i[:, None], j[None, :]) & (j[None, :] <= i[:, None]))[0]  # (length,)
        if not keep.any():
            continue
        q, k = np.asarray(r.query(i), dtype=np.float64), np.asarray(r.key(j), dtype=np.float64)
        rel = (q - k)[keep]  # (kept,) or (kept, groups)
        far = np.atleast_1d(rel.max(axis=0))
        best = far if best is None else np.maximum(best, far)
    return best


def pair_reach(position_map: BoundMap, length: int, scaled_inv_freq: np.ndarray, seen_angle: np.ndarray) -> list[dict]:
    """Per pair m (in order): its group under the map (None for a map that moves every pair alike), the farthest rotation
    distance at `length`, the angle there in turns (at the schedule's frequency) and whether it lies within what
    training showed (`seen_angle`, radians: a full turn, or L theta_m)."""
    far = farthest_distance(position_map, length)
    pairs = len(scaled_inv_freq)
    out = []
    for m in range(pairs):
        g = m * len(far) // pairs
        angle = far[g] * scaled_inv_freq[m]
        out.append({"map_group": g + 1 if len(far) > 1 else None, "map_distance": float(far[g]),
                    "map_turns": float(angle / TWO_PI),
                    "map_in_range": bool(angle <= seen_angle[m] * (1 + 1e-12) or seen_angle[m] >= TWO_PI)})
    return out


def with_reach(report: dict, geom, schedule, position_map: BoundMap | None) -> dict:
    """`rope.freqs.frequency_report` under a position map (`--map`): each pair also gets the farthest rotation distance
    the map leaves it at the target and whether that angle was seen in training (`pair_reach`); "map" names the map
    (None: no map)."""
    if position_map:
        seen_angle = np.minimum(geom.train_len * geom.inv_freq(), TWO_PI)  # the largest angle training showed
        reach = pair_reach(position_map, geom.target_len, schedule.scaled_inv_freq(geom), seen_angle)
        report = {**report, "pairs": [{**pair, **more} for pair, more in zip(report["pairs"], reach)]}
    return {**report, "map": map_json(position_map)}


def relative_positions(name: str, params: dict[str, float], n: int) -> np.ndarray:
    """rel[i, j] = the query's rotation position minus the key's, for i, j < n, j <= i (NaN above the diagonal), float64
    (n, n), or (n, n, groups) for a map whose positions differ per group of rotary pairs (dpe): what the map does to
    the score of each pair, for the tests and the pictures (the model never builds it)."""
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    d = i - j
    parts, covered = [], np.zeros((n, n), dtype=int)
    for r in map_regions(name, map_params(name, params), n):
        m = r.where(i, j) & (d >= 0)
        q, k = np.asarray(r.query(i), dtype=np.float64), np.asarray(r.key(j), dtype=np.float64)
        q, k = (q[..., None] if q.ndim == 2 else q), (k[..., None] if k.ndim == 2 else k)  # (n, 1, groups), (1, n, …)
        parts.append((m, q - k))
        covered += m
    groups = max(p.shape[-1] for _, p in parts)
    rel = np.full((n, n, groups), np.nan)
    for m, p in parts:
        rel[m] = np.broadcast_to(p, (n, n, groups))[m]
    rel = rel[..., 0] if groups == 1 else rel
    if (covered[d >= 0] != 1).any():
        raise RopeCliError(f"{name}: its regions do not cover every causal pair exactly once")
    return rel
