"""Decode across L: what an export does to generation, measured.

A runtime serves a prompt and then generates through a KV cache; where its schedule changes mid-generation
(transformers switching a longrope export from short to long factors at L, or growing dynamic NTK's base token
by token) the keys already cached keep the rotation they were made with. The measurement: each held-out
window of N tokens, its first P (< the switch) a prompt prefilled, the rest teacher-forced through the cache
in the runtime's own segments (`ropecli.export.served.decode_segments`, computed by the caller: the export layer
knows the runtimes), scored token by token; beside it the
same tokens in one forward pass under what the runtime applies at N. The damage is the paired difference
of the two mean NLLs over the continuation (nats per token), with its 95% interval over windows and a
verdict: "equivalent" (generation-safe, shown within ±margin), "worse" (generation is damaged), undecided.
Every window is cached (metric "decode": the runtime's segments are in the key), so nothing is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ropecli.evaluation.evaluator import Evaluator
from ropecli.evaluation.inference import MARGIN
from ropecli.evaluation.metrics import PPL
from ropecli.evaluation.stats import paired_difference
from ropecli.spec import Spec


@dataclass(frozen=True)
class DecodePlan:
    """Prefill `prompt_len` tokens, decode to `total_len`: the default prompt ends 1/8 of the way before the
    switch (L, or Ls for a model that ships a schedule), so that part of the continuation is decoded before it."""
    prompt_len: int
    total_len: int

    @classmethod
    def across(cls, switch: int, longest: int, prompt_len: int | None = None) -> "DecodePlan":
        """From 1/8 of the switch before it to a quarter past it (or `longest`, if shorter): the tokens where a
        switch's stale keys show, at a fraction of a pass over the longest request."""
        P = prompt_len if prompt_len is not None else max(1, switch - max(1, switch // 8))
        total_len = min(longest, switch + max(2, switch // 4))
        if not 0 < P < total_len:
            raise ValueError(f"the prompt ({P} tokens) must be shorter than the decoded length {total_len}")
        return cls(P, total_len)


def measure_decode(ev: Evaluator, label: str, segments: list, whole, plan: DecodePlan, samples: int | None = None,
                   margin: float = MARGIN, span: int | None = None) -> dict:
    """The decode damage of one export as a runtime generates, on the first `samples` windows of `plan.total_len`
    tokens (`span`: the first tokens of the windows at span). `segments` [(end, Served)] are the runtime's forward
    passes after the prefill (`ropecli.export.served.decode_segments`), `whole` what it applies to one pass of
    total_len tokens. Returns {runtime, candidate, prompt_len, total_len, segments, one_schedule, decode_nll,
    one_pass_nll, damage (paired: diff, half_width, verdict …), worst_token, windows}; `unservable` where the
    runtime cannot serve the export."""
    P, N = plan.prompt_len, plan.total_len
    head = {"runtime": whole.runtime, "candidate": label, "prompt_len": P, "total_len": N,
            "segments": [{"end": n, "applies": s.spec.label if s.spec else None, "how": s.how} for n, s in _runs(segments)]}
    if whole.spec is None or any(s.spec is None for _, s in segments):
        return {**head, "unservable": whole.how}
    scheduled = [(n, *_schedule(ev, s.spec, n)) for n, s in segments]
    one = _schedule(ev, whole.spec, N)
    one_schedule = all(_key(sched) == _key(one[0]) and log_n == one[1] for _, sched, log_n in scheduled)
    if one_schedule and samples is None:  # no switch: equal to one pass in exact arithmetic; measured on one window
        samples = 1
    head["one_schedule"] = one_schedule
    inputs = ev.inputs.resized(samples).spanning(span)  # `span`: the first N tokens of the windows at span (paired)
    windows = inputs.windows(N)
    # not who serves: the schedules (the first segment's end is the prompt's length) are the key, so runtimes that
    # run the same ones share a window
    base = {"model": ev.backend.fingerprint, "runtime": ev.backend.runtime, "metric": "decode", "len": N,
            "dtype": ev.backend.dtype, "segments": [[n, _key(sched), log_n] for n, sched, log_n in scheduled],
            "one_pass": [_key(one[0]), one[1]]}
    fps = inputs.unit_fingerprints(PPL.unit_metric, N)
    rows = []
    for i, ids in enumerate(windows.ids):
        key = {**base, "unit": fps[i]}
        got = ev.cache.get(key)
        if got is None:
            value = _one_window(ev, ids, scheduled, one)
            ev.cache.put(key, {"value": value, "seconds": 0.0})
            ev.forward_passes += 1
        else:
            value = got["value"]
        rows.append(value)
    decode = [r[0] / r[2] for r in rows]
    single = [r[1] / r[2] for r in rows]
    if len(rows) > 1:
        damage = paired_difference(decode, single, windows.names, margin)
    else:  # one window: the difference, no interval (a single schedule: float rounding only)
        diff = decode[0] - single[0]
        damage = {"diff": diff, "half_width": None, "n": 1,
                  "verdict": "equivalent" if one_schedule and abs(diff) < margin else "undecided"}
    return {**head, "decode_nll": float(np.mean(decode)), "one_pass_nll": float(np.mean(single)), "damage": damage,
            "worst_token": float(max(r[3] for r in rows)), "windows": len(rows),
            "per_window": [[d, s] for d, s in zip(decode, single)]}


def _one_window(ev: Evaluator, ids: np.ndarray, scheduled: list, one: tuple) -> list:
    """[decode NLL sum, one-pass NLL sum, tokens, the largest |difference| of one token] over the continuation."""
    P = scheduled[0][0]
    decoded = ev.backend.decode_losses(ids, [(n, sched, log_n) for n, sched, log_n in scheduled])
    with ev.backend.scaled(*one):
        single = ev.backend.token_losses(ids, ev.chunk_tokens)[P - 1:]
    return [float(decoded.sum()), float(single.sum()), int(decoded.size), float(np.max(np.abs(decoded - single)))]


def _schedule(ev: Evaluator, spec: Spec, length: int):
    """(Schedule, log_n) a forward pass ending at `length` runs under."""
    return ev.schedule_for(spec, length)[1], spec.log_n


def _key(sched) -> dict:
    return {"method": sched.method, "attention": float(sched.attention_factor),
            "factors": [float(x) for x in np.asarray(sched.factors, dtype=np.float64)]}


def _runs(segments: list) -> list:
    """Consecutive segments applying the same schedule merged (dynamic NTK: one per token), for the report."""
    out = []
    for n, s in segments:
        if out and out[-1][1].spec is not None and s.spec is not None and repr(out[-1][1].spec) == repr(s.spec) \
                and not s.how.startswith("dynamic"):
            out[-1] = (n, s)
        else:
            out.append((n, s))
    return out if len(out) <= 4 else [out[0], out[1], out[-1]]
