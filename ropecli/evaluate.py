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

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ropecli.cache import EvalCache
from ropecli.data import Windows, load_documents, sample_windows, tokenize_documents
from ropecli.distributed import Dist
from ropecli.errors import RopeCliError
from ropecli.geometry import Geometry, default_factor
from ropecli.schedules import Schedule
from ropecli.specs import Spec


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
    forward_passes: int = 0  # windows this process ran through the model (cache misses)
    _docs: list = field(default_factory=list, repr=False)
    _tokens: list = field(default_factory=list, repr=False)
    _windows: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._docs, self.data_label = load_documents(self.data, self.text_field)
        self._tokens = tokenize_documents(self._docs, self.loaded.tokenizer)

    def windows(self, length: int) -> Windows:
        if length not in self._windows:
            self._windows[length] = sample_windows(self._docs, self._tokens, length, self.samples, self.seed,
                                                   getattr(self.loaded.tokenizer, "bos_token_id", None))
        return self._windows[length]

    def factor_for(self, spec: Spec, length: int) -> float:
        return spec.factor if spec.factor is not None else default_factor(length, self.loaded.train_len)

    def schedule_for(self, spec: Spec, length: int) -> tuple[Geometry, Schedule]:
        lm = self.loaded
        geom = Geometry(lm.rotary_dim, lm.base, lm.train_len, self.factor_for(spec, length))
        return geom, spec.schedule(geom)

    def cache_key(self, spec: Spec, length: int, geom: Geometry, sched: Schedule) -> dict:
        return {
            "model": self.loaded.fingerprint, "data": self.windows(length).fingerprint, "len": length,
            "samples": self.samples, "seed": self.seed, "method": sched.method,
            "params": {k: (list(map(float, v)) if k == "factors" else v) for k, v in sched.params.items()},
            "factor": geom.factor, "log_n": spec.log_n, "dtype": self.loaded.dtype, "score_last": self.score_last,
            "rope_layers": [s.layer_type for s in self.loaded.slots],
        }

    def evaluate(self, spec: Spec, length: int, on_window: Callable[[int], None] | None = None) -> dict:
        """Result for one (spec, length): from the cache, or computed and cached at once. Under
        torchrun it counts as cached only if every rank finds it (ranks may not share a disk)."""
        geom, sched = self.schedule_for(spec, length)
        key = self.cache_key(spec, length, geom, sched)
        cached = self.cache.get(key)
        if not self.dist.all_true(cached is not None):
            if cached is not None:  # this rank had it, another did not: all compute together
                self.cache.hits, self.cache.misses = self.cache.hits - 1, self.cache.misses + 1
            cached = None
        if cached is not None:
            if on_window:
                on_window(self.samples)
            return {**cached, "cached": True}
        result = self._compute(spec, length, geom, sched, on_window)
        if self.dist.is_main:
            self.cache.put(key, result)
        return {**result, "cached": False}

    def _compute(self, spec: Spec, length: int, geom: Geometry, sched: Schedule, on_window) -> dict:
        import torch

        from ropecli.model.rotary import add_log_n_hooks, apply_schedule, restore
        from ropecli.model.scoring import oom_error, out_of_memory, window_nll

        lm = self.loaded
        win = self.windows(length)
        n = len(win.ids)
        device = next(lm.model.parameters()).device
        hooks = []
        local: list[tuple[int, float, int]] = []  # (window index, NLL, scored tokens) computed here
        t0 = time.perf_counter()
        try:
            for slot in lm.slots:
                apply_schedule(slot, sched.factors, sched.attention_factor)
            if spec.log_n:
                hooks = add_log_n_hooks(lm.model, lm.train_len, [s.layer_type for s in lm.slots if s.layer_type] or None)
            for position, i in enumerate(self.dist.mine(n)):
                ids = torch.from_numpy(win.ids[i]).unsqueeze(0).to(device)
                try:
                    local.append((i, *window_nll(lm.model, ids, self.chunk_tokens, self.score_last)))
                except RuntimeError as exc:
                    if out_of_memory(exc):
                        raise oom_error(length) from None
                    raise
                self.forward_passes += 1
                self.dist.windows_done.append(i)
                if on_window:
                    on_window(self.dist.round_size(position, n))
        finally:
            for h in hooks:
                h.remove()
            for slot in lm.slots:
                restore(slot)
        per_window = self.dist.gather_windows(local, n)  # (nll, tokens) of every window, in window order
        return summarize(spec, sched, geom, length, per_window, win, time.perf_counter() - t0)


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
    return {
        "method": sched.method, "label": spec.label, "params": {k: v for k, v in sched.params.items() if k != "factors"},
        "log_n": spec.log_n, "len": length, "factor": geom.factor, "attention_factor": sched.attention_factor,
        "ppl": ppl, "nll": nll, "tokens": tokens, "ppl_err": err,
        "window_nll": [float(m) if math.isfinite(m) else None for m in means], "windows": win.names, "seconds": round(seconds, 3),
    }


def check_lengths(lengths: list[int]) -> list[int]:
    if not lengths:
        raise RopeCliError("no --len given; pass e.g. --len 4096")
    bad = [n for n in lengths if n < 2]
    if bad:
        raise RopeCliError(f"--len {bad[0]} is too short; pass lengths of at least 2 tokens")
    return sorted(dict.fromkeys(lengths))
