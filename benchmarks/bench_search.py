"""How many model evaluations `search-b` needs, against a uniform grid of the same accuracy, and
how long a fully cached rerun takes. On the built-in model (or --model), measured in one run.

1. search-b in a fresh cache: evaluations, forward passes, wall time, best b.
2. the same search again: forward passes (must be 0) and wall time of the fully cached rerun.
3. (unless --no-grid) the uniform grid b = lo, lo + 2 tol, …, hi on the same documents: its best b
   and wall time, so the ratio is of real runs, and the two answers can be compared.

    python benchmarks/bench_search.py [--len 2048] [--samples 4] [--tol 0.01]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.tuning.optimizers import grid_evaluations


def invoke(args: list[str]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    r = CliRunner().invoke(app, args)
    dt = time.perf_counter() - t0
    if r.exit_code:
        raise SystemExit(r.output)
    return json.loads(r.stdout), dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--len", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--tol", type=float, default=0.01)
    ap.add_argument("--no-grid", action="store_true")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="ropecli-bench-")
    common = ["--len", str(args.len), "--samples", str(args.samples), "--cache-dir", cache, "--json",
              *(["--model", args.model] if args.model else [])]
    first, t_first = invoke(["search-b", "--tol", str(args.tol), *common])
    again, t_again = invoke(["search-b", "--tol", str(args.tol), *common])
    n_search = first["search_evaluations"]
    n_grid = grid_evaluations(0.0, 1.0, args.tol)
    own = sum("same_as" not in r for r in first["references"])  # references not served by the b = 0 / b = 1 points
    print(f"search-b: {n_search} evaluations ({first['forward_passes']} forward passes incl. {own} references), "
          f"{t_first:.1f} s, best b = {first['best_b']:.4f}, objective {first['best_objective']:.5f}")
    print(f"cached rerun: {again['forward_passes']} forward passes, {t_again:.2f} s "
          f"(ratio to the first run {t_again / t_first:.3f}x), best b = {again['best_b']:.4f}")
    print(f"evaluations search / uniform grid of the same accuracy (±{args.tol:g}): {n_search} / {n_grid} = {n_search / n_grid:.3f}x")
    if not args.no_grid:
        grid = [round(i * 2 * args.tol, 10) for i in range(n_grid)]
        t0 = time.perf_counter()
        bs = []
        for b in grid:
            out, _ = invoke(["ppl", "--method", "mixed", "--b", str(b), *common])
            bs.append((out["results"][0]["nll"], b))
        t_grid = time.perf_counter() - t0
        best_nll, best_b = min(bs)
        print(f"uniform grid: {n_grid} evaluations, {t_grid:.1f} s, best b = {best_b:.4f}, objective {best_nll:.5f}; "
              f"wall search / grid = {t_first / t_grid:.3f}x; |b_search - b_grid| = {abs(first['best_b'] - best_b):.4f}")


if __name__ == "__main__":
    main()
