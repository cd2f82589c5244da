"""What a user of plain transformers gets from two exported folders, by greedy generation.

    python benchmarks/map_folder_passkey.py                                   # SmolLM2 at 2L = 16,384, depth 0, 3 prompts
    python benchmarks/map_folder_passkey.py --task niah-single --map selfextend:G=4,W=2048 --prompts 6
    python benchmarks/map_folder_passkey.py --model builtin --len 1024 --map selfextend:G=8,W=64 --prompts 8
    python benchmarks/map_folder_passkey.py --len 8192 --chat-template auto     # the prompts in SmolLM2's chat template

`ropecli export --to transformers` writes a Self-Extend folder (`--method none --map MAP`, its modeling file) and a
YaRN folder (`--method yarn`), each loaded with `AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`.
On the published passkey prompts (`ropecli passkey`'s; --text: ropecli's real-text variant, passkey-text, the filler
from the plays), the needle at --depth, or with --task on a RULER task's prompts (ropecli's builders, the plays as the
haystack), raw or in a chat template (--chat-template auto|none|FILE, as `ropecli passkey --chat-template`), the same
prompts for both, each folder answers by
greedy generation from one prefill of the prompt (its KV cache, as generate() decodes; with --pipeline through
`pipeline("text-generation")`, a second prefill). Retrieved: a passkey said first, with no further digit; a task's
answer anywhere in what it generates (RULER's string_match_all). Its answer NLL: -log P(answer | prompt),
teacher-forced from the same prefill's cache. Paired per prompt: accuracy and NLL of both, and the NLL difference
with its mean."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch


def export(model: str, length: int, out: Path, method: str, position_map: str | None) -> Path:
    if (out / "config.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "ropecli", "export", "--model", model, "--method", method, "--len", str(length),
           "--to", "transformers", "--out", str(out)] + (["--map", position_map] if position_map else [])
    subprocess.run(cmd, check=True)
    return out


def prompts(tokenizer, length: int, depth: float, count: int, text: bool, frame):
    from ropecli.evaluation.data import load_documents, tokenize_documents
    from ropecli.evaluation.passkey import filler_stream, make_published_samples, make_samples

    if not text:
        return make_published_samples(tokenizer, length, [depth], count, seed=0, frame=frame)[0]
    docs, _ = load_documents(None)
    stream = filler_stream(tokenize_documents(docs, tokenizer))
    return make_samples(tokenizer, stream, length, [depth], count, 5, seed=0, frame=frame)[0]


class Prompt:
    """One prompt as the folders see it: ids ([BOS] prompt answer), where the answer starts, the answer as text, and
    how many tokens greedy decoding may take."""

    def __init__(self, ids, answer_start: int, key: str, tokens: int, ruler: bool = False):
        self.ids, self.answer_start, self.key, self.tokens, self.ruler = ids, answer_start, key, tokens, ruler


def passkey_prompts(tokenizer, length: int, depth: float, count: int, text: bool, frame) -> list[Prompt]:
    return [Prompt(s.ids, s.answer_start, str(s.key), 8) for s in prompts(tokenizer, length, depth, count, text, frame)]


def task_prompts(tokenizer, task: str, length: int, depth: float, count: int, frame) -> list[Prompt]:
    """RULER's prompts of `task` (ropecli's builders: the held-out plays as the haystack), the needle at `depth`."""
    from ropecli.evaluation.data import load_documents
    from ropecli.evaluation.ruler.builders import Haystack
    from ropecli.evaluation.ruler.generate import make_units
    from ropecli.evaluation.ruler.templates import TASKS

    docs, _ = load_documents(None)
    units = make_units(tokenizer, Haystack.of([d.text for d in docs]), task, length, [depth], count, seed=0, frame=frame)
    return [Prompt(u.ids, u.answer_start, u.prompt.answer.strip(), min(TASKS[task].tokens_to_generate, 24), True)
            for u in units]


def retrieved(said: str, s: Prompt) -> bool:
    """A passkey: the key said first, not a longer number. A RULER task: its own score (string_match_all, the answer
    anywhere in what was generated, case ignored)."""
    from ropecli.evaluation.ruler.answer_scoring import string_match_all

    if s.ruler:
        return string_match_all(said, [s.key]) == 1.0
    key = s.key
    return re.match(rf"\s*{re.escape(key)}(?!\d)", said) is not None


def answer(folder: Path, samples, through_pipeline: bool) -> list[tuple[bool, float, str]]:
    """Per sample: (retrieved by greedy generation, answer NLL in nats, what it generated). One prefill of the prompt;
    from its KV cache (copied) the answer teacher-forced (its NLL) and greedy decoding, token by token, as generate()
    runs it. `through_pipeline`: greedy generation by `pipeline("text-generation")` instead (a second prefill)."""
    import copy

    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True, dtype=torch.float32).eval()
    generate = pipeline("text-generation", model=model, tokenizer=tokenizer) if through_pipeline else None
    rows = []
    for s in samples:
        ids = torch.as_tensor(s.ids)[None]
        prompt, key = ids[:, :s.answer_start], ids[:, s.answer_start:]
        with torch.no_grad():
            first = model(prompt, use_cache=True)
            cache = first.past_key_values
            rest = model(key[:, :-1], past_key_values=copy.deepcopy(cache), use_cache=True).logits if key.shape[1] > 1 \
                else first.logits[:, :0]
            logits = torch.cat([first.logits[:, -1:], rest], dim=1)[0].float()
            nll = float(-torch.log_softmax(logits, -1).gather(1, key[0, :, None]).sum())
            if generate is None:
                step, said_ids, cache = first.logits[:, -1:].argmax(-1), [], copy.deepcopy(cache)
                for _ in range(s.tokens):
                    said_ids.append(int(step))
                    step = model(step, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
                said = tokenizer.decode(said_ids)
        if generate is not None:
            text = tokenizer.decode(s.ids[:s.answer_start], skip_special_tokens=False)
            said = generate(text, max_new_tokens=s.tokens, do_sample=False, return_full_text=False,
                            add_special_tokens=False)[0]["generated_text"]
        rows.append((retrieved(said, s), nll, said))
        print(f"  {folder.name}: key {s.key} -> {said!r}  NLL {nll:.2f}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--len", type=int, default=16384)
    ap.add_argument("--map", default="selfextend:G=8,W=2048")
    ap.add_argument("--depth", type=float, default=0.0)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--task", default=None, help="a RULER task's prompts (e.g. niah-single) instead of passkeys")
    ap.add_argument("--text", action="store_true", help="ropecli's real-text passkey (passkey-text), not the published one")
    ap.add_argument("--chat-template", default="none", help="none (raw prompts), auto (the model's own) or a Jinja FILE")
    ap.add_argument("--work", default="/tmp/ropecli-map-folders")
    ap.add_argument("--pipeline", action="store_true", help="greedy generation through pipeline (a second prefill)")
    args = ap.parse_args()
    work = Path(args.work)
    t0 = time.perf_counter()
    mapped = export(args.model, args.len, work / f"{args.model}-map-{args.len}", "none", args.map)
    yarn = export(args.model, args.len, work / f"{args.model}-yarn-{args.len}", "yarn", None)
    from transformers import AutoTokenizer

    from ropecli.errors import RopeCliError
    from ropecli.evaluation.chat_template import prompt_frame

    tokenizer = AutoTokenizer.from_pretrained(str(mapped))
    try:
        frame = prompt_frame(args.chat_template, tokenizer)
    except RopeCliError as e:
        sys.exit(f"Error: {e}")
    samples = passkey_prompts(tokenizer, args.len, args.depth, args.prompts, args.text, frame) if args.task is None else \
        task_prompts(tokenizer, args.task, args.len, args.depth, args.prompts, frame)
    got = {name: answer(folder, samples, args.pipeline) for name, folder in (("map", mapped), ("yarn", yarn))}
    diff = np.array([m[1] - y[1] for m, y in zip(got["map"], got["yarn"])])
    how = "pipeline" if args.pipeline else "the folder's KV cache"
    what = args.task or ("passkey-text" if args.text else "passkey")
    print(f"{args.model} at {args.len} tokens, {what} {frame.describe()}, needle at depth {args.depth}, {len(samples)} prompts, greedy through "
          f"{how} ({time.perf_counter() - t0:.0f} s):")
    for name, label in (("map", f"none@{args.map}"), ("yarn", "yarn")):
        acc = np.mean([r[0] for r in got[name]])
        print(f"  {label:28s} retrieved {acc:5.0%}   answer NLL mean {np.mean([r[1] for r in got[name]]):7.2f} nats")
    print(f"  paired NLL difference (map - yarn): {', '.join(f'{d:+.2f}' for d in diff)}; mean {diff.mean():+.2f} nats")


if __name__ == "__main__":
    main()
