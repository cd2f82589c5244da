"""Wall time of the analysis commands against `python -c "import typer, rich, numpy"`, measured in the same run.

Targets: `ropecli freqs`, `digits`, `schedule` and `--help` answer in <= 0.5 s on the project's 2-core
machine and within ~1.4x of importing typer, rich and numpy (what any ropecli command needs): the app imports a
command's modules only when that command runs (`ropecli.cli.app.COMMANDS`), and the analysis path imports
neither torch, transformers, the evaluating commands' options nor the metric/runtime registries. Printing
freqs' 64-row table with rich is output, not start-up: it is timed apart (`--json` prints the same report
without the table). Medians of N runs each, runs interleaved so a busy machine slows every case alike.

    python benchmarks/bench_startup.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import ropecli
from ropecli.models.config import BUILTIN_DIR

ROPECLI = [sys.executable, "-m", "ropecli"]
FREQS = ["freqs", "--d", "128", "--k", "8", "--method", "mixed"]
BASELINE = "python -c 'import typer, rich, numpy'"
CASES = {
    BASELINE: [sys.executable, "-c", "import typer, rich, numpy"],
    "ropecli --help": [*ROPECLI, "--help"],
    "ropecli freqs --help": [*ROPECLI, "freqs", "--help"],
    "ropecli freqs --d 128 --k 8 --method mixed --json": [*ROPECLI, *FREQS, "--json"],
    "ropecli digits --n 759 --d 128 --k 8 --json": [*ROPECLI, "digits", "--n", "759", "--d", "128", "--k", "8", "--json"],
    "ropecli schedule --d 128 --k 8 --json": [*ROPECLI, "schedule", "--d", "128", "--k", "8", "--method", "pi,yarn,mixed", "--format", "json"],
    "ropecli freqs --model DIR --k 8 --json": [*ROPECLI, "freqs", "--model", str(BUILTIN_DIR), "--k", "8", "--json"],
    "ropecli freqs --d 128 --k 8 --method mixed (rich table)": [*ROPECLI, *FREQS],
    "ropecli compare --help (evaluating command)": [*ROPECLI, "compare", "--help"],
}
RATIO_TARGET, WALL_TARGET = 1.4, 0.5


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"COLUMNS": "120"}  # as installed:
# with its bytecode (a machine that sets PYTHONDONTWRITEBYTECODE would time the compiler, ~0.1 s a start here)


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(ropecli.__file__).parent)], check=True, env=ENV,
                   stdout=subprocess.DEVNULL)
    times = {name: [] for name in CASES}
    for _ in range(args.runs):
        for name, cmd in CASES.items():
            times[name].append(wall(cmd))
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians[BASELINE]
    for name, t in medians.items():
        print(f"{name:58s} {t * 1000:7.1f} ms   {t / base:5.2f}x the baseline")
    probe = subprocess.run([*ROPECLI[:1], "-c", "import sys; from ropecli.cli.app import command_function; command_function('freqs'); "
                            "import ropecli.rope.freqs, ropecli.models.config; "
                            f"ropecli.models.config.read_rope_config({str(BUILTIN_DIR)!r}); "
                            "print(*[m in sys.modules for m in ('torch', 'transformers', 'ropecli.cli.eval_options', "
                            "'ropecli.evaluation.metrics', 'ropecli.export.runtimes')])"],
                           capture_output=True, text=True, check=True).stdout.split()
    print(f"imported by freqs: torch {probe[0]}, transformers {probe[1]}, the evaluating options {probe[2]}, "
          f"the metric registry {probe[3]}, the runtimes {probe[4]}")
    analysis = {k: v for k, v in medians.items() if k.startswith("ropecli") and "rich table" not in k and "evaluating" not in k}
    worst = max(analysis, key=analysis.get)
    ok = analysis[worst] <= WALL_TARGET and analysis[worst] / base <= RATIO_TARGET
    print(f"analysis commands: slowest {worst!r} {analysis[worst]:.3f} s = {analysis[worst] / base:.2f}x the baseline; "
          f"target <= {WALL_TARGET} s and <= {RATIO_TARGET}x: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
