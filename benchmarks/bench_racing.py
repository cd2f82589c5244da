"""Racing against the full tournament: `ropecli advise --no-race` (every candidate on every held-out
window and passkey prompt) and `ropecli advise` (racing, the default) on the built-in model (or
--model), in one run, each in its own fresh cache, so both pay for every forward pass they need.

Prints, for both: forward passes, wall time, the winner, the candidates tied with it; then the ratios
(racing / full), whether the winners agree, each searched candidate's winner in both runs (advise's raced
searches buy precision late, `ropecli.tuning.late_precision`: their paths may differ), and the full
tournament's verdict on the racing winner. The target: racing <= 0.5x the forward passes (aim 0.4x) with a
winner the full tournament shows within delta of its own best.

    python benchmarks/bench_racing.py [--len 2048] [--samples 4] [--max-windows N] [--model M] [--keep DIR]

--keep DIR: the two caches and advise folders go under DIR (kept): `ropecli advise --cache-dir DIR/racing-cache`
then prints the racing run's tables from its cache, without a forward pass.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

from ropecli.cli.app import app


def advise(common: list[str], *extra: str, keep: str | None = None, name: str = "run") -> tuple[dict, float]:
    if keep:
        cache, out = str(Path(keep) / f"{name}-cache"), str(Path(keep) / f"{name}-out")
    else:
        cache, out = tempfile.mkdtemp(prefix="ropecli-bench-cache-"), tempfile.mkdtemp(prefix="ropecli-bench-out-")
    t0 = time.perf_counter()
    r = CliRunner().invoke(app, ["advise", *common, "--cache-dir", cache, "--out", str(Path(out) / "a"), "--json", *extra])
    dt = time.perf_counter() - t0
    if r.exit_code:
        raise SystemExit(r.output)
    return json.loads(r.stdout), dt


def describe(name: str, res: dict, seconds: float) -> None:
    tied = res["tied_with_winner"]
    print(f"{name:>7}: {res['forward_passes']:4d} forward passes, {seconds:6.1f} s, winner {res['winner']} "
          f"({res['winner_label']}); tied with it: {', '.join(tied) or 'none'}")
    if res.get("race"):
        print(f"         race: {res['race']['outcome']}")
        if res.get("kl_race"):
            print(f"         tie-break (KL within L): {res['kl_race']['outcome']}")
        print(f"         windows per candidate: {res['windows_per_candidate']}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--len", type=int, default=None, help="target length (default: advise's, 8 L)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-windows", type=int, default=None)
    ap.add_argument("--keep", default=None, help="a folder for the caches and advise outputs (kept)")
    args = ap.parse_args()
    common = ["--samples", str(args.samples), *(["--len", str(args.len)] if args.len else []),
              *(["--model", args.model] if args.model else [])]
    full, t_full = advise(common, "--no-race", keep=args.keep, name="full")
    raced, t_race = advise(common, *(["--max-windows", str(args.max_windows)] if args.max_windows else []),
                           keep=args.keep, name="racing")
    describe("full", full, t_full)
    describe("racing", raced, t_race)
    ratio = raced["forward_passes"] / full["forward_passes"]
    same = raced["winner"] == full["winner"]
    decided = bool(raced["race"]["decided"]) and bool(full["tied_with_winner"])
    print(f"forward passes racing / full: {raced['forward_passes']} / {full['forward_passes']} = {ratio:.3f}x; "
          f"wall time {t_race:.1f} / {t_full:.1f} s = {t_race / t_full:.3f}x")
    print(f"same winner: {'yes' if same else 'no'}; racing decided a ranking the full run calls a tie: {'yes' if decided else 'no'}")
    for name, s in raced.get("searches", {}).items():  # advise's raced searches buy precision late: their paths may differ
        other = full["searches"].get(name, {})
        print(f"  search {name}: racing {s['best_label']} ({s['best_objective']:.4f} on the search windows), "
              f"full {other.get('best_label')} ({other.get('best_objective', float('nan')):.4f})")
    delta = raced["race"].get("delta") or raced["margin"]
    row = next((r for r in full["rows"] if r["candidate"] == raced["winner"]), None)
    upper = 0.0 if row and row["verdict"] == "best" else (row or {}).get("vs_best", {}).get("upper")
    near = upper is not None and upper <= delta
    print(f"the full tournament's verdict on the racing winner {raced['winner']}: "
          + ("its best" if upper == 0.0 else f"upper 95% bound of its gap to the best {upper}") + f" (delta {delta:g})")
    met = ratio <= 0.5 and (same or decided or near)
    print(f"target (<= 0.5x, aim 0.4x; a winner the full tournament shows within delta of its best): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
