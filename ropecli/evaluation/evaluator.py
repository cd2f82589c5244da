"""One schedule at one length on one metric, through the model backend: the engine every command runs on.

The evaluation protocol, whole (the YaRN repo's):
- Windows (`inputs.Inputs`, `data.sample_windows`): each document tokenized whole; documents shorter
  than `len` skipped; each cut into non-overlapping windows of exactly `len` tokens (BOS first where
  the tokenizer has one), window 0 being the document's head; `samples` windows taken round-robin
  over the documents in a `seed`ed order. The same windows for every schedule, so results are paired.
- One forward pass per window (no KV cache), every prediction scored (or the last `score_last`);
  the loss from final hidden states in chunks (`ropecli.models.scoring`), never full logits.
- PPL and its error: `results.summarize_ppl`. Passkey and KL: `results.summarize_passkey` / `summarize_kl`.
- k is `Spec.factor_at(len, L)` = max(1, len / L) per length unless the Spec fixes it; dynamic NTK
  runs at each window's own length (`Spec.schedule(geom, length)`). NaN losses are reported as inf.
- Every result is cached the moment it is computed (`ropecli.evaluation.cache`), keyed by all of the above.
- Under torchrun the windows are split across ranks and gathered back in window order
  (`ropecli.evaluation.distributed`): the sums, and so every number, are the single-process ones.
The model is reached only through `ropecli.models.backend.ModelBackend`; nothing here imports torch.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable

from ropecli.errors import RopeCliError
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.distributed import Dist
from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.results import (METRICS, EvalResult, summarize_kl, summarize_passkey, summarize_ppl)
from ropecli.models.backend import ModelBackend
from ropecli.rope.geometry import Geometry
from ropecli.rope.methods import Schedule
from ropecli.rope.spec import Spec


@dataclass
class Evaluator:
    backend: ModelBackend
    inputs: Inputs
    cache: EvalCache = field(default_factory=EvalCache)
    dist: Dist = field(default_factory=Dist)  # the process group under torchrun: windows split across ranks
    chunk_tokens: int | None = None  # rows of logits per chunk (None: 256 MiB of them)
    score_last: int | None = None  # score only the last N tokens of each window
    forward_passes: int = 0  # windows (or prompts) this process ran through the model (cache misses)

    @classmethod
    def over(cls, backend: ModelBackend, data: list[str] | None = None, *, samples: int = 4, seed: int = 0,
             text_field: str = "text", **kw) -> "Evaluator":
        """An evaluator of `samples` windows per length of `data` (default: the held-out plays)."""
        inputs = Inputs.load(backend.tokenizer, data, text_field, samples=samples, seed=seed)
        return cls(backend, inputs, **kw)

    def held_out(self, samples: int) -> "Evaluator":
        """An evaluator of the `samples` windows (and passkey prompts) after this one's: text this one never scores."""
        return replace(self, inputs=self.inputs.held_out(samples), forward_passes=0)

    def check_inputs(self, metric: str, length: int) -> None:
        """Fail on too little text, or a length the metric does not take, before any forward pass."""
        if metric == "passkey":
            self.inputs.prompts(length)
            return
        self.inputs.windows(length)
        if metric == "ppl" and self.score_last and self.score_last >= length:
            raise RopeCliError(f"--score-last {self.score_last} must be below --len {length}")
        L = self.backend.rope.train_len
        if metric == "kl" and length > L:
            raise RopeCliError(f"--len {length} is beyond the training length L = {L}: KL against the "
                               "unscaled model measures a schedule's cost within L; pass --len at most L")

    def schedule_for(self, spec: Spec, length: int) -> tuple[Geometry, Schedule]:
        """The geometry and schedule a window of `length` tokens runs under."""
        geom = self.backend.rope.geometry(spec.factor_at(length, self.backend.rope.train_len))
        return geom, spec.schedule(geom, length)

    def cache_key(self, spec: Spec, length: int, geom: Geometry, sched: Schedule, metric: str = "ppl") -> dict:
        """Everything that changes the number (`ropecli.evaluation.cache`)."""
        key = {
            "model": self.backend.fingerprint, "data": self.inputs.fingerprint(metric, length), "len": length,
            "samples": self.inputs.samples, "seed": self.inputs.seed, "method": sched.method,
            "params": {k: (list(map(float, v)) if k == "factors" else v) for k, v in sched.params.items()},
            "factor": geom.factor, "log_n": spec.log_n, "dtype": self.backend.dtype, "score_last": self.score_last,
            "rope_layers": list(self.backend.rope.scaled_types) or [None],
        }
        if metric != "ppl":  # ppl keys stay as they were, so older caches still hit
            key["metric"] = metric
            key.pop("score_last")
        return key

    def evaluate(self, spec: Spec, length: int, on_window: Callable[[int], None] | None = None,
                 metric: str = "ppl") -> EvalResult:
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
                on_window(self.inputs.units(metric))
            return EvalResult.from_json({"metric": metric, **cached}, cached=True)
        result = self._compute(spec, length, geom, sched, on_window, metric)
        if self.dist.is_main:
            self.cache.put(key, result.stored())
        return result

    def _compute(self, spec: Spec, length: int, geom: Geometry, sched: Schedule, on_window, metric: str) -> EvalResult:
        be = self.backend
        prompts = self.inputs.prompts(length) if metric == "passkey" else None
        inputs = [(p.ids, p.answer_start) for p in prompts] if prompts else [(w, None) for w in self.inputs.windows(length).ids]
        n = len(inputs)
        local: list[tuple] = []  # (unit index, *values) computed here
        t0 = time.perf_counter()

        def one(ids, answer_start):
            if metric == "ppl":
                return be.window_nll(ids, self.chunk_tokens, self.score_last)
            if metric == "passkey":
                return be.passkey_scores(ids, answer_start)
            return be.window_kl(ids, sched, spec.log_n, self.chunk_tokens)

        with be.scaled(sched, spec.log_n) if metric != "kl" else nullcontext():  # kl switches states itself
            for position, i in enumerate(self.dist.mine(n)):
                local.append((i, *one(*inputs[i])))
                self.forward_passes += 1
                self.dist.windows_done.append(i)
                if on_window:
                    on_window(self.dist.round_size(position, n))
        per_unit = self.dist.gather_windows(local, n)  # the values of every unit, in unit order
        seconds = time.perf_counter() - t0
        if metric == "passkey":
            return summarize_passkey(spec, sched, geom, length, per_unit, prompts, self.inputs.depths, seconds)
        names = self.inputs.windows(length).names
        if metric == "kl":
            return summarize_kl(spec, sched, geom, length, per_unit, names, seconds)
        return summarize_ppl(spec, sched, geom, length, per_unit, names, seconds)


def check_lengths(lengths: list[int]) -> list[int]:
    if not lengths:
        raise RopeCliError("no --len given; pass e.g. --len 4096")
    bad = [n for n in lengths if n < 2]
    if bad:
        raise RopeCliError(f"--len {bad[0]} is too short; pass lengths of at least 2 tokens")
    return sorted(dict.fromkeys(lengths))
