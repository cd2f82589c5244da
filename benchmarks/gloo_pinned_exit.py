"""The cause of the aborts, isolated: a gloo process group that something still holds at exit.

Each run is a 2-rank torchrun of a short script: join a gloo group, import torch.distributed.nn.functional
(whose default arguments `group=group.WORLD` hold the group when the module is imported after
init_process_group, as transformers does while loading a model), gather 20 objects, barrier,
destroy_process_group, exit. Order "after" imports the module after the group exists (ropecli before
the fix), order "before" imports it first (ropecli's `distributed.import_before_group`). Prints, per
order, how many runs failed and whether a rank printed "terminate called without an active exception",
and whether gloo's threads were still alive after destroy_process_group.

    python benchmarks/gloo_pinned_exit.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torchrun_exits import free_port  # noqa: E402

SCRIPT = """
import sys
import torch, torch.distributed as t
from ropecli.evaluation.distributed import group_threads
if sys.argv[1] == "before":
    import torch.distributed.nn.functional
t.init_process_group("gloo")
import torch.distributed.nn.functional
import transformers  # a realistic amount of module teardown at exit
for i in range(20):
    out = [None] * 2
    t.all_gather_object(out, {"i": i, "x": torch.randn(100).tolist()})
t.barrier()
t.destroy_process_group()
print("threads after destroy:", group_threads(), file=sys.stderr)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "rank.py"
        script.write_text(SCRIPT)
        for order in ("after", "before"):
            failed = aborted = 0
            alive = set()
            for _ in range(a.runs):
                r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                    "--master-port", str(free_port()), str(script), order],
                                   capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                failed += r.returncode != 0
                aborted += "terminate called without an active exception" in r.stderr
                alive |= {ln for ln in r.stderr.splitlines() if ln.startswith("threads after destroy:")}
            print(f"module imported {order} init_process_group: {failed} of {a.runs} runs failed "
                  f"({aborted} with 'terminate called without an active exception'); {'; '.join(sorted(alive))}",
                  flush=True)


if __name__ == "__main__":
    main()
