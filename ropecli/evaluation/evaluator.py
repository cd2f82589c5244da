"""One schedule at one length on one metric, through the model backend: the engine every command runs on.

The evaluation protocol, whole (the YaRN repo's):
- Windows (`inputs.Inputs`, `data.sample_windows`): each document tokenized whole; documents shorter
  than `len` skipped; each cut into non-overlapping windows of exactly `len` tokens (BOS first where
  the tokenizer has one), window 0 being the document's head; `samples` windows taken round-robin
  over the documents in a `seed`ed order. The same windows for every schedule, so results are paired.
- One forward pass per window (no KV cache), every prediction scored (or the last `score_last`);
  the loss from final hidden states in chunks (`ropecli.models.chunked_scoring`), never full logits.
- PPL and its error: `results.summarize_ppl`. Passkey and KL: `results.summarize_passkey` / `summarize_kl`.
- k is `Spec.factor_at(len, L)` = max(1, len / L) per length unless the Spec fixes it; dynamic NTK
  runs at each window's own length (`Spec.schedule(geom, length)`). NaN losses are reported as inf.
- Every window (prompt) is cached the moment it is computed (`ropecli.evaluation.cache`), keyed by
  all of the above and its own token ids, not by how many windows were asked for: 8 windows after
  4 compute 4, and racing (`ropecli.tuning.racing`) grows a candidate's windows at the cost of the new ones.
- Under torchrun the windows still missing are split across ranks and gathered back by window
  (`ropecli.evaluation.distributed`): the sums, and so every number, are the single-process ones.
The model is reached only through `ropecli.backends.backend.ModelBackend`; nothing here imports torch.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ropecli.backends.backend import Calibration, ModelBackend
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.cache_migrations import legacy_key, rekeyed, respelled, whole_evaluation
from ropecli.evaluation.corpus import training_plays
from ropecli.evaluation.distributed import Dist
from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.key_metric import key_fields, window_key_sums
from ropecli.evaluation.key_tokens import KeyRule, describe_rule
from ropecli.evaluation.metrics import PPL, Metric
from ropecli.evaluation.results import EvalResult
from ropecli.maps.pair_selection import CALIBRATION
from ropecli.maps.position_maps import check_window
from ropecli.models.token_losses import plain, prefixes_from_kept
from ropecli.rope.geometry import Geometry
from ropecli.rope.schedule import Schedule
from ropecli.spec import Spec


@dataclass
class Evaluator:
    backend: ModelBackend
    inputs: Inputs
    cache: EvalCache = field(default_factory=EvalCache)
    dist: Dist = field(default_factory=Dist)  # the process group under torchrun: windows split across ranks
    chunk_tokens: int | None = None  # rows of logits per chunk (None: 256 MiB of them)
    score_last: int | None = None  # score only the last N tokens of each window
    forward_passes: int = 0  # windows (or prompts) this process ran through the model (cache misses)
    keep_tokens: bool = False  # ppl: entries without every prediction's NLL are computed again
    key_rule: KeyRule | None = None  # which predictions are key (`key_tokens`): key PPL beside PPL; kept NLL with it
    generate: bool = False  # tasks: also RULER's generation score (a greedy answer per prompt)
    calibration: Calibration = training_plays  # what a selecting map's key pairs are chosen on, handed in with the map

    @classmethod
    def over(cls, backend: ModelBackend, data: list[str] | None = None, *, samples: int = 4, seed: int = 0,
             text_field: str = "text", **kw) -> "Evaluator":
        """An evaluator of `samples` windows per length of `data` (default: the held-out plays)."""
        inputs = Inputs.load(backend.tokenizer, data, text_field, samples=samples, seed=seed)
        return cls(backend, inputs, **kw)

    def held_out(self, samples: int) -> "Evaluator":
        """An evaluator of the `samples` windows (and passkey prompts) after this one's: text this one never scores."""
        return replace(self, inputs=self.inputs.held_out(samples), forward_passes=0)

    def check_inputs(self, metric: Metric, length: int, samples: int | None = None) -> None:
        """Fail on too little text, or a length the metric does not take, before any forward pass."""
        metric.check(self, length)  # first: a metric's own check needs no text (key-ppl's missing rule, KL beyond Ls)
        self.inputs.resized(samples).unit_inputs(metric.unit_metric, length)

    def schedule_for(self, spec: Spec, length: int) -> tuple[Geometry, Schedule]:
        """The geometry and schedule a window of `length` tokens runs under."""
        geom = self.backend.rope.geometry(spec.factor_at(length, self.backend.rope.train_len))
        return geom, spec.schedule(geom, length)

    def unit_key(self, spec: Spec, length: int, geom: Geometry, sched: Schedule, unit: Metric) -> dict:
        """Everything that changes one window's (prompt's) number but the window itself: the cache key
        of a unit (`unit`: the record of the metric its units are computed under, `Metric.unit_record`) is this plus
        its fingerprint (`ropecli.evaluation.cache`)."""
        key = {
            "model": self.backend.fingerprint, "runtime": self.backend.runtime, "len": length, "metric": unit.name,
            "method": sched.method,
            "params": {k: (list(map(float, v)) if k == "factors" else v) for k, v in sched.params.items()},
            "factor": geom.factor, "log_n": spec.log_n, "dtype": self.backend.dtype,
            "rope_layers": list(self.backend.rope.scaled_types) or [None],
            **unit.key(self, self.backend.rope),  # the metric's own fields (score_last, KL's reference)
        }
        if sched.params.get("truncate") is None:  # added after caches were committed: absent = transformers' default
            key["params"].pop("truncate", None)
        if sched.temperature is not None:  # absent = the model's own temperature, as every earlier key measured
            key["temperature"] = dict(sched.temperature.params)
        if spec.position_map:  # absent = no map: every key cached before maps existed still serves
            key["map"] = [spec.position_map.name, spec.position_map.key_values]
            if spec.position_map.share < 1.0:  # the pairs it moves were chosen on the model, from this text
                key["pairs"] = CALIBRATION
            if (runtime := self.backend.map_key()) is not None:  # llama.cpp: its build's Self-Extend (seq_div right or not)
                key["map_runtime"] = runtime
            if unit.prompted and spec.position_map.record.per_prompt:  # LaMPE: the answer scored through the prompt's
                key["answer"] = "after-prompt"  # cache (`chunked_scoring.passkey_scores`); absent: one pass, as before
        return key

    def evaluate(self, spec: Spec, length: int, on_window: Callable[[int], None] | None = None,
                 metric: Metric = PPL, samples: int | None = None, span: int | None = None) -> EvalResult:
        """Result for one (spec, length, metric) on the first `samples` windows (default: this evaluator's), each
        cached or computed and cached when done; under torchrun cached only if every rank finds it (ranks may not
        share a disk). `span`: the windows are the prefixes of those at `span` (`Inputs.spanning`)."""
        m = metric
        m.check(self, length)  # cheap, and a key-ppl result without a rule would be no result
        check_window(spec.position_map, length)
        inputs = self.inputs.resized(samples).spanning(span)
        geom, sched, keys, values = self._lookup(spec, length, m, inputs)
        todo = self.dist.union([i for i in range(len(keys)) if i not in values])
        if on_window and len(keys) > len(todo):
            on_window(len(keys) - len(todo))
        seconds = 0.0
        if todo:
            unit = m.unit_record
            computed = self._compute(spec, geom, sched, unit, inputs.unit_inputs(unit.name, length), todo, keys, on_window)
            values.update(computed)
            seconds = sum(t for _, t in computed.values())
        return self._summarize(spec, length, m, inputs, geom, sched, values, seconds, cached=not todo)

    def evaluate_lengths(self, spec: Spec, lengths: list[int], on_window: Callable[[int], None] | None = None,
                         metric: Metric = PPL, samples: int | None = None, span: int | None = None) -> list[EvalResult]:
        """One spec at every length, in order. Several ppl lengths score the same text: the windows at a
        length below the longest are the first tokens of the longest ones; where the spec runs the same
        schedule at both (a static schedule at one k; not dynamic NTK, not k = n / L), one forward pass of
        the longest window scores every such length (causal attention: the first n tokens of a window are
        the n-token window), and each length's result is cached as if it had run alone."""
        for n in lengths:  # a map's window at or past a length: one line, whichever path scores it
            check_window(spec.position_map, n)
        if not metric.prefixes or (len(set(lengths)) < 2 and not span):
            return [self.evaluate(spec, n, on_window, metric, samples) for n in lengths]
        T = max([*lengths, span or 0])  # the windows: the first tokens of those at T
        top = self.schedule_for(spec, max(lengths))[1]
        shared = sorted(n for n in set(lengths) if same_schedule(self.schedule_for(spec, n)[1], top))
        done = self._prefixes(spec, shared, on_window, samples, T, metric) if len(shared) > 1 else {}
        return [done[n] if n in done else self.evaluate(spec, n, on_window, metric, samples, span=T) for n in lengths]

    def _prefixes(self, spec: Spec, lengths: list[int], on_window, samples: int | None, T: int,
                  metric: Metric = PPL) -> dict[int, EvalResult]:
        """Every length of `lengths` (ascending) from one forward pass per window at the longest, on the first
        tokens of the windows at T (>= the longest)."""
        inputs = self.inputs.resized(samples).spanning(T)
        found = {n: self._lookup(spec, n, metric, inputs) for n in lengths}
        top = lengths[-1]
        windows = len(found[top][2])
        for i, got in ((i, found[top][3].get(i)) for i in range(windows)):  # a cached window's kept NLL gives its prefixes
            for n, value in prefixes_from_kept(got and got[0], [n for n in lengths[:-1] if i not in found[n][3]], self.score_last):
                found[n][3][i] = (tuple(value), 0.0)
                if self.dist.is_main:
                    self.cache.put(found[n][2][i], {"value": value, "seconds": 0.0})
        todo = self.dist.union([i for i in range(windows) if any(i not in f[3] for f in found.values())])
        if on_window and windows > len(todo):
            on_window((windows - len(todo)) * len(lengths))
        seconds = 0.0
        if todo:
            keys = [[found[n][2][i] for n in lengths] for i in range(windows)]  # per window: its key at each length
            unit = metric.unit_record  # ppl's windows (key-ppl reads them too)
            computed = self._compute(spec, found[top][0], found[top][1], unit, inputs.unit_inputs(unit.name, top), todo, keys,
                                     (lambda k: on_window(k * len(lengths))) if on_window else None, prefixes=lengths)
            for i, (per_length, secs) in computed.items():
                for n, value in zip(lengths, per_length):
                    found[n][3][i] = (tuple(value), secs / len(lengths))
            seconds = sum(t for _, t in computed.values())
        return {n: self._summarize(spec, n, metric, inputs, geom, sched, values, seconds / len(lengths), cached=not todo)
                for n, (geom, sched, _, values) in found.items()}

    def _lookup(self, spec: Spec, length: int, m: Metric, inputs: Inputs):
        """(geometry, schedule, each unit's cache key, {unit: (value, seconds)} of the units found cached)."""
        metric = m.unit_metric
        geom, sched = self.schedule_for(spec, length)
        base = self.unit_key(spec, length, geom, sched, m.unit_record)
        keys = [{**base, "unit": fp} for fp in inputs.unit_fingerprints(metric, length)]
        values: dict[int, tuple] = {}
        for i, key in enumerate(keys):
            got = self.cache.get(key)
            if got is not None:
                values[i] = tuple(got["value"]), got["seconds"]
        missing = [i for i in range(len(keys)) if i not in values]  # the formats the cache still reads
        values.update(rekeyed(self.cache, keys, missing, self.backend.earlier_fingerprints,
                              self.dist.is_main))
        values.update(respelled(self.cache, keys, [i for i in missing if i not in values], self.dist.is_main))
        if not values and m.units != "task" and not spec.position_map:  # format 1 knew no maps: its keys name none
            values = whole_evaluation(self.cache, self.legacy_key(spec, length, geom, sched, metric, inputs), metric,
                                      keys, self.dist.is_main)
        return geom, sched, keys, {i: v for i, v in values.items() if m.fresh(self, v[0])}  # stale ones: computed again

    def _summarize(self, spec: Spec, length: int, m: Metric, inputs: Inputs, geom: Geometry, sched: Schedule,
                   values: dict, seconds: float, cached: bool) -> EvalResult:
        per_unit = [values[i][0] for i in range(len(values))]
        r = m.summarize(self, spec, sched, geom, length, m.name, per_unit, inputs, seconds)
        r.cached = cached
        return r

    def key_fields(self, per_unit: list, inputs: Inputs, length: int) -> dict | None:
        """The key-token fields of a ppl result (None without a key rule)."""
        if self.key_rule is None:
            return None
        masks = [self.key_rule.mask(ids) for ids, _ in inputs.unit_inputs(PPL.unit_metric, length)]
        return key_fields(window_key_sums(per_unit, masks, self.score_last),
                          describe_rule(self.key_rule.name, self.key_rule.params()), inputs.windows(length).names)

    def _compute(self, spec: Spec, geom: Geometry, sched: Schedule, m: Metric, units: list[tuple], todo: list[int],
                 keys: list, on_window, prefixes: list[int] | None = None) -> dict[int, tuple]:
        """The units `todo` through the model, split across ranks: {unit: (values, seconds)}. Rank 0 stores
        each of its own the moment it is done, and the other ranks' when they are gathered. With `prefixes`
        (ppl), a unit's values are one per prefix length and its key a list of the keys at those lengths. `m`: the
        record of the metric the units are computed under (`Metric.unit_record`)."""
        be = self.backend
        local: list[tuple] = []  # (unit index, values, seconds) computed here
        keep = self.keep_tokens or self.key_rule is not None

        def one(unit):
            if prefixes:  # ppl's windows: every prefix length from one pass
                return [plain(v) for v in be.window_nll(unit[0], self.chunk_tokens, self.score_last, prefixes, keep)]
            return plain(m.score(self, spec, sched, unit))

        with be.scaled(sched, spec.log_n, spec.position_map, self.calibration) if m.scales else nullcontext():
            mine = list(self.dist.mine(len(todo)))
            t0 = time.perf_counter()
            be.gather([units[todo[j]] for j in mine], one)  # vLLM: the block's requests as batches; others: nothing
            shared = (time.perf_counter() - t0) / max(1, len(mine))  # a batch's time, each unit its share
            for position, j in enumerate(mine):
                i = todo[j]
                t0 = time.perf_counter()
                value = one(units[i])
                local.append((i, value, time.perf_counter() - t0 + shared))
                if self.dist.is_main:
                    self._store(keys[i], value, local[-1][2], prefixes)
                self.forward_passes += m.passes(self, units[i])
                self.dist.windows_done.append(i)
                if on_window:
                    on_window(self.dist.round_size(position, len(todo)))
        gathered = self.dist.gather_windows(local, todo)
        if self.dist.is_main and self.dist.world > 1:
            mine = {item[0] for item in local}  # stored already
            for i, (value, secs) in gathered.items():
                if i not in mine:
                    self._store(keys[i], value, secs, prefixes)
        return {i: (tuple(v), t) for i, (v, t) in gathered.items()}

    def _store(self, key, value, seconds: float, prefixes: list[int] | None) -> None:
        """One unit's entry; with prefixes, one entry per prefix length (each as if it had run alone)."""
        for k, v in zip(key, value) if prefixes else [(key, value)]:
            self.cache.put(k, {"value": v, "seconds": seconds / (len(prefixes) if prefixes else 1)})

    def legacy_key(self, spec: Spec, length: int, geom: Geometry, sched: Schedule, metric: str, inputs: Inputs) -> dict:
        """The key of a whole evaluation in cache format 1 (`cache_migrations.legacy_key`): read, never written."""
        return legacy_key(self.backend, self.score_last, spec, length, geom, sched, metric, inputs)


def same_schedule(a: Schedule, b: Schedule) -> bool:
    """Whether two schedules put the same rotation on every position: the same factors and attention factor
    (log-n depends on the position only, so it never tells two lengths apart)."""
    return a.attention_factor == b.attention_factor and np.array_equal(a.factors, b.factors)
