"""How often a 2-rank torchrun of an evaluating command fails at exit, over N consecutive runs.

The command is the one that aborted: `torchrun --nproc-per-node 2 -m ropecli compare --len 512 --len 1024
--method none,ntk-fixed,mixed --samples 6 --no-cache --json` on the built-in model (CPU, gloo). A run
counts as a failure when torchrun exits non-zero, when stdout is not one JSON document, or when that
JSON's numbers differ from the first run's (the same command must give the same numbers every time).
Each failure prints its exit code and the last lines of stderr; the summary prints failures / runs
and the wall time per run.

    python benchmarks/torchrun_exits.py [--runs 50] [--nproc 2] [-- extra ropecli args]

`--kill-rank 1 --after 8` instead kills one rank (SIGKILL) 8 s into each run and reports how long
the run takes to end after the kill (target: within 60 s) and its exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

COMMAND = ["compare", "--len", "512", "--len", "1024", "--method", "none,ntk-fixed,mixed", "--samples", "6",
           "--no-cache", "--json"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(nproc: int, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port",
            str(free_port()), "-m", "ropecli", *args]


def numbers(doc) -> list:
    """The measured values of a compare JSON, without wall times and pass counts (which vary run to run)."""
    if isinstance(doc, dict):
        return [(k, numbers(v)) for k, v in sorted(doc.items()) if k not in ("seconds", "wall_seconds", "cache")]
    if isinstance(doc, list):
        return [numbers(v) for v in doc]
    return doc


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (the torchrun agent's worker ranks), from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def worker_with_rank(agent: int, rank: int) -> int | None:
    for pid in child_pids(agent):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return pid
    return None


def run_once(nproc: int, args: list[str]) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    r = subprocess.run(torchrun_cmd(nproc, args), capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return r.returncode, r.stdout, r.stderr, time.perf_counter() - t0


def kill_once(nproc: int, args: list[str], rank: int, after: float) -> tuple[int, float, str]:
    """Start the run, SIGKILL rank `rank` `after` s in; (exit code, seconds from the kill to the end, stderr tail)."""
    p = subprocess.Popen(torchrun_cmd(nproc, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    time.sleep(after)
    victim = worker_with_rank(p.pid, rank)
    if victim is None:
        p.kill()
        raise SystemExit(f"rank {rank} not found {after} s in; the run may have ended already (pass a smaller --after)")
    os.kill(victim, signal.SIGKILL)
    t_kill = time.perf_counter()
    _, err = p.communicate(timeout=600)
    return p.returncode, time.perf_counter() - t_kill, "\n".join(err.strip().splitlines()[-3:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--kill-rank", type=int, default=None, help="kill this rank in each run instead")
    ap.add_argument("--after", type=float, default=8.0, help="seconds into the run at which --kill-rank kills")
    ap.add_argument("--tail", type=int, default=6, help="lines of a failed run's stderr to print")
    ap.add_argument("extra", nargs="*", help="ropecli arguments replacing the compare command")
    a = ap.parse_args()
    args = a.extra or COMMAND
    print(f"command: torchrun --nproc-per-node {a.nproc} -m ropecli {' '.join(args)}", flush=True)
    if a.kill_rank is not None:
        ends = []
        for i in range(a.runs):
            code, seconds, tail = kill_once(a.nproc, args, a.kill_rank, a.after)
            ends.append(seconds)
            print(f"run {i + 1}: rank {a.kill_rank} killed at {a.after:.0f} s; the run ended {seconds:.1f} s later, exit {code}", flush=True)
            print("  " + tail.replace("\n", "\n  "), flush=True)
        print(f"killed rank: the run ended within {max(ends):.1f} s of the kill in all {a.runs} runs (target 60 s)")
        sys.exit(0 if max(ends) <= 60 else 1)
    failures, walls, first = 0, [], None
    for i in range(a.runs):
        code, out, err, wall = run_once(a.nproc, args)
        walls.append(wall)
        why = None
        if code != 0:
            why = f"exit {code}"
        else:
            try:
                got = numbers(json.loads(out))
            except json.JSONDecodeError:
                why = "stdout is not one JSON document"
            else:
                first = got if first is None else first
                why = None if got == first else "numbers differ from run 1"
        if why:
            failures += 1
            tail = "\n  ".join(err.strip().splitlines()[-a.tail:])
            print(f"run {i + 1}: FAILED ({why}, {wall:.1f} s)\n  {tail}", flush=True)
        else:
            print(f"run {i + 1}: ok ({wall:.1f} s)", flush=True)
    print(f"failures: {failures} of {a.runs} runs; wall per run: median {sorted(walls)[len(walls) // 2]:.1f} s, max {max(walls):.1f} s")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
