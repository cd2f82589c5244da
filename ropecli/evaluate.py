"""Perplexity of a loaded model under a schedule, at a length: the engine every command runs on.

The evaluation protocol, whole (the YaRN repo's):
- Windows (`ropecli.data.sample_windows`): each document tokenized whole; documents shorter than
  `len` skipped; each cut into non-overlapping windows of exactly `len` tokens (BOS first where the
  tokenizer has one), window 0 being the document's head; `samples` windows taken round-robin over
  the documents in a `seed`ed order. The same windows for every schedule, so results are paired.
- One forward pass per window (no KV cache), every prediction scored (or the last `score_last`);
  the loss from final hidden states in chunks (`ropecli.model.scoring`), never full logits.
- PPL = exp(total NLL / total scored tokens). `ppl_err` is the standard error from the spread
  across windows: ppl * std(per-window mean NLL) / sqrt(samples) (delta method; null for 1 window).
- The schedule's factor k is `geometry.default_factor(len, L)` = max(1, len / L) per length unless
  the Spec fixes it. NaN losses are reported as inf.
- Every result is cached the moment it is computed (`ropecli.cache`), keyed by all of the above.
- Under torchrun the windows are split across ranks and gathered back in window order
  (`ropecli.distributed`): the sums, and so every number, are the single-process ones.
"""

from __future__ import annotations

import hashlib
import math
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from ropecli.cache import EvalCache
from ropecli.data import Windows, load_documents, sample_windows, tokenize_documents
from ropecli.distributed import Dist
from ropecli.errors import RopeCliError
from ropecli.geometry import Geometry, default_factor
from ropecli.schedules import Schedule
from ropecli.passkey import DEFAULT_DEPTHS
from ropecli.specs import Spec, make_spec

METRICS = ("ppl", "passkey", "kl")


