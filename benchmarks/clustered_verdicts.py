"""How much the inference that fits the data changes the verdicts: `ropecli compare` of the standard
methods on more windows than there are documents (the built-in held-out plays are 5), each method's
paired difference to the best under ropecli's inference (windows of these documents, serial
correlation up to 0.8 between neighbouring windows) and with the windows taken as independent draws
(what a plain paired t-test assumes), and the verdict of each at the table's level (95% for the table).

    python benchmarks/clustered_verdicts.py [--len 2048] [--samples 16] [--model M] [--method LIST]
"""

from __future__ import annotations

import argparse
import json

from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.evaluation import inference
from ropecli.evaluation.stats import ONE_SIDED, paired_difference

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
    docs = rows[0]["windows"]
    best = next(row for row in rows if row["vs_best"]["best"])
    level = ONE_SIDED / (len(rows) - 1)
    print(f"{out['model']}: {args.samples} windows at {args.len} from {len(set(docs))} documents ({', '.join(sorted(set(docs)))})")
    print(f"{'method':48} {'diff':>8} {'se':>8} {'se iid':>8}  verdict (ropecli)   verdict (windows independent)")
    changed = 0
    for row in rows:
        if row is best:
            print(f"{row['label']:48} {'best':>8}")
            continue
        ours = paired_difference(row["window_nll"], best["window_nll"], docs, level=level)
        saved = inference.MAX_SERIAL_CORRELATION
        inference.MAX_SERIAL_CORRELATION = 0.0
        try:
            iid = paired_difference(row["window_nll"], best["window_nll"], None, level=level)
        finally:
            inference.MAX_SERIAL_CORRELATION = saved
        changed += ours["verdict"] != iid["verdict"]
        print(f"{row['label']:48} {ours['diff']:+8.4f} {ours['se']:8.4f} {iid['se']:8.4f}  {ours['verdict']:18} {iid['verdict']}")
    print(f"verdicts changed by the inference: {changed} of {len(rows) - 1}; forward passes {out['forward_passes']}")


if __name__ == "__main__":
    main()
