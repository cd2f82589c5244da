"""How much clustering by document changes the verdicts: `ropecli compare` of the standard methods on
more windows than there are documents (the built-in held-out plays are 5), each method's paired
difference to the best with the ordinary standard error (windows independent) and the clustered one
(windows of one play share it), and whether each calls it distinguishable at 95%.

    python benchmarks/clustered_verdicts.py [--len 2048] [--samples 16] [--model M] [--method LIST]
"""

from __future__ import annotations

import argparse
import json

from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.evaluation.inference import t_quantile

METHODS = "none,pi,ntk-aware,dynamic,yarn,llama3,ntk-fixed,mixed"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--len", type=int, default=2048)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--method", default=METHODS)
    args = ap.parse_args()
    r = CliRunner().invoke(app, ["compare", "--len", str(args.len), "--samples", str(args.samples), "--method", args.method,
                                 "--json", *(["--model", args.model] if args.model else [])])
    if r.exit_code:
        raise SystemExit(r.output)
    out = json.loads(r.stdout)
    rows = out["results"]
    docs = sorted(set(rows[0]["windows"]))
    print(f"{out['model']}: {args.samples} windows at {args.len} from {len(docs)} documents ({', '.join(docs)})")
    print(f"{'method':48} {'diff':>8} {'se iid':>8} {'se clustered':>12}  iid verdict      clustered verdict")
    changed = 0
    for row in rows:
        p = row["vs_best"]
        if p["best"]:
            print(f"{row['label']:48} {'best':>8}")
            continue
        se_iid = p.get("se_iid", p["se"])
        iid = abs(p["diff"]) > t_quantile(p["n"] - 1) * se_iid
        clustered = p["distinguishable"]
        changed += iid != clustered
        word = {True: "worse", False: "tied"}
        print(f"{row['label']:48} {p['diff']:+8.4f} {se_iid:8.4f} {p['se']:12.4f}  {word[iid]:16} {word[clustered]}"
              + (f"  (needs ~{p['windows_needed']} windows)" if p.get("windows_needed") else ""))
    print(f"verdicts changed by clustering: {changed} of {len(rows) - 1}; forward passes {out['forward_passes']}")


if __name__ == "__main__":
    main()
