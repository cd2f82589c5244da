"""Make ropecli's pre-scaled built-in model: the built-in model (L0 = 256) fine-tuned at 4 x L0 = 1024 tokens
under a llama3 x4 schedule written into its config, as Llama 3.1 was extended from 8k to 128k. It is the
model *as shipped* that ropecli's `native` candidate must reproduce (`--model builtin-llama3`).

    python examples/train_prescaled_model.py --out ropecli/builtin_llama3_model

Rows: training-play text at 1024 tokens (BOS first); `--repeat-share` of them a segment written twice,
so that copying across the whole shipped length is learnt (the skill key-token PPL and retrieval need).
Seeded; AdamW, warmup then cosine over `--steps`. The weights are stored in float16 (half the size; ropecli
loads them in float32). Writes config.json, model.safetensors, the tokenizer and training_log.json.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from ropecli.evaluation.corpus import HELD_OUT, held_out_plays, training_plays

BUILTIN = Path(__file__).resolve().parent.parent / "ropecli" / "builtin_model"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="ropecli/builtin_llama3_model")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--factor", type=float, default=4.0, help="the shipped llama3 factor: Ls = factor x L0")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--repeat-share", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    tokenizer = AutoTokenizer.from_pretrained(BUILTIN)
    model = LlamaForCausalLM.from_pretrained(BUILTIN, dtype=torch.float32)
    L0 = model.config.max_position_embeddings
    Ls = int(round(args.factor * L0))
    # the schedule the model ships, in transformers 5's form (Llama 3.1's parameters, from L0)
    model.config.rope_parameters = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": args.factor,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": L0}
    model.config.max_position_embeddings = Ls
    model = LlamaForCausalLM.from_pretrained(BUILTIN, config=model.config, dtype=torch.float32)  # rotary rebuilt from it
    bos = tokenizer.bos_token_id
    ids = np.concatenate([np.array(tokenizer(t, add_special_tokens=False)["input_ids"], dtype=np.int64)
                          for t in training_plays().values()])
    val = np.concatenate([np.array(tokenizer(t, add_special_tokens=False)["input_ids"], dtype=np.int64)
                          for t in list(held_out_plays().values())[:2]])
    body = Ls - 1

    def rows(src: np.ndarray, n: int, repeat_share: float) -> torch.Tensor:
        out = []
        for _ in range(n):
            if rng.random() < repeat_share:
                half = body // 2
                s = int(rng.integers(0, src.size - body))
                seg = src[s:s + half]
                out.append(np.concatenate(([bos], seg, seg, src[s + half:s + half + body - 2 * half])))
            else:
                s = int(rng.integers(0, src.size - body))
                out.append(np.concatenate(([bos], src[s:s + body])))
        return torch.from_numpy(np.stack(out))

    @torch.inference_mode()
    def val_loss() -> float:
        model.eval()
        r = np.random.default_rng(1234)
        starts = r.integers(0, val.size - body, size=8)
        x = torch.from_numpy(np.stack([np.concatenate(([bos], val[s:s + body])) for s in starts]))
        loss = float(np.mean([model(x[i:i + 4], labels=x[i:i + 4]).loss.item() for i in range(0, 8, 4)]))
        model.train()
        return loss

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    log = [{"step": 0, "val_loss_at_Ls": round(val_loss(), 4)}]
    print(log[-1], flush=True)
    t0, warmup = time.time(), 30
    model.train()
    for step in range(1, args.steps + 1):
        lr = args.lr * min(1.0, step / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = rows(ids, args.batch, args.repeat_share)
        loss = model(x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0:
            log.append({"step": step, "loss": round(loss.item(), 4), "lr": lr, "seconds": round(time.time() - t0, 1)})
            if step % 100 == 0 or step == args.steps:
                log[-1]["val_loss_at_Ls"] = round(val_loss(), 4)
            print(log[-1], flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(out, safe_serialization=True)
    cfg = json.loads((out / "config.json").read_text())
    cfg["dtype"] = "float32"  # computed in float32 by default; the file holds float16 values
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    tokenizer.save_pretrained(out)
    (out / "training_log.json").write_text(json.dumps({
        "from": "ropecli/builtin_model", "shipped": model.config.rope_parameters, "L0": L0, "Ls": Ls,
        "steps": args.steps, "batch": args.batch, "lr": args.lr, "repeat_share": args.repeat_share, "seed": args.seed,
        "minutes": round((time.time() - t0) / 60, 2), "held_out_plays": list(HELD_OUT), "log": log}, indent=1))
    print(f"saved to {out}", flush=True)


if __name__ == "__main__":
    main()
