"""lm-evaluation-harness and ropecli on the same task, through the same exported folder.

    python benchmarks/lm_eval_agreement.py --model builtin --len 512 --samples 8
    python benchmarks/lm_eval_agreement.py --model smollm2 --len 8192,16384 --export-len 16384 --samples 3 \
        --folder none --folder yarn --folder none@selfextend:G=4,W=2048 --out measurements/smollm2/lm-eval-niah.json

The task: RULER's niah_single_1 (one needle, a word key and a 7-digit value, in the noise haystack "The grass is
green. …", which lm-eval generates offline: lm_eval/tasks/ruler/niah_utils.py:niah_single_1 →
prepare_niah.py:generate_samples), and ropecli's builder of it (`niah-single-noise`, ropecli.evaluation.ruler). Each
--folder is `ropecli export --to transformers` of the model (METHOD, or METHOD@MAP for a position map's folder with
its modeling code), loaded once, by lm-eval's `HFLM(pretrained=folder, trust_remote_code=True, max_length=--len)`
(max_length given: HFLM otherwise takes the config's max_position_embeddings and cuts longer prompts from the left).
Three scores per folder and length, each a mean over prompts of RULER's string_match_all of a greedy generation of up
to 128 tokens (RULER's tokens_to_generate):

  lm-eval          lm-eval's own prompts, generation and scoring (simple_evaluate, limit = --samples: the first
                   prompts of the 500 it draws with its seed)
  ropecli on them  the same prompts as ropecli frames them (question " " answer prefix after --bos auto's lead: the
                   tokenizer's own, as lm-eval tokenizes; or --chat-template), the
                   same model's greedy generation (generate(), do_sample=False; lm-eval's own generation reused where
                   the token ids are the same: greedy decoding of the same ids is the same text), ropecli's
                   string_match_all. Paired with lm-eval's per prompt: Newcombe's paired interval (95 %), which
                   isolates prompt tokenization and scoring (ropecli.evaluation.proportions)
  ropecli          ropecli's own prompts of niah-single-noise (seeded, the needle at --samples depths evenly spread
                   over [0, 1], as lm-eval's uniform draw over RULER's 40 depths, stratified), the same generation
                   and scoring. Against lm-eval: different prompts, so the exact union-bound interval of two
                   independent proportions (95 %, conservative)

What the intervals generalize to: new prompts drawn the way these were, on this folder; nothing else. Where the two
differ beyond them, the per-prompt lines say why (token ids, BOS, what was generated).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
TASK, ROPECLI_TASK = "niah_single_1", "niah-single-noise"
GENERATE = 128  # RULER's tokens_to_generate for niah (--max-new-tokens lowers it on both sides alike)


def export(model: str, length: int, work: Path, folder: str) -> Path:
    """`ropecli export --to transformers` of `folder` (METHOD or METHOD@MAP) at `length`, once."""
    from map_folder_passkey import export as export_folder

    method, _, position_map = folder.partition("@")
    name = f"{Path(model).stem}-{method}{'-' + position_map.replace(':', '-').replace(',', '-').replace('=', '') if position_map else ''}-{length}"
    return export_folder(model, length, work / name, method, position_map or None)


def lm_eval_prompts(folder: Path, length: int, samples: int, chat: bool, max_new: int = GENERATE):
    """(HFLM, [{"context", "generated", "score", "outputs", "gen_prefix"}]): lm-eval's run of niah_single_1."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(folder), trust_remote_code=True, max_length=length, batch_size=1, device="cpu",
              dtype="float32")
    out = simple_evaluate(model=lm, tasks=[TASK], limit=samples, log_samples=True, apply_chat_template=chat,
                          metadata={"max_seq_lengths": [length], "tokenizer": str(folder)}, random_seed=0,
                          gen_kwargs=None if max_new == GENERATE else {"max_gen_toks": max_new})
    rows = []
    for s in sorted(out["samples"][TASK], key=lambda s: int(s["doc_id"])):
        rows.append({"context": s["arguments"][0][0], "generated": s["filtered_resps"][0], "score": float(s[str(length)]),
                     "outputs": list(s["doc"]["outputs"]), "question": s["doc"]["input"], "gen_prefix": s["doc"]["gen_prefix"]})
    return lm, rows