@dataclass
class Evaluator:
    loaded: Any  # ropecli.model.load.LoadedModel
    data: list[str] | None = None
    samples: int = 4
    seed: int = 0
    text_field: str = "text"
    chunk_tokens: int | None = None
    score_last: int | None = None
    cache: EvalCache = field(default_factory=EvalCache)
    data_label: str = ""
    dist: Dist = field(default_factory=Dist)  # the process group under torchrun: windows split across ranks
    first_window: int = 0  # held-out evaluation: windows first_window … first_window+samples-1 of the seeded sample
    depths: tuple = DEFAULT_DEPTHS  # passkey: where the key sits in the filler
    digits: int = 5  # passkey: digits of a key
    forward_passes: int = 0  # windows (or prompts) this process ran through the model (cache misses)
    _docs: list = field(default_factory=list, repr=False)
    _tokens: list = field(default_factory=list, repr=False)
    _windows: dict = field(default_factory=dict, repr=False)
    _prompts: dict = field(default_factory=dict, repr=False)
    _stream: Any = field(default=None, repr=False)

    def __post_init__(self):
        if not self._docs:  # a held_out() copy shares the tokenized documents
            self._docs, self.data_label = load_documents(self.data, self.text_field)
            self._tokens = tokenize_documents(self._docs, self.loaded.tokenizer)

    def windows(self, length: int) -> Windows:
        if length not in self._windows:
            bos = getattr(self.loaded.tokenizer, "bos_token_id", None)
            win = sample_windows(self._docs, self._tokens, length, self.first_window + self.samples, self.seed, bos)
            if self.first_window:  # the first windows of a larger sample are the smaller sample: skip them
                win = Windows(length, win.ids[self.first_window:], win.names[self.first_window:], win.skipped)
            self._windows[length] = win
        return self._windows[length]

    def held_out(self, samples: int) -> "Evaluator":
        """An evaluator of the `samples` windows (and passkey prompts) after this one's: text this one never scores."""
        return replace(self, samples=samples, first_window=self.first_window + self.samples, forward_passes=0,
                       _windows={}, _prompts={})

    def factor_for(self, spec: Spec, length: int) -> float:
        return spec.factor if spec.factor is not None else default_factor(length, self.loaded.train_len)

    def schedule_for(self, spec: Spec, length: int) -> tuple[Geometry, Schedule]:
        """The schedule a window of `length` tokens runs under. Dynamic NTK without an explicit seq_len
        scales by the window's own length n, as transformers does at run time (n <= L: unscaled)."""
        lm = self.loaded
        geom = Geometry(lm.rotary_dim, lm.base, lm.train_len, self.factor_for(spec, length))
        params = dict(spec.params)
        if spec.method == "dynamic" and params.get("seq_len") is None:
            spec = spec.but(params=tuple({**params, "seq_len": float(length)}.items()))
        return geom, spec.schedule(geom)

    def units(self, metric: str = "ppl") -> int:
        """Forward passes of one evaluation: windows (ppl, kl) or prompts (passkey)."""
        return self.samples * (len(self.depths) if metric == "passkey" else 1)

    def prompts(self, length: int) -> list:
        """The passkey prompts at `length`, depth-major ([depth 0 samples…, depth 1 samples…])."""
        if length not in self._prompts:
            from ropecli.passkey import filler_stream, make_samples

            if self._stream is None:
                self._stream = filler_stream(self._tokens)
            rows = make_samples(self.loaded.tokenizer, self._stream, length, list(self.depths), self.samples,
                                self.digits, self.seed, first_sample=self.first_window)
            self._prompts[length] = [p for row in rows for p in row]
        return self._prompts[length]

    def inputs_fingerprint(self, metric: str, length: int) -> str:
        if metric != "passkey":
            return self.windows(length).fingerprint
        h = hashlib.sha256()
        for p in self.prompts(length):
            h.update(p.ids.tobytes())
            h.update(str(p.answer_start).encode())
        return h.hexdigest()[:16]

    def check_inputs(self, metric: str, length: int) -> None:
        """Fail on too little text, or a length the metric does not take, before any forward pass."""
        if metric == "passkey":
            self.prompts(length)
            return
        self.windows(length)
        if metric == "ppl" and self.score_last and self.score_last >= length:
            raise RopeCliError(f"--score-last {self.score_last} must be below --len {length}")
        if metric == "kl" and length > self.loaded.train_len:
            raise RopeCliError(f"--len {length} is beyond the training length L = {self.loaded.train_len}: KL against the "
                               "unscaled model measures a schedule's cost within L; pass --len at most L")

    def cache_key(self, spec: Spec, length: int, geom: Geometry, sched: Schedule, metric: str = "ppl") -> dict:
        key = {
            "model": self.loaded.fingerprint, "data": self.inputs_fingerprint(metric, length), "len": length,
            "samples": self.samples, "seed": self.seed, "method": sched.method,
            "params": {k: (list(map(float, v)) if k == "factors" else v) for k, v in sched.params.items()},
            "factor": geom.factor, "log_n": spec.log_n, "dtype": self.loaded.dtype, "score_last": self.score_last,
            "rope_layers": [s.layer_type for s in self.loaded.slots],
        }
        if metric != "ppl":  # ppl keys stay as they were, so older caches still hit
            key["metric"] = metric
            key.pop("score_last")
        return key

    def evaluate(self, spec: Spec, length: int, on_window: Callable[[int], None] | None = None, metric: str = "ppl") -> dict:
        """Result for one (spec, length, metric): from the cache, or computed and cached at once. Under
        torchrun it counts as cached only if every rank finds it (ranks may not share a disk)."""
        if metric not in METRICS:
            raise RopeCliError(f"unknown metric '{metric}'; choose from {', '.join(METRICS)}")
        geom, sched = self.schedule_for(spec, length)
        key = self.cache_key(spec, length, geom, sched, metric)
        cached = self.cache.get(key)
        if not self.dist.all_true(cached is not None):
            if cached is not None:  # this rank had it, another did not: all compute together
                self.cache.hits, self.cache.misses = self.cache.hits - 1, self.cache.misses + 1
            cached = None
        if cached is not None:
            if on_window:
                on_window(self.units(metric))
            return {**cached, "cached": True}
        result = self._compute(spec, length, geom, sched, on_window, metric)
        if self.dist.is_main:
            self.cache.put(key, result)
        return {**result, "cached": False}

    @contextmanager
    def _scaled(self, spec: Spec, sched: Schedule):
        """The model with `sched` (and log-n) applied inside the block, restored after, whatever happens."""
        from ropecli.model.rotary import add_log_n_hooks, apply_schedule, restore

        lm = self.loaded
        hooks = []
        try:
            for slot in lm.slots:
                apply_schedule(slot, sched.factors, sched.attention_factor)
            if spec.log_n:
                hooks = add_log_n_hooks(lm.model, lm.train_len, [s.layer_type for s in lm.slots if s.layer_type] or None)
            yield
        finally:
            for h in hooks:
                h.remove()
            for slot in lm.slots:
                restore(slot)

    def _compute(self, spec: Spec, length: int, geom: Geometry, sched: Schedule, on_window, metric: str) -> dict:
        import torch

        from ropecli.model.scoring import oom_error, out_of_memory, passkey_scores, window_kl, window_nll

        lm = self.loaded
        device = next(lm.model.parameters()).device
        if metric == "passkey":
            prompts = self.prompts(length)
            inputs = [(p.ids, p.answer_start) for p in prompts]
        else:
            inputs = [(row, None) for row in self.windows(length).ids]
        n = len(inputs)
        unscaled = make_spec("none")  # KL's reference: Lambda_m = 1, attention factor 1, no log-n
        unscaled_sched = unscaled.schedule(geom)
        local: list[tuple] = []  # (unit index, *values) computed here
        t0 = time.perf_counter()

        def one(ids, answer_start):
            if metric == "ppl":
                return window_nll(lm.model, ids, self.chunk_tokens, self.score_last)
            if metric == "passkey":
                return passkey_scores(lm.model, ids, answer_start)
            return window_kl(lm.model, ids, reference=lambda: self._scaled(unscaled, unscaled_sched),
                             scaled=lambda: self._scaled(spec, sched), chunk_tokens=self.chunk_tokens)

        context = self._scaled(spec, sched) if metric != "kl" else nullcontext()
        with context:
            for position, i in enumerate(self.dist.mine(n)):
                ids = torch.from_numpy(inputs[i][0]).unsqueeze(0).to(device)
                try:
                    local.append((i, *one(ids, inputs[i][1])))
                except RuntimeError as exc:
                    if out_of_memory(exc):
                        raise oom_error(length) from None
                    raise
                self.forward_passes += 1
                self.dist.windows_done.append(i)
                if on_window:
                    on_window(self.dist.round_size(position, n))
        per_unit = self.dist.gather_windows(local, n)  # the values of every unit, in unit order
        seconds = time.perf_counter() - t0
        if metric == "passkey":
            return summarize_passkey(spec, sched, geom, length, per_unit, self.prompts(length), self.depths, seconds)
        if metric == "kl":
            return summarize_kl(spec, sched, geom, length, per_unit, self.windows(length), seconds)
        return summarize(spec, sched, geom, length, per_unit, self.windows(length), seconds)


