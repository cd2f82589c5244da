"""Where the test suite's time goes: per file and the slowest tests, from pytest's own `--durations=0` report.

A module-scoped fixture's cost lands in the setup of the first test that asks for it, so a test's time here is its
setup + call + teardown. Run the suite once with the report, then read it (one run: timings from different runs of a
shared machine do not compare):

    python -m pytest -q --durations=0 > suite.log
    python benchmarks/suite_durations.py suite.log [--top 30] [--before OLD.log]

With --before, each file's time beside its time in the older log (the same suite, before a change).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S.*?)\s*$")


def read(log: Path) -> dict[str, float]:
    """test id -> seconds (setup + call + teardown)."""
    out: dict[str, float] = defaultdict(float)
    for line in log.read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m:
            out[m.group(3)] += float(m.group(1))
    return dict(out)


def per_file(tests: dict[str, float]) -> dict[str, tuple[float, int]]:
    files: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for test, s in tests.items():
        files[test.split("::")[0]][0] += s
        files[test.split("::")[0]][1] += 1
    return {f: (s, n) for f, (s, n) in files.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--before", type=Path)
    args = ap.parse_args()
    tests = read(args.log)
    if not tests:
        raise SystemExit(f"{args.log}: no `--durations` lines (run pytest with --durations=0)")
    before = per_file(read(args.before)) if args.before else {}
    files = per_file(tests)
    total = sum(tests.values())
    print(f"{len(tests)} tests timed, {total:,.0f} s in all (setup + call + teardown)\n")
    print("| file | tests | s | share |" + (" s before |" if before else ""))
    print("|---|---:|---:|---:|" + ("---:|" if before else ""))
    for f, (s, n) in sorted(files.items(), key=lambda kv: -kv[1][0]):
        if s < 0.005 * total:
            continue
        was = f" {before[f][0]:,.0f} |" if f in before else (" — |" if before else "")
        print(f"| {f} | {n} | {s:,.0f} | {s / total:.1%} |{was}")
    print(f"\nThe {args.top} slowest tests\n")
    print("| # | test | s |")
    print("|---:|---|---:|")
    for i, (test, s) in enumerate(sorted(tests.items(), key=lambda kv: -kv[1])[:args.top], 1):
        print(f"| {i} | `{test}` | {s:,.1f} |")


if __name__ == "__main__":
    main()
