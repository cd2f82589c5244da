"""Wall time of `ropecli freqs` against `python -c "import numpy"`, measured in the same run.

Targets: `ropecli freqs …` answers in <= 0.5 s on the project's 2-core machine, and so does
`ropecli freqs --model DIR --k 8` for a model folder with a config.json (the built-in model's here),
which means the analysis path imports neither torch nor transformers. Prints the median of N runs of each
and their ratio, and checks that torch stays unimported.

    python benchmarks/bench_startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from ropecli.models.config import BUILTIN_DIR

CASES = {
    "python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
    "ropecli freqs --d 128 --k 8 --method mixed": [sys.executable, "-m", "ropecli", "freqs", "--d", "128", "--k", "8", "--method", "mixed"],
    "ropecli freqs ... --json": [sys.executable, "-m", "ropecli", "freqs", "--d", "128", "--k", "8", "--method", "mixed", "--json"],
    "ropecli freqs --model DIR --k 8": [sys.executable, "-m", "ropecli", "freqs", "--model", str(BUILTIN_DIR), "--k", "8"],
}


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    medians = {name: statistics.median(wall(cmd) for _ in range(args.runs)) for name, cmd in CASES.items()}
    base = medians["python -c 'import numpy'"]
    for name, t in medians.items():
        print(f"{name:50s} {t * 1000:7.1f} ms   ratio vs numpy import {t / base:5.2f}x")
    probe = subprocess.run([sys.executable, "-c", "import sys; from ropecli.cli.app import app; from ropecli.cli.commands import analysis;"
                            "import ropecli.rope.freqs, ropecli.rope.methods, ropecli.models.config, ropecli.rope.spec; "
                            f"ropecli.models.config.read_rope_config({str(BUILTIN_DIR)!r}); print('torch' in sys.modules, 'transformers' in sys.modules)"],
                           capture_output=True, text=True, check=True).stdout.split()
    print(f"torch imported by the analysis path: {probe[0]}, transformers: {probe[1]}")
    worst = max(v for k, v in medians.items() if k.startswith("ropecli"))
    print(f"target <= 0.5 s: {'met' if worst <= 0.5 else 'MISSED'} ({worst:.3f} s)")


if __name__ == "__main__":
    main()
