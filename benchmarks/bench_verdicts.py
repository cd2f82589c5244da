"""The race's guarantees over the whole grid: how often the true best is dropped, and how often the race's
leader is within delta of the true best (correct selection, the indifference zone's guarantee), per cell of
fields (2, 5, 10 candidates; near-ties, exact ties, and the indifference zone's least-favourable fields: one best
exactly delta ahead of the rest, `lfc`, and all equal), documents (1, 3, 20), serial correlation along a
document (AR(1) phi 0, 0.5, 0.8, 0.95, 0.99), document effects (none, skewed), and long-range drift
(the best one's loss drifting along each document, windows read from the heads as before or sampled
along the documents as now), on simulated text with a known truth (`ropecli.tuning.simulation`, which
calls ropecli's own sampling order and race).

Prints one row per cell: the drop rate with its Monte Carlo standard error, the correct-selection rate, the
share of races the indifference zone stopped, windows spent per candidate (of --max-windows), and whether
the cell holds both stated rates (alpha = 0.05; "holds" = the drop rate at most alpha, and the correct-selection
rate at least 1 - alpha, within 2 binomial standard errors of a rate alpha). Then the calibration
of the windows inference's se at phi 0 (rms se / true sd of the error; the issue's bound: within 20%)
and its coverage up to phi 0.99. Ends with the worst cell.

    python benchmarks/bench_verdicts.py [--races 200] [--quick] [--jobs 2]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from concurrent.futures import ProcessPoolExecutor

from ropecli.tuning.racing import ALPHA
from ropecli.tuning.simulation import Cell, race_rates, se_calibration


def show(cell: Cell, r: dict, races: int, bound: float, worst: tuple, worst_pcs: tuple) -> tuple[tuple, tuple]:
    """Print one cell's row; the worst drop rate and the worst correct-selection rate so far (ropecli's sampling)."""
    rate, pcs, spent = r["dropped"], r["correct"], r["windows"]
    se = math.sqrt(max(rate * (1 - rate), ALPHA * (1 - ALPHA)) / races)
    holds = rate <= bound and pcs >= 1 - bound
    print(f"{cell.K:>3} {cell.field:>5} {cell.G:>4} {cell.phi:>4} {cell.doc_effects:>11} {cell.drift:>5} "
          f"{cell.sampling:>10} {rate:>7.3f} ± {se:.3f} {pcs:>7.3f} {r['within_delta']:>7.2f} {spent:>5.1f}/{cell.max_windows}  "
          f"{'yes' if holds else 'NO'}{'' if cell.sampling == 'stratified' else ' (as before: heads only)'}", flush=True)
    if cell.sampling == "stratified" and rate >= worst[0]:
        worst = (rate, cell)
    if cell.sampling == "stratified" and pcs <= worst_pcs[0]:
        worst_pcs = (pcs, cell)
    return worst, worst_pcs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--races", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="a few cells (K 5, phi 0 / 0.99)")
    ap.add_argument("--jobs", type=int, default=1, help="cells simulated in parallel processes (each cell's seed fixed)")
    args = ap.parse_args()
    Ks, phis = ((5,), (0.0, 0.99)) if args.quick else ((2, 5, 10), (0.0, 0.5, 0.8, 0.95, 0.99))
    mc = math.sqrt(ALPHA * (1 - ALPHA) / args.races)
    bound = ALPHA + 2 * mc
    print(f"{args.races} races per cell; stated rate {ALPHA:.2f}; Monte Carlo se of a rate {ALPHA:.2f}: {mc:.3f}; "
          f"a cell holds it at a measured rate <= {bound:.3f}")
    print(f"{'K':>3} {'field':>5} {'docs':>4} {'phi':>4} {'doc effects':>11} {'drift':>5} {'sampling':>10} "
          f"{'dropped best':>14} {'correct':>7} {'in zone':>7} {'windows':>8}  holds")
    worst, worst_pcs, t0, cells = (0.0, None), (1.0, None), time.perf_counter(), 0
    fields = ("near", "ties", "lfc", "equal")
    grid = [Cell(K=K, G=G, phi=phi, doc_effects=effects, field=field, max_windows=32 if G >= 10 else 16)
            for K, field, G, phi, effects in itertools.product(Ks, fields, (1, 3, 20), phis, ("none", "skewed"))
            if not (field == "ties" and K == 2)]
    grid += [Cell(K=K, G=G, phi=0.5, doc_effects="none", drift=0.03, sampling=s)
             for K, G, s in itertools.product((2, 5), (1, 3), ("stratified", "head"))]
    with ProcessPoolExecutor(args.jobs) as pool:  # results in grid order; cell i simulated with seed i
        results = pool.map(race_rates, grid, [args.races] * len(grid), range(len(grid)))
        for cell, r in zip(grid, results):
            cells += 1
            worst, worst_pcs = show(cell, r, args.races, bound, worst, worst_pcs)
    print("\nthe windows inference's se (2 documents of 256 windows, 16 sampled), 2000 draws per row:")
    for phi in (0.0, 0.5, 0.8, 0.95, 0.99):
        cal = se_calibration(Cell(K=2, G=2, phi=phi, doc_effects="none", holds=256, max_windows=16), 2000, seed=7)
        print(f"  phi {phi:<4}: rms se / true sd {cal['ratio']:.2f}, 95% coverage {cal['coverage']:.3f}")
    print(f"{cells} cells in {time.perf_counter() - t0:.0f} s; worst drop rate (ropecli's sampling): {worst[0]:.3f} at "
          f"{worst[1]}; worst correct-selection rate: {worst_pcs[0]:.3f} at {worst_pcs[1]}; "
          f"{'every cell holds both stated rates' if worst[0] <= bound and worst_pcs[0] >= 1 - bound else 'SOME CELL DOES NOT HOLD THEM'}")


if __name__ == "__main__":
    main()