def _head(spec: Spec, sched: Schedule, geom: Geometry, length: int, metric: str) -> dict:
    return {"metric": metric, "method": sched.method, "label": spec.label,
            "params": {k: v for k, v in sched.params.items() if k != "factors"},
            "log_n": spec.log_n, "len": length, "factor": geom.factor, "attention_factor": sched.attention_factor}


def summarize(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_window: list[tuple[float, int]],
              win: Windows, seconds: float) -> dict:
    nll_sum = sum(n for n, _ in per_window)
    tokens = sum(t for _, t in per_window)
    means = np.array([n / t for n, t in per_window])
    nll = nll_sum / tokens
    if not math.isfinite(nll):
        nll = math.inf
    ppl = math.exp(nll) if nll < 700 else math.inf
    err = None
    if len(means) > 1 and np.all(np.isfinite(means)) and math.isfinite(ppl):
        err = ppl * float(np.std(means, ddof=1)) / math.sqrt(len(means))
    head = _head(spec, sched, geom, length, "ppl")
    head.pop("metric")  # ppl results keep their old shape
    return {
        **head, "ppl": ppl, "nll": nll, "tokens": tokens, "ppl_err": err,
        "window_nll": [float(m) if math.isfinite(m) else None for m in means], "windows": win.names, "seconds": round(seconds, 3),
    }


def summarize_passkey(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_prompt: list[tuple[float, float]],
                      prompts: list, depths, seconds: float) -> dict:
    """Accuracy and mean answer NLL, overall and per depth; per-prompt values kept for paired statistics."""
    correct = np.array([c for c, _ in per_prompt], dtype=np.float64)
    nll = np.array([a for _, a in per_prompt], dtype=np.float64)
    by_depth = []
    for d in depths:
        idx = [i for i, p in enumerate(prompts) if p.depth == d]
        by_depth.append({"depth": d, "accuracy": float(correct[idx].mean()), "answer_nll": _finite(nll[idx].mean()),
                         "samples": len(idx)})
    return {
        **_head(spec, sched, geom, length, "passkey"), "accuracy": float(correct.mean()),
        "answer_nll": _finite(nll.mean()), "samples": len(per_prompt), "digits": len(prompts[0].key), "by_depth": by_depth,
        "prompt_correct": [bool(c) for c in correct], "prompt_answer_nll": [_finite(v) for v in nll],
        "seconds": round(seconds, 3),
    }


def summarize_kl(spec: Spec, sched: Schedule, geom: Geometry, length: int, per_window: list[tuple], win: Windows,
                 seconds: float) -> dict:
    """KL(p_unscaled || p_scaled) per token: mean, 99th percentile, max, top-1 agreement (llama.cpp's statistics)."""
    kl_sum = sum(w[0] for w in per_window)
    tokens = sum(w[1] for w in per_window)
    agree = sum(w[2] for w in per_window)
    every = np.concatenate([np.asarray(w[3], dtype=np.float64) for w in per_window])
    return {
        **_head(spec, sched, geom, length, "kl"), "kl_mean": kl_sum / tokens, "kl_p99": float(np.percentile(every, 99)),
        "kl_max": float(every.max()), "top1_agreement": 100.0 * agree / tokens, "tokens": tokens,
        "window_kl": [w[0] / w[1] for w in per_window], "windows": win.names, "seconds": round(seconds, 3),
    }


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def check_lengths(lengths: list[int]) -> list[int]:
    if not lengths:
        raise RopeCliError("no --len given; pass e.g. --len 4096")
    bad = [n for n in lengths if n < 2]
    if bad:
        raise RopeCliError(f"--len {bad[0]} is too short; pass lengths of at least 2 tokens")
    return sorted(dict.fromkeys(lengths))
