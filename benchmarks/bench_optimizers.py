"""Evaluations to the optimum: the optimizers `ropecli search` can use, on 2-parameter objectives.

Each objective lives on the unit square (the search's normalized space) and has a known minimum
(found by a 801 x 801 grid). An optimizer "reaches the optimum" at the first evaluation whose value
is within --delta of the minimum (default 0.002: a tenth of the paired noise of 8 windows on the
built-in model, in nats). Reported per objective: evaluations to reach it (or '-' within --budget)
for scipy's bounded Powell and Nelder-Mead (what `ropecli search` offers), optuna's CMA-ES and TPE
(when optuna is installed), and the uniform grid of the same accuracy (the coarsest n x n grid whose
best point is within delta); and LongRoPE's evolution search for comparison: microsoft/LongRoPE
`evolution/default_hyper_params/dim_mono_llama.json`: population 64, 40 iterations of 16 mutations +
16 crossovers = 64 + 40 * 32 = 1,344 evaluations.

The objectives:
- valley: the shape measured on the built-in model for mixed(b, critical) (a curved valley, steep in
  critical, shallow in b), as a smooth function;
- rosenbrock: the classic curved valley, scaled into the square;
- tilted: a quadratic with strongly correlated axes (condition number 100).

    python benchmarks/bench_optimizers.py [--budget 60] [--delta 0.002]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from ropecli.tuning.optimizers import default_optimizer, optimize

LONGROPE_EVALUATIONS = 64 + 40 * (16 + 16)


def valley(x):
    b, c = 8 * x[0], 1 + 31 * x[1]  # b in [0, 8], critical in [1, 32] as `ropecli search --vary b --vary critical`
    return 3.80 + 0.02 * (math.log1p(b) - math.log1p(4.0)) ** 2 + 0.4 * ((c - 16 - 1.5 * (b - 4)) / 31) ** 2


def rosenbrock(x):
    u, v = 4 * x[0] - 2, 4 * x[1] - 1
    return ((1 - u) ** 2 + 100 * (v - u * u) ** 2) / 400


def tilted(x):
    u, v = x[0] - 0.3, x[1] - 0.6
    a, b = (u + v) / math.sqrt(2), (u - v) / math.sqrt(2)
    return a * a + 100 * b * b


# objective, start point: valley starts where `ropecli search` starts on the built-in model (b = 1, critical = the
# critical pair 14); the others away from their minimum
OBJECTIVES = {"valley": (valley, [1 / 8, 13 / 31]), "rosenbrock": (rosenbrock, [0.1, 0.9]), "tilted": (tilted, [0.9, 0.1])}


def true_min(f) -> float:
    g = np.linspace(0, 1, 801)
    return min(f((x, y)) for x in g for y in g)


def first_within(values: list[float], target: float) -> int | None:
    for i, v in enumerate(values, 1):
        if v <= target:
            return i
    return None


def grid_same_accuracy(f, target: float, limit: int = 200) -> int | None:
    for n in range(2, limit):
        g = np.linspace(0, 1, n)
        if min(f((x, y)) for x in g for y in g) <= target:
            return n * n
    return None


def optuna_run(f, sampler: str, budget: int, x0) -> list[float]:
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = optuna.samplers.CmaEsSampler(seed=0, x0={"x": x0[0], "y": x0[1]}) if sampler == "cmaes" else optuna.samplers.TPESampler(seed=0)
    study = optuna.create_study(sampler=s)
    study.optimize(lambda t: f((t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1))), n_trials=budget)
    return [t.value for t in study.trials]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--delta", type=float, default=0.002)
    args = ap.parse_args()
    try:
        import optuna  # noqa: F401
        samplers = ["cmaes", "tpe"]
    except ImportError:
        samplers = []
        print("optuna is not installed: its CMA-ES and TPE are not measured (pip install optuna cmaes)")
    print(f"evaluations until within {args.delta} of the minimum (budget {args.budget}; '-' = not reached)")
    header = ["objective", "powell", "nelder-mead", *[f"optuna-{s}" for s in samplers], "grid (same accuracy)", "LongRoPE"]
    print(" | ".join(f"{h:>20s}" for h in header))
    totals = {}
    for name, (f, x0) in OBJECTIVES.items():
        target = true_min(f) + args.delta
        row = {}
        for opt in ["powell", "nelder-mead"]:
            values = [v for _, v in optimize(lambda x: f(x), 2, args.budget, opt, x0).points]
            row[opt] = first_within(values, target)
        for s in samplers:
            row[f"optuna-{s}"] = first_within(optuna_run(f, s, args.budget, x0), target)
        row["grid"] = grid_same_accuracy(f, target)
        for k, v in row.items():
            totals.setdefault(k, []).append(v)
        cells = [name, *[str(row[k]) if row[k] else "-" for k in row], str(LONGROPE_EVALUATIONS)]
        print(" | ".join(f"{c:>20s}" for c in cells))
    worst = {k: (max(v) if all(v) else math.inf) for k, v in totals.items()}
    chosen = min((k for k in worst if k != "grid"), key=lambda k: worst[k])
    if not math.isfinite(worst[chosen]):
        print(f"no optimizer reached every optimum within --budget {args.budget}; raise it")
        return
    print(f"fewest evaluations in the worst case: {chosen} ({worst[chosen]}; ropecli's default for 2+ parameters is "
          f"{default_optimizer(2)}); ratio to the grid of the same accuracy {worst[chosen] / worst['grid']:.3f}x, "
          f"to LongRoPE's {LONGROPE_EVALUATIONS} evaluations {worst[chosen] / LONGROPE_EVALUATIONS:.3f}x")


if __name__ == "__main__":
    main()