def greedy(model, tokenizer, ids: list[int], max_new: int = GENERATE) -> str:
    """Up to `max_new` tokens of greedy decoding, as generate() runs it (the folder's KV cache), stopped at EOS."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_new, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    return tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)


def agree(folder: Path, length: int, samples: int, chat_template: str, model: str, max_new: int = GENERATE,
          regenerate: bool = True) -> dict:
    """One folder at one length: the three scores and their intervals. `regenerate` False: where ropecli's ids of an
    lm-eval prompt differ (its BOS), ropecli scores lm-eval's own generation instead of generating from its ids (the
    paired column then isolates scoring alone)."""
    from ropecli.evaluation.chat_template import prompt_frame
    from ropecli.evaluation.proportions import exact_difference, newcombe_paired
    from ropecli.evaluation.ruler.answer_scoring import string_match_all
    from ropecli.evaluation.ruler.builders import Haystack
    from ropecli.evaluation.ruler.generate import make_units

    t0 = time.perf_counter()
    lm, theirs = lm_eval_prompts(folder, length, samples, chat_template != "none", max_new)
    tok, net = lm.tokenizer, lm.model
    frame = prompt_frame(chat_template, tok)
    lines, on_theirs, same_ids, bos_only, their_tokens, our_tokens = [], [], [], [], [], []
    for r in theirs:  # ropecli's framing and scoring of lm-eval's prompts
        ours = frame.ids(tok, r["question"], r["gen_prefix"])
        used = lm.tok_encode(r["context"])[-(length - max_new):]  # HFLM.generate_until: left-truncated to fit
        same = list(ours) == list(used)
        said = r["generated"] if same or not regenerate else greedy(net, tok, ours, max_new)
        on_theirs.append(string_match_all(said, r["outputs"]))
        same_ids.append(same)
        bos_only.append(not same and list(ours) == [tok.bos_token_id] + list(used))  # all that differs: ropecli's BOS
        their_tokens.append(len(used))
        lines.append(f"    lm-eval prompt: {len(used)} tokens (ropecli's framing: {len(ours)}, "
                     f"{'the same ids' if same else 'other ids: ' + first_difference(used, ours, tok)}); "
                     f"answer {r['outputs'][0]}; lm-eval said {r['generated'][:40]!r} -> {r['score']:g}, "
                     f"ropecli scores {on_theirs[-1]:g}")
    depths = list(np.linspace(0, 1, samples)) if samples > 1 else [0.5]
    units = make_units(tok, Haystack.of(["unused by the noise haystack"] * 60), ROPECLI_TASK, length, depths, 1, seed=0,
                       frame=frame)
    ours = []
    for u in units:  # ropecli's own prompts, the same generation and scoring
        said = greedy(net, tok, list(u.ids[:u.answer_start]), max_new)
        ours.append(string_match_all(said, u.prompt.references))
        our_tokens.append(int(u.answer_start))
        lines.append(f"    ropecli prompt: {u.answer_start} tokens, needle at depth {u.prompt.depth:.2f}; answer "
                     f"{u.prompt.references[0]}; said {said[:40]!r} -> {ours[-1]:g}")
    lm_scores = [r["score"] for r in theirs]
    d, lo, hi = newcombe_paired(lm_scores, on_theirs)
    du, lou, hiu = exact_difference(sum(lm_scores), len(lm_scores), sum(ours), len(ours))
    return {"folder": folder.name, "len": length, "chat_template": chat_template, "prompts": len(theirs),
            "lm_eval": float(np.mean(lm_scores)), "ropecli_on_lm_eval_prompts": float(np.mean(on_theirs)),
            "paired_difference": [d, lo, hi], "same_token_ids": int(sum(same_ids)), "differ_by_bos_only": int(sum(bos_only)),
            "lm_eval_prompt_tokens": their_tokens, "ropecli_prompt_tokens": our_tokens,
            "ropecli": float(np.mean(ours)), "difference": [du, lou, hiu],
            "lm_eval_scores": lm_scores, "ropecli_on_lm_eval_scores": on_theirs, "ropecli_scores": ours,
            "lines": lines, "seconds": round(time.perf_counter() - t0, 1), "model": model, "max_new_tokens": max_new,
            "regenerated": regenerate}


def first_difference(a: list[int], b: list[int], tok) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"from token {i}: lm-eval {tok.decode(a[i:i + 3])!r}, ropecli {tok.decode(b[i:i + 3])!r}"


def show(rows: list[dict]) -> None:
    print("| folder | len | prompts | lm-eval | ropecli on lm-eval's prompts | paired diff [95 %] | same ids | ropecli's "
          "prompts | lm-eval − ropecli [95 %, exact] |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        d, lo, hi = r["paired_difference"]
        du, lou, hiu = r["difference"]
        print(f"| {r['folder']} | {r['len']} | {r['prompts']} | {r['lm_eval']:.2f} | {r['ropecli_on_lm_eval_prompts']:.2f} | "
              f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}] | {r['same_token_ids']}/{r['prompts']} | {r['ropecli']:.2f} | "
              f"{du:+.2f} [{lou:+.2f}, {hiu:+.2f}] |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--len", default="512", help="comma-separated lengths")
    ap.add_argument("--samples", type=int, default=4, help="prompts per folder and length, each side")
    ap.add_argument("--folder", action="append", help="METHOD or METHOD@MAP (default: none, yarn)")
    ap.add_argument("--export-len", type=int, default=None,
                    help="the length the folders are exported for (their factor; default: each --len)")
    ap.add_argument("--chat-template", default="none", help="none, or auto (lm-eval's --apply_chat_template beside it)")
    ap.add_argument("--max-new-tokens", type=int, default=GENERATE,
                    help="greedy tokens on every side (RULER's niah: 128; fewer is cheaper, and the field's is 128)")
    ap.add_argument("--no-regenerate", action="store_true",
                    help="ropecli scores lm-eval's own generation where its ids differ, instead of generating again")
    ap.add_argument("--work", default="/tmp/ropecli-lm-eval")
    ap.add_argument("--out", default=None, help="also write the rows as JSON here (rewritten after each row)")
    args = ap.parse_args()
    rows = []
    for length in [int(x) for x in args.len.split(",")]:
        for folder in args.folder or ["none", "yarn"]:
            path = export(args.model, args.export_len or length, Path(args.work), folder)
            row = agree(path, length, args.samples, args.chat_template, args.model, args.max_new_tokens,
                        not args.no_regenerate)
            rows.append(row)
            print(f"{row['folder']} at {length}: {row['seconds']:.0f} s", *row["lines"], sep="\n", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(rows, indent=1))
    show(rows)


if __name__ == "__main__":
    main()
