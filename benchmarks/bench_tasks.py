"""What RULER's tasks cost beside perplexity: forward passes and wall time of `ropecli compare`
on PPL alone and on each task, the same model, schedules and length, each in its own empty cache, in
one run (ratios against PPL; absolute times differ by machine). A PPL unit is one window of --len
tokens; a task unit is one prompt of at most --len tokens, scored by its answer likelihood (one pass)
and its needle-free control (one more, for the tasks with a needle), with --generate also RULER's
greedy answer (one prefill and up to tokens_to_generate decode steps). Prompts per cell: --samples per
depth of --depths (cwe and fwe: as many, without a depth).

    python benchmarks/bench_tasks.py                                  # built-in model, --len 2048
    python benchmarks/bench_tasks.py --tasks niah-single,vt --generate
    python benchmarks/bench_tasks.py --model smollm2 --len 8192 --methods none,yarn --samples 1
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from typer.testing import CliRunner

from ropecli.cli.app import app


def compare(common: list[str], *extra: str) -> tuple[dict, float]:
    cache = tempfile.mkdtemp(prefix="ropecli-bench-tasks-")
    t0 = time.perf_counter()
    r = CliRunner().invoke(app, ["compare", *common, "--cache-dir", cache, "--json", *extra])
    dt = time.perf_counter() - t0
    if r.exit_code:
        raise SystemExit(r.output)
    return json.loads(r.stdout), dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--len", type=int, default=2048)
    ap.add_argument("--methods", default="none,yarn,llama3")
    ap.add_argument("--samples", type=int, default=2, help="PPL windows; task prompts per depth")
    ap.add_argument("--depths", default="0,0.5,1")
    ap.add_argument("--tasks", default="niah-single,niah-multikey,vt,cwe,fwe")
    ap.add_argument("--generate", action="store_true", help="also RULER's generation score")
    args = ap.parse_args()
    common = ["--len", str(args.len), "--method", args.methods, "--samples", str(args.samples), "--depths", args.depths,
              *(["--model", args.model] if args.model else [])]
    ppl, t_ppl = compare(common, "--metric", "ppl")
    units = len(ppl["results"][0]["window_nll"])
    print(f"ppl: {ppl['forward_passes']} forward passes ({units} windows x {len(ppl['results'])} schedules), {t_ppl:.1f} s "
          "(model load included in every row)")
    for task in args.tasks.split(","):
        out, dt = compare(common, "--task", task, *(["--generate"] if args.generate else []))
        prompts = out["results"][0]["samples"]
        tokens = sum(len(r["prompt_answer_nll"]) for r in out["results"])
        print(f"{task}: {out['forward_passes']} forward passes ({prompts} prompts x {len(out['results'])} schedules; "
              f"{out['forward_passes'] / max(tokens, 1):.0f} per prompt), {dt:.1f} s = "
              f"{out['forward_passes'] / ppl['forward_passes']:.2f}x PPL's passes, {dt / t_ppl:.2f}x its time; "
              f"{dt / out['forward_passes']:.2f} s a pass against PPL's {t_ppl / ppl['forward_passes']:.2f} s")


if __name__ == "__main__":
    main()
