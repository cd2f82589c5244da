"""bench_vllm_maps.py's worker, run in vLLM's environment: two engines (a schedule's, a map folder's) loaded in one
process and measured in turns, the order alternating round by round, so both see the machine in the same state.
Each round's prompts are new to the engines (prefix caching on): a prompt's prefill is computed once; the time per
decoded token is taken between two runs of a prompt already cached (their prefills skipped alike).

    python benchmarks/vllm_engines_in_turns.py JOB.json OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import vllm
from vllm import plugins

from ropecli.export.vllm_engine import ENGINE_DEFAULTS


def main(job_path: str, out_path: str) -> None:
    """In vLLM's environment: both engines loaded, then measured in turns (`--rounds`), the order alternating."""
    plugins.load_general_plugins()
    job = json.loads(Path(job_path).read_text())

    def rss_mib() -> float:
        return next(int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))

    def timed(llm, ids, n) -> float:
        t = time.perf_counter()
        llm.generate([{"prompt_token_ids": ids}], vllm.SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True),
                     use_tqdm=False)
        return time.perf_counter() - t

    llms, memory = {}, {}
    for kind in ("schedule", "map"):  # the schedule's first: what the map's engine adds is measured on top of it
        before = rss_mib()
        llms[kind] = vllm.LLM(model=job[kind]["model"], hf_overrides=job[kind].get("hf_overrides"),
                              max_model_len=job["max_model_len"], **ENGINE_DEFAULTS, enable_prefix_caching=True,
                              kv_cache_memory_bytes=job["kv_bytes"])
        timed(llms[kind], job["firsts"][0][:64], 2)  # warm: the first call pays for lazily made buffers
        memory[kind] = [before, rss_mib()]
    rounds = []
    for r in range(job["rounds"]):
        got = {}
        for kind in (("map", "schedule") if r % 2 else ("schedule", "map")):
            llm = llms[kind]
            prefill = timed(llm, job["firsts"][r], 1)  # a prompt not seen before: its prefill computed
            timed(llm, job["seconds"][r], 1)  # another, now in the prefix cache: the two runs below skip its prefill
            short = timed(llm, job["seconds"][r], job["short"])
            long = timed(llm, job["seconds"][r], job["short"] + job["tokens"])
            got[kind] = {"prefill_s": prefill, "per_token_ms": 1000 * (long - short) / job["tokens"]}
        rounds.append(got)
    memory["map"][1] = rss_mib()  # after every round: the map's plans and caches included
    Path(out_path).write_text(json.dumps({"version": vllm.__version__, "rounds": rounds,
                                          "added_mib": {k: b - a for k, (a, b) in memory.items()}}))



if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
