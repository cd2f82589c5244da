"""The cache formats ropecli still reads, and how each becomes today's per-window entries (the
evaluator asks `migrate` for the windows its cache lookup missed; nothing here runs a model).

- Format 2 under an earlier fingerprint of the same weights (`earlier_fingerprints` of the backend: the one with
  transformers' version in it; ropecli 0.x's, with no runtime in the key): a window found there is stored under
  today's key and reused (`rekeyed`).
- Format 2 with the runtime spelled as an earlier ropecli spelled it (`llama.cpp`, now `llamacpp`: one
  spelling per runtime, `ropecli.export.runtimes`): found under the old spelling, stored under today's (`respelled`).
- Format 1 (`LEGACY_FORMAT`): one entry per whole evaluation (samples and seed in the key). PPL and
  passkey entries hold every window's numbers and are split into per-window entries at once
  (`migrated`); KL entries lack the per-token values its percentiles need, so they are recomputed
  (counted as `stale`).
Counters move only through the cache's own methods (`EvalCache.reused`, `count`).
"""

from __future__ import annotations

import math

from ropecli.evaluation.cache import FORMAT, EvalCache
from ropecli.evaluation.metrics import metric_record


def rekeyed(cache: EvalCache, keys: list[dict], missing: list[int], earlier: tuple[str, ...], store: bool) -> dict[int, tuple]:
    """Windows stored under an earlier fingerprint of the same weights (`ropecli.backends.load.fingerprint`): the one
    with transformers' version in it (today's key otherwise), then ropecli 0.x's (no runtime in the key):
    {index: (value, seconds)}, each stored under today's key."""
    versioned, oldest = (tuple(earlier) + (None, None))[:2]

    def olds(key: dict) -> list[dict]:
        return ([key | {"model": versioned}] if versioned else []) + \
               ([{k: v for k, v in key.items() if k != "runtime"} | {"model": oldest}] if oldest else [])
    return _reuse(cache, keys, missing, olds, store)


OLD_SPELLINGS = {"llamacpp": ("llama.cpp",)}  # runtime -> how earlier cache keys spelled it
# metric -> the name its units were cached under before: passkey-text's real-text prompts were "passkey" until the
# published prompt took that name (whose keys carry "prompt": "landmark", so an old entry never serves it)
OLD_METRIC_NAMES = {"passkey-text": ("passkey",)}


def respelled(cache: EvalCache, keys: list[dict], missing: list[int], store: bool) -> dict[int, tuple]:
    """Windows stored under an earlier spelling of the runtime, or prompts under an earlier name of their metric:
    {index: (value, seconds)}, stored under today's key."""
    def olds(key: dict) -> list[dict]:
        return ([{**key, "runtime": old} for old in OLD_SPELLINGS.get(key.get("runtime"), ())]
                + [{**key, "metric": old} for old in OLD_METRIC_NAMES.get(key.get("metric"), ())])

    return _reuse(cache, keys, missing, olds, store)


def _reuse(cache: EvalCache, keys: list[dict], missing: list[int], olds, store: bool) -> dict[int, tuple]:
    """{index: (value, seconds)} of the missing windows found under one of `olds(key)` (tried in order), each
    stored under today's key (where `store`: rank 0) and counted as rekeyed."""
    found: dict[int, tuple] = {}
    for i in missing:
        got = next((g for g in (cache.legacy(old, FORMAT) for old in olds(keys[i])) if g is not None), None)
        if got is not None:
            found[i] = tuple(got["value"]), got["seconds"]
            if store:
                cache.put(keys[i], got)
            cache.reused(1, "rekeyed")
    return found


def whole_evaluation(cache: EvalCache, legacy_key: dict, metric: str, keys: list[dict], store: bool) -> dict[int, tuple]:
    """Per-window values from a format-1 whole-evaluation entry, stored per window at once."""
    old = cache.legacy(legacy_key)
    if old is None:
        return {}
    if metric == "kl":
        cache.count("stale")
        return {}
    if metric == "ppl":
        n = len(old["window_nll"])
        per = old["tokens"] // n  # every window scores the same number of tokens
        rows = [((math.inf if m is None else m * per), per) for m in old["window_nll"]]
    else:
        rows = [(float(c), math.inf if a is None else a) for c, a in zip(old["prompt_correct"], old["prompt_answer_nll"])]
    if len(rows) != len(keys):
        return {}
    cache.count("migrated")
    if store:
        for key, value in zip(keys, rows):
            cache.put(key, {"value": list(value), "seconds": 0.0})
    cache.reused(len(keys))
    return {i: (value, 0.0) for i, value in enumerate(rows)}


def legacy_key(backend, score_last: int | None, spec, length: int, geom, sched, metric: str, inputs) -> dict:
    """The key of a whole evaluation in cache format 1 (before per-window entries): read, never written."""
    key = {
        "model": backend.fingerprint, "data": inputs.fingerprint(metric, length), "len": length,
        "samples": inputs.count(metric_record(metric)), "seed": inputs.seed, "method": sched.method,  # windows, or prompts per depth
        "params": {k: (list(map(float, v)) if k == "factors" else v) for k, v in sched.params.items()},
        "factor": geom.factor, "log_n": spec.log_n, "dtype": backend.dtype, "score_last": score_last,
        "rope_layers": list(backend.rope.scaled_types) or [None],
    }
    if metric != "ppl":
        key["metric"] = OLD_METRIC_NAMES.get(metric, (metric,))[0]  # format 1 knew passkey-text as "passkey"
        key.pop("score_last")
    return key
