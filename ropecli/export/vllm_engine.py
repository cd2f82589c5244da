"""vLLM's own engine as the referee of what ropecli exports for it: prompt logprobs and greedy tokens of a folder (a
schedule's `--hf-overrides` applied, or a map folder through ropecli's plugin) from `vllm.LLM`, in the Python where vLLM
is installed.

vLLM pins its own torch and transformers, so it usually lives in a virtual environment of its own: ropecli runs this
module there as a process (`python -m ropecli.export.vllm_engine JOB.json OUT.json`; `runtimes.vllm.engine_python`
finds it: $ROPECLI_VLLM_PYTHON, else this Python where vLLM imports here; the checkout's tests look for its `.venv-vllm`
too). ropecli must be
installed in that environment too (`pip install -e . --no-deps` there), which is also what makes vLLM serve map folders.

A job is one process: several engines one after another (`engines`), each engine loaded once for all its phases. The
engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, the "uni" executor), so the first engine pays vLLM's
import and later ones load in seconds. A phase's requests are handed to one `LLM.generate` call together: vLLM's
scheduler batches them continuously, chunks their prefills (`max_num_batched_tokens`) and shares cached prefixes
(prefix caching is vLLM's default), as it serves.

    job  = {"engines": [{"model": DIR, "max_model_len": T, "hf_overrides": {...} | null, "engine": {LLM kwargs},
                         "phases": [[{"ids": [...], "generate": n}, ...], ...]}]}
    out  = {"version": vLLM's, "plugins": [...], "engines": [{"error": null | "one line", "load_s": s,
            "phases": [{"s": s, "requests": [{"nll": [per token after the first], "tokens": [greedy ids]}]}]}]}
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError

vllm = deferred("vllm")
plugins = deferred("vllm.plugins")

ENGINE_DEFAULTS = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.2, "trust_remote_code": True,
                   "distributed_executor_backend": "uni"}
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_engine(job: dict, python: str | None, env: dict | None = None, timeout: float = 1800) -> dict:
    """Run `job` with `python`, vLLM's environment's (`runtimes.vllm.engine_python`), and return its answer; one line
    where none was found or the process fails."""
    if python is None:
        raise RopeCliError("vLLM is not installed here: install it in an environment of its own with ropecli beside it "
                           "(see docs/guide/export.md, 'vLLM') and set ROPECLI_VLLM_PYTHON to its python")
    with tempfile.TemporaryDirectory(prefix="ropecli-vllm-") as tmp:
        src, dst = Path(tmp) / "job.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(job))
        proc = subprocess.run([python, "-m", "ropecli.export.vllm_engine", str(src), str(dst)], capture_output=True,
                              text=True, timeout=timeout, env={**os.environ, **ENV, **(env or {})}, cwd=tmp)
        if proc.returncode != 0 or not dst.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RopeCliError(f"vLLM's engine ({python}) failed: {tail[0][:400]}")
        out = json.loads(dst.read_text())
    out["log"] = proc.stderr[-20000:]
    return out


def _one_line(exc: BaseException) -> str:
    """An exception as vLLM's user sees its message: the innermost cause's type and first line."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    lines = [line.strip() for line in str(exc).strip().splitlines()] or [""]
    # pydantic's "1 validation error for ModelConfig" says what failed on a later line ("Value error, ...")
    said = next((line.removeprefix("Value error, ") for line in lines if line.startswith("Value error, ")), lines[0])
    return f"{type(exc).__name__}: {said}"


def _rss_mib(field: str = "VmRSS") -> float:
    """This process's resident memory (VmRSS, MiB): the engine's weights, KV cache and work buffers; VmHWM: its peak."""
    for line in open("/proc/self/status"):
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_job(job: dict) -> dict:
    """In vLLM's environment: every engine of the job, one after another, each phase one generate call."""
    plugins.load_general_plugins()
    out = {"version": vllm.__version__, "plugins": sorted(e.name for e in entry_points(group=f"{vllm.__name__}.general_plugins")),
           "engines": []}
    for spec in job["engines"]:
        record: dict = {"error": None, "phases": []}
        out["engines"].append(record)
        kwargs = {**ENGINE_DEFAULTS, **(spec.get("engine") or {})}
        if spec.get("hf_overrides"):
            kwargs["hf_overrides"] = spec["hf_overrides"]
        t0 = time.perf_counter()
        try:
            llm = vllm.LLM(model=spec["model"], max_model_len=int(spec["max_model_len"]), **kwargs)
        except Exception as exc:  # noqa: BLE001  the engine's refusal is the answer asked for
            record["error"] = _one_line(exc)
            continue
        record["load_s"] = time.perf_counter() - t0
        for phase in spec.get("phases") or []:
            prompts, params = [], []
            for r in phase:
                n = int(r.get("generate") or 0)
                prompts.append({"prompt_token_ids": list(r["ids"])})
                params.append(vllm.SamplingParams(max_tokens=max(1, n), temperature=0.0,
                                             ignore_eos=True, prompt_logprobs=0 if r.get("score", True) else None))
            t1 = time.perf_counter()
            try:
                got = llm.generate(prompts, params, use_tqdm=False)
            except Exception as exc:  # noqa: BLE001  one engine's failure is its record's; the next engines still run
                record["error"] = _one_line(exc)
                record["traceback"] = traceback.format_exc()[-6000:]
                break
            seconds = time.perf_counter() - t1
            answers = []
            for r, g in zip(phase, got):
                ids = list(r["ids"])
                lp = g.prompt_logprobs
                nll = None if lp is None else [-lp[i][ids[i]].logprob for i in range(1, len(ids))]
                answers.append({"nll": nll, "tokens": list(g.outputs[0].token_ids)[:int(r.get("generate") or 0)]})
            record["phases"].append({"s": seconds, "requests": answers, "rss_mib": _rss_mib()})
        del llm
        gc.collect()
    return out


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(run_job(job)))
    return 0


if __name__ == "__main__":  # vLLM spawns processes that import __main__: the engine starts only here
    raise SystemExit(main(sys.argv[1:]))
