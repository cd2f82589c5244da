"""Which key-token rule should be ropecli's default? SmolLM2 has no long-context evaluator at 2L, so LongPPL's
long-short rule cannot run on its 16k windows; within L it can, with the model itself as the evaluator.
On the first L = 8192 tokens of the same 4 windows as docs/measurements/smollm2*.md (held-out plays, seed 0), this
measures, for the predictions LongPPL can judge (those after the first 4,096 tokens):
- how many each rule marks, and how many both mark;
- the long-context gain (NLL with only the 4,096 tokens before a token's block of 1,024 minus the NLL with
  the whole prefix, the quantity LongPPL thresholds at 2 nats) of far-repeat's key tokens, of LongPPL's,
  and of all predictions: does far-repeat pick tokens that need the long context?
Writes measurements/smollm2/key-rules-8k.json. ~2 min a window on 2 cores (one 8k pass, four 5k passes).

    python measurements/key_rules.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.key_tokens import TRUNC_LEN, far_repeat_mask, long_short_mask, short_context_blocks
from ropecli.backends.load import load_model

OUT = Path(__file__).parent / "smollm2" / "key-rules-8k.json"


def window_losses(lm, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(full-context NLL, short-context NLL: NaN where LongPPL has none) of every prediction of `ids`."""
    full = lm.token_losses(ids)
    short = np.full(len(ids) - 1, np.nan)
    for start, first, end in short_context_blocks(len(ids)):
        short[first - 1:end - 1] = lm.token_losses(ids[start:end])[first - start - 1:]
    return full, short


def main() -> None:
    lm = load_model("smollm2", dtype="fp32", device="cpu")
    L = lm.rope.train_len
    inputs = Inputs.load(lm.tokenizer, None, samples=4, seed=0).spanning(2 * L)
    rows = []
    for (ids, _), name in zip(inputs.unit_inputs("ppl", 2 * L), inputs.windows(2 * L).names):
        far = far_repeat_mask(ids, TRUNC_LEN)[:L - 1]  # a prefix's mask is the mask's prefix
        full, short = window_losses(lm, ids[:L])
        ls = long_short_mask(full, short)
        judged = ~np.isnan(short)
        gain = short - full
        rows.append({"document": name, "judged": int(judged.sum()), "far_repeat": int((far & judged).sum()),
                     "long_short": int(ls.sum()), "both": int((far & ls).sum()),
                     "gain_far_repeat_sum": float(gain[far & judged].sum()), "gain_long_short_sum": float(gain[ls].sum()),
                     "gain_all_sum": float(np.nansum(gain))})
        print(json.dumps(rows[-1]), flush=True)
    total = {k: sum(r[k] for r in rows) for k in ("judged", "far_repeat", "long_short", "both")}
    summary = {**total, "recall_of_long_short": total["both"] / max(total["long_short"], 1),
               "precision_against_long_short": total["both"] / max(total["far_repeat"], 1),
               "gain_far_repeat": sum(r["gain_far_repeat_sum"] for r in rows) / max(total["far_repeat"], 1),
               "gain_long_short": sum(r["gain_long_short_sum"] for r in rows) / max(total["long_short"], 1),
               "gain_all": sum(r["gain_all_sum"] for r in rows) / total["judged"]}
    OUT.write_text(json.dumps({"model": lm.rope.name, "L": L, "trunc_len": TRUNC_LEN, "windows": rows, "summary": summary},
                              indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
