"""Forward passes of `ropecli advise` with a 3-length workload against a single-length advise (issue "Advise
for the traffic and the runtime"; target: at most 1.5x), on the built-in model, each run in a fresh process
with a fresh cache, measured in the same run. The workload's lengths are prefixes of the target windows
(prefix scoring): a static candidate scores all of them in one pass per window, the unscaled model that
transformers applies below L is shared by every candidate.

    python benchmarks/bench_workload.py                 # --len 1024, --budget 4, every candidate
    python benchmarks/bench_workload.py --len 2048 --budget 12 --workload 256:0.5,1024:0.3,2048:0.2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def advise(args: list[str], tmp: Path, name: str) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ropecli", "advise", *args, "--out", str(tmp / name), "--cache-dir",
                           str(tmp / f"cache-{name}"), "--json"], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    return {"passes": out["forward_passes"], "seconds": time.perf_counter() - t0, "winner": out["winner"],
            "serving": {rt: (b["best"] or {}).get("name") for rt, b in (out.get("serving") or {}).get("runtimes", {}).items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--len", type=int, default=1024)
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--workload", default="256:0.6,512:0.3,1024:0.1")
    a = ap.parse_args()
    base = ["--len", str(a.len), "--budget", str(a.budget)]
    with tempfile.TemporaryDirectory() as tmp:
        single = advise(base, Path(tmp), "single")
        mixed = advise([*base, "--workload", a.workload], Path(tmp), "workload")
    print(f"ropecli advise {' '.join(base)} (built-in model), with and without --workload {a.workload}")
    print(f"single length: {single['passes']} forward passes, {single['seconds']:.1f} s, winner {single['winner']}")
    print(f"workload:      {mixed['passes']} forward passes, {mixed['seconds']:.1f} s, winner {mixed['winner']}, "
          f"best per runtime {mixed['serving']}")
    print(f"ratio: {mixed['passes'] / single['passes']:.2f}x passes (target <= 1.5x), "
          f"{mixed['seconds'] / single['seconds']:.2f}x wall time")


if __name__ == "__main__":
    main()
