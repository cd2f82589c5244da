"""The race's guarantee over the whole grid: how often the true best is dropped, per cell of fields
(2, 5, 10 candidates; near-ties and exact ties), documents (1, 2, 3, 5, 20), serial correlation along
a document (AR(1) phi 0, 0.5, 0.8) and document effects (none, normal, skewed), on simulated
measurements with a known truth (`ropecli.tuning.simulation`, which calls ropecli's own race).

Prints one row per cell: the drop rate with its binomial 95% upper bound, windows spent per candidate
(of --max-windows), and whether the cell holds the stated rate (alpha = 0.05; "holds" = the rate is at
most alpha + 2 binomial standard errors). Ends with the worst cell.

    python benchmarks/bench_verdicts.py [--races 400] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

from ropecli.tuning.racing import ALPHA
from ropecli.tuning.simulation import Cell, drop_rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--races", type=int, default=400)
    ap.add_argument("--quick", action="store_true", help="a few cells (K 5, phi 0 / 0.8)")
    args = ap.parse_args()
    Ks, phis = ((5,), (0.0, 0.8)) if args.quick else ((2, 5, 10), (0.0, 0.5, 0.8))
    bound = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / args.races)
    print(f"{args.races} races per cell; stated rate {ALPHA:.2f}, a cell holds it at a measured rate <= {bound:.3f}")
    print(f"{'K':>3} {'field':>5} {'docs':>4} {'phi':>4} {'doc effects':>11} {'dropped best':>12} {'windows':>8}  holds")
    worst, t0, cells = (0.0, None), time.perf_counter(), 0
    for K, field, G, phi, effects in itertools.product(Ks, ("near", "ties"), (1, 2, 3, 5, 20), phis,
                                                        ("none", "normal", "skewed")):
        if field == "ties" and K == 2:
            continue
        cell = Cell(K=K, G=G, phi=phi, doc_effects=effects, field=field)
        rate, spent = drop_rate(cell, args.races, seed=cells)
        cells += 1
        print(f"{K:>3} {field:>5} {G:>4} {phi:>4} {effects:>11} {rate:>12.3f} {spent:>6.1f}/{cell.max_windows}  "
              f"{'yes' if rate <= bound else 'NO'}", flush=True)
        if rate >= worst[0]:
            worst = (rate, cell)
    print(f"{cells} cells in {time.perf_counter() - t0:.0f} s; worst: {worst[0]:.3f} at {worst[1]}; "
          f"{'every cell holds the stated rate' if worst[0] <= bound else 'SOME CELL DOES NOT HOLD IT'}")


if __name__ == "__main__":
    main()
