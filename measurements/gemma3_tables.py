"""The tables of docs/measurements/gemma3.md from measurements/gemma3/*.json (bash measurements/gemma3.sh): Gemma 3 270M
past its L = 32k on this CPU, its sliding layers banded, and the memory estimate each command printed against the peak
it measured (SmolLM2 at 16k beside it).

    python measurements/gemma3_tables.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tables import header, vs_best  # noqa: E402  (the SmolLM2 pages' table head and paired verdict cell)

HERE = Path(__file__).resolve().parent / "gemma3"
GB = 1e9


def load(name: str) -> dict | None:
    try:
        return json.loads((HERE / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def label(r: dict) -> str:
    """none, yarn, none@selfextend(...) -> what the row runs, said short."""
    return r["label"].replace("(beta_fast=32, beta_slow=1)", "").replace("none@", "")


def passkey_rows(name: str) -> None:
    """The published passkey per schedule: accuracy, the answer NLL of each prompt (by depth) and its mean, the paired
    difference with the best row, and what one prompt cost."""
    d = load(name)
    if d is None:
        return
    r0 = d["results"][0]
    depths = [b["depth"] for b in r0["by_depth"]]
    print(f"{name}: the published passkey at {r0['len']:,} tokens (k = {r0['factor']:g}), key at depths "
          f"{', '.join(f'{x:g}' for x in depths)}, {r0['samples']} prompts per row, paired\n")
    header("schedule", "correct", *[f"answer NLL, depth {x:g}" for x in depths], "mean", "vs best (paired, ± 95 %)",
           "s per prompt")
    for r in sorted(d["results"], key=lambda r: r["answer_nll"]):
        per = [f"{b['answer_nll']:.3f}" for b in r["by_depth"]]
        print(f"| {label(r)} | {round(r['accuracy'] * r['samples'])}/{r['samples']} | {' | '.join(per)} | "
              f"{r['answer_nll']:.3f} | {vs_best(r['vs_best'])} | {r['seconds'] / r['samples']:.0f} |")
    print()


def ppl_rows(name: str) -> None:
    """PPL per schedule on the window(s), the paired difference with the best, and what one window cost."""
    d = load(name)
    if d is None:
        return
    r0 = d["results"][0]
    print(f"{name}: PPL at {r0['len']:,} tokens (k = {r0['factor']:g}), {d['samples']} window(s) of {d['data']}\n")
    L = d["train_len"]
    header("schedule", "PPL", "NLL/token", f"NLL/token before {L:,}", f"NLL/token from {L:,}", "vs best (paired)",
           "s per window")
    for r in sorted(d["results"], key=lambda r: r["ppl"]):
        n = len(r["window_position_nll"][0])  # per window, equal bins of its predictions (mean NLL per token)
        split = n * L // r["len"]  # the bins before position L
        early = [b for w in r["window_position_nll"] for b in w[:split]]
        late = [b for w in r["window_position_nll"] for b in w[split:]]
        print(f"| {label(r)} | {r['ppl']:.2f} | {r['nll']:.4f} | {sum(early) / len(early):.4f} | "
              f"{sum(late) / len(late):.4f} | {vs_best(r['vs_best'])} | "
              f"{r['seconds'] / max(1, len(r.get('window_nll') or [1])):.0f} |")
    print()


def time_rss(name: str) -> int | None:
    """The whole process's peak resident memory, /usr/bin/time -v's (loading included), in bytes."""
    try:
        for line in (HERE / f"{name}.time").read_text().splitlines():
            if "Maximum resident set size" in line:
                return int(line.split(":")[-1]) * 1024
    except OSError:
        return None
    return None


def memory_rows(names: list[str]) -> None:
    """Per run: the estimate of a scoring pass from the parts the command recorded (weights + activations + this
    process, `MemoryPlan.total` as ropecli prints it now: the cache is off when ropecli scores), with the bound under a
    position map (every run here runs maps), the total the run printed then (the KV cache counted in), the
    evaluation's measured peak (VmHWM after loading), peak / estimate under a map, and loading's own peak."""
    header("run", "tokens", "estimate to score", "under a map", "printed then (with the KV cache, under a map)",
           "measured peak (evaluation)", "peak / estimate under a map", "loading peak")
    for name in names:
        d = load(name)
        if d is None or not d.get("memory"):
            continue
        m = d["memory"]
        scoring = m["weights_bytes"] + m["activation_bytes"] + m["process_bytes"]
        mapped = scoring + m["map_extra_bytes"]
        printed = m["weights_bytes"] + m["kv_cache_bytes"] + m["activation_bytes"] + m["process_bytes"] + m["map_extra_bytes"]
        print(f"| {name} | {m['length']:,} | {scoring / GB:.2f} GB | {mapped / GB:.2f} GB | {printed / GB:.2f} GB | "
              f"{m['peak_bytes'] / GB:.2f} GB | {m['peak_bytes'] / mapped:.2f} | {m['load_peak_bytes'] / GB:.2f} GB |")
    print()


if __name__ == "__main__":
    passkey_rows("passkey-49152")
    ppl_rows("ppl-65536")
    memory_rows(["passkey-49152", "ppl-65536", "smollm2-memory-16384"])
    sys.stdout.flush()
