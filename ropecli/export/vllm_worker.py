"""vLLM as ropecli's measuring engine, the process side: one long-lived process in vLLM's environment that holds one
engine at a time and answers batches of requests (`ropecli.export.vllm_backend` starts it and speaks to it).

    python -m ropecli.export.vllm_worker          (in the Python where vLLM is installed, with ropecli beside it)

One JSON object per line on stdin, one answer per line on stdout (vLLM's own logging goes to stderr: the first thing
this does is point file descriptor 1 at 2, keeping the real stdout for answers):

    {"engine": {"model": DIR, "max_model_len": T, "hf_overrides": {...} | null, "engine": {LLM kwargs}},
     "requests": [{"ids": [...], "score": true, "generate": n, "eos": true} | {"ids": PROMPT, "force": [answer ids]}]}
 -> {"error": null | "one line", "load_s": s | null, "s": s, "rss_mib": MiB,
     "answers": [{"nll": [-log p of ids[1:]], "ranks": [rank of each of those], "tokens": [greedy ids]}
                 | {"nll": [-log p of each forced token], "ranks": [...], "forced": true}, ...]}

An engine is kept while the next batch names the same model, overrides and engine arguments and fits its
max_model_len; one that differs only in its longrope factors and mscales (ropecli's schedules) is rescheduled in place:
its cos/sin tables recomputed by vLLM's own code on every rank, its prefix cache emptied (`reschedule`: milliseconds,
where starting an engine takes seconds on a CPU and a minute for a large model on a GPU); otherwise it is shut down and
the next one started (vLLM's import is paid once, by the first). A batch's
requests go to one `LLM.generate` call: vLLM's scheduler batches them continuously, chunks their prefills and shares
cached prefixes, as it serves. Greedy decoding stops after EOS unless "eos" is false (RULER's and ropecli's rule).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback

import numpy as np

from ropecli.deferred import deferred
from ropecli.export.vllm_engine import ENGINE_DEFAULTS, _one_line, _rss_mib

FORCE = "ropecli_force"  # SamplingParams.extra_args: the tokens `vllm_forced.ForcedTokens` makes a request generate
FORCED = "ropecli.export.vllm_forced:ForcedTokens"  # by name: vLLM imports it (that module names vLLM's classes)
torch = deferred("torch")
vllm = deferred("vllm")
plugins = deferred("vllm.plugins")


class Engines:
    """The one engine this process holds, and what it was started with."""

    def __init__(self):
        self.llm, self.spec = None, None
        self.kept: dict = {}  # {handle: a window's (T, V) log-probabilities}, kept across engines for KL (`full_rows`)

    def fits(self, spec: dict) -> bool:
        """Whether the held engine serves `spec`: the same model, overrides and arguments, max_model_len at least."""
        if self.llm is None:
            return False
        same = {k: v for k, v in self.spec.items() if k != "max_model_len"} == \
            {k: v for k, v in spec.items() if k != "max_model_len"}
        return same and int(self.spec["max_model_len"]) >= int(spec["max_model_len"])

    def close(self) -> None:
        if self.llm is None:
            return
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):  # a tensor-parallel engine's worker processes end here
            core.shutdown()
        self.llm, self.spec = None, None
        gc.collect()

    def open(self, spec: dict) -> tuple[str, float]:
        """The engine for `spec`: ("kept", 0) where the held one serves it, ("rescheduled", seconds) where it differs
        only in its longrope factors and mscales (`reschedule`, on every rank), else ("started", seconds)."""
        if self.fits(spec):
            return "kept", 0.0
        if self.llm is not None and (params := schedule_of(spec)) is not None and schedule_of(self.spec) is not None \
                and without_schedule(spec) == without_schedule(self.spec):
            t0 = time.perf_counter()
            if all(n > 0 for n in self.llm.collective_rpc(reschedule, args=(params,))):
                self.llm.reset_prefix_cache()  # the cached keys were rotated by the schedule before
                self.spec = spec
                return "rescheduled", time.perf_counter() - t0
        self.close()
        # max_logprobs -1: a KL request's whole distributions (prompt_logprobs=-1); the others ask for 0
        kwargs = {**ENGINE_DEFAULTS, "logits_processors": [FORCED], "max_logprobs": -1, **(spec.get("engine") or {})}
        if spec.get("hf_overrides"):
            kwargs["hf_overrides"] = spec["hf_overrides"]
        t0 = time.perf_counter()
        self.llm = vllm.LLM(model=spec["model"], max_model_len=int(spec["max_model_len"]), **kwargs)
        self.spec = spec
        return "started", time.perf_counter() - t0


SCHEDULE_KEYS = ("short_factor", "long_factor", "short_mscale", "long_mscale", "attention_factor", "factor")


def schedule_of(spec: dict) -> dict | None:
    """The longrope parameters an engine's overrides give its one RoPE (ropecli's schedules), else None."""
    params = (spec.get("hf_overrides") or {}).get("rope_parameters") or {}
    return params if params.get("rope_type") == "longrope" else None


def without_schedule(spec: dict) -> str:
    """`spec` but its longrope factors and mscales: two engines equal here differ by their cos/sin tables alone."""
    out = json.loads(json.dumps(spec))
    for block in ("rope_parameters", "rope_scaling"):
        for key in SCHEDULE_KEYS:
            ((out.get("hf_overrides") or {}).get(block) or {}).pop(key, None)
    return json.dumps(out, sort_keys=True)


def reschedule(worker, params: dict) -> int:
    """On one rank (`LLM.collective_rpc`): every longrope rotary of its model given `params`' factors and mscales, its
    cos/sin table computed by vLLM's own code as a new engine computes it (`Phi3LongRoPEScaledRotaryEmbedding.__init__`
    in vllm/model_executor/layers/rotary_embedding/phi3_long_rope_scaled_rope.py: the short table up to
    original_max_position_embeddings, then the long one, concatenated) and written into the same buffer; how many."""
    done = 0
    for module in worker.model_runner.get_model().modules():
        if type(module).__name__ != "Phi3LongRoPEScaledRotaryEmbedding":
            continue
        module.short_factor, module.long_factor = params["short_factor"], params["long_factor"]
        module.short_mscale, module.long_mscale = params["short_mscale"], params["long_mscale"]
        short = module._compute_cos_sin_cache(module.original_max_position_embeddings, module.short_factor,
                                              module.short_mscale)
        long = module._compute_cos_sin_cache(module.max_position_embeddings, module.long_factor, module.long_mscale)
        table = module.long_short_cos_sin_cache
        table.copy_(torch.cat([short.to(table.dtype), long.to(table.dtype)], dim=0))
        done += 1
    return done


def answer(engines: Engines, job: dict) -> dict:
    """One batch: the engine its spec names, then every request in one generate call."""
    out: dict = {"error": None, "load_s": None, "answers": []}
    try:
        how, seconds = engines.open(job["engine"])
        out["load_s" if how == "started" else f"{how}_s"] = seconds
    except Exception as exc:  # noqa: BLE001  the engine's refusal is the answer asked for, in one line
        out["error"] = _one_line(exc)
        return out
    prompts, params = [], []
    for r in job["requests"]:
        n = int(r.get("generate") or 0)
        prompts.append({"prompt_token_ids": [int(i) for i in r["ids"]]})
        if r.get("full"):  # every position's whole distribution: the prompt's and the one token after it (KL)
            params.append(vllm.SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True, prompt_logprobs=-1,
                                              logprobs=-1, flat_logprobs=True, detokenize=False))
            continue
        if r.get("force"):  # teacher-forced through decoding (`vllm_forced`): each forced token's raw logprob, rank
            params.append(vllm.SamplingParams(max_tokens=len(r["force"]), temperature=0.0, ignore_eos=True, logprobs=0,
                                              extra_args={FORCE: [int(t) for t in r["force"]]}))
            continue
        params.append(vllm.SamplingParams(max_tokens=max(1, n), temperature=0.0, ignore_eos=not r.get("eos", False),
                                          prompt_logprobs=0 if r.get("score", True) else None))
    t0 = time.perf_counter()
    try:
        got = engines.llm.generate(prompts, params, use_tqdm=False)
    except Exception as exc:  # noqa: BLE001
        out["error"] = _one_line(exc)
        out["traceback"] = traceback.format_exc()[-6000:]
        engines.close()  # an engine that failed mid-batch is not trusted with the next one
        return out
    out["s"] = time.perf_counter() - t0
    for r, g in zip(job["requests"], got):
        ids = [int(i) for i in r["ids"]]
        lp = g.prompt_logprobs
        one = {"tokens": list(g.outputs[0].token_ids)[:int(r.get("generate") or 0)]}
        if r.get("full"):
            rows = full_rows(g)
            if r["full"] == "keep":  # the reference's: kept here, compared when the scaled engine has run
                engines.kept[r["handle"]] = rows
            else:
                one.update(window_kl(engines.kept.pop(r["full"]), rows))
            out["answers"].append(one)
            continue
        if r.get("force"):
            steps = [step[t] for step, t in zip(g.outputs[0].logprobs, g.outputs[0].token_ids)]
            one.update(nll=[-p.logprob for p in steps], ranks=[int(p.rank) for p in steps],
                       forced=list(g.outputs[0].token_ids) == [int(t) for t in r["force"]])
            out["answers"].append(one)
            continue
        if lp is not None:
            picked = [lp[i][ids[i]] for i in range(1, len(ids))]  # the prompt's own token at each position
            one["nll"] = [-p.logprob for p in picked]
            one["ranks"] = [int(p.rank) for p in picked]  # 1: the argmax
        out["answers"].append(one)
    out["rss_mib"], out["peak_mib"] = _rss_mib(), _rss_mib("VmHWM")
    return out


def full_rows(got) -> np.ndarray:
    """(T, V) float32 log-probabilities at every position of a `full` request's prompt: T - 1 from its prompt_logprobs=-1
    (position 0 has none), the last from its one sampled token's logprobs=-1; each row scattered by token id from vLLM's
    flat lists (`FlatLogprobs`: no object per entry)."""
    parts = [(got.prompt_logprobs, 1), (got.outputs[0].logprobs, 0)]
    spans = [(np.asarray(f.token_ids, dtype=np.int64), np.asarray(f.logprobs, dtype=np.float32),
              list(zip(f.start_indices[first:], f.end_indices[first:]))) for f, first in parts]
    V = 1 + max(int(ids.max()) for ids, _, _ in spans)
    rows = np.full((sum(len(x) for _, _, x in spans), V), -np.inf, dtype=np.float32)
    t = 0
    for ids, lps, bounds in spans:
        for lo, hi in bounds:
            rows[t, ids[lo:hi]] = lps[lo:hi]
            t += 1
    return rows


def window_kl(reference: np.ndarray, scaled: np.ndarray) -> dict:
    """KL(p_reference || p_scaled) per position in float64 (clamped at 0: rounding can give -1e-9) and the positions
    whose argmaxes agree, as `ropecli.models.chunked_scoring.chunk_kl` computes them from logits."""
    V = min(reference.shape[1], scaled.shape[1])
    ref, new = reference[:, :V].astype(np.float64), scaled[:, :V].astype(np.float64)
    p = np.exp(ref)
    with np.errstate(invalid="ignore"):  # -inf - -inf where both give a token no probability: that term is 0
        terms = np.where(p > 0, p * (ref - new), 0.0)
    kl = np.maximum(terms.sum(-1), 0.0)
    return {"divergence": kl.tolist(), "agree": int((ref.argmax(-1) == new.argmax(-1)).sum())}


def main() -> int:
    replies = os.fdopen(os.dup(1), "w", buffering=1)  # the answers' channel: the real stdout
    os.dup2(2, 1)  # everything else anyone prints (vLLM's logging) goes to stderr
    sys.stdout = sys.stderr
    plugins.load_general_plugins()
    engines = Engines()
    replies.write(json.dumps({"ready": True, "version": vllm.__version__}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        if job.get("close"):
            break
        replies.write(json.dumps(answer(engines, job)) + "\n")
    engines.close()
    return 0


if __name__ == "__main__":  # vLLM spawns processes that import __main__: the loop runs only here
    raise SystemExit(main())
