"""What the key-token metric adds to a comparison (issue "Metrics that see whether the model uses the long
context"): forward passes, wall time, peak memory and cache size of `ropecli compare` with key-token PPL
against the same comparison with PPL alone, measured in this run (ratios; absolute times differ by machine).

Modes, each in a fresh process with a fresh cache (the model loads in every one, so load time is in all):
- ppl: `--key-tokens off` (PPL and loss by position only);
- far-repeat: the default rule (no model; every prediction's NLL kept in the cache, 2 bytes a token);
- long-short: LongPPL's rule, the model itself as the evaluator (windows must fit its L): one full pass
  and one per short block of every window, once, shared by every method compared.
Peak memory: the process's RSS high-water mark (ru_maxrss) at the end.

    python benchmarks/bench_key_tokens.py                       # the built-in model, --len 256 (= L), 6 methods
    python benchmarks/bench_key_tokens.py --model smollm2 --len 8192 --samples 2 --methods none,yarn
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import json, resource, sys, io, contextlib
from typer.testing import CliRunner
from ropecli.cli.app import app
out = CliRunner().invoke(app, sys.argv[1:])
if out.exit_code:
    raise SystemExit(out.output)
res = json.loads(out.stdout)
print(json.dumps({"forward_passes": res["forward_passes"], "evaluator_passes": res["key_evaluator_passes"], "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "key_tokens": next((r["key_tokens"] for r in res["results"] if r.get("key_tokens") is not None), None)}))
"""


def run(args: list[str], cache: Path) -> dict:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, *args, "--cache-dir", str(cache), "--json"], capture_output=True,
                          text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["seconds"] = time.perf_counter() - t0
    row["cache_mib"] = sum(p.stat().st_size for p in cache.rglob("*.json")) / 2 ** 20
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--methods", default="none,pi,ntk-aware,yarn,llama3,ntk-fixed")
    ap.add_argument("--key-short", type=int, default=None, help="the rules' short context (default: ropecli's)")
    a = ap.parse_args()
    base = ["compare", "--method", a.methods, "--len", str(a.len), "--samples", str(a.samples)]
    base += ["--model", a.model] if a.model else []
    base += ["--key-short", str(a.key_short)] if a.key_short else []
    modes = {"ppl": ["--key-tokens", "off"], "far-repeat": ["--key-tokens", "far-repeat"],
             "long-short": ["--key-tokens", "long-short"]}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in modes.items():
            rows[name] = run(base + extra, Path(tmp) / name)
    ref = rows["ppl"]
    print(f"ropecli compare {' '.join(base[1:])}: {len(a.methods.split(','))} methods x {a.samples} windows")
    print(f"{'mode':12} {'passes':>7} {'evaluator':>9} {'key tokens':>10} {'seconds':>8} {'x ppl':>6} {'peak RSS MiB':>12} {'x ppl':>6} "
          f"{'cache MiB':>9} {'x ppl':>6}")
    for name, r in rows.items():
        print(f"{name:12} {r['forward_passes']:>7} {r['evaluator_passes']:>9} {str(r['key_tokens']):>10} {r['seconds']:>8.1f} "
              f"{r['seconds'] / ref['seconds']:>6.2f} {r['peak_rss_mib']:>12.0f} {r['peak_rss_mib'] / ref['peak_rss_mib']:>6.2f} "
              f"{r['cache_mib']:>9.2f} {r['cache_mib'] / max(ref['cache_mib'], 1e-9):>6.1f}")
    print("passes: forward passes of the model under test; evaluator: the long-short evaluator's own (a full pass and "
          "one per short block of each window, shared by every method)")


if __name__ == "__main__":
    main()
