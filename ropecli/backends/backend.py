"""The model-backend seam: what the evaluator needs of a model, and its transformers implementation.

The evaluator (`ropecli.evaluation.evaluator`) talks to a model only through `ModelBackend`: the
model's RoPE (`ModelRope`), its tokenizer, an identity for the cache key, and three measures of one
token window (a numpy int64 array of shape (T,)) under a schedule:
- `window_nll`: sum of -log p(x_t | x_<t) over the scored tokens, and their count;
- `passkey_scores`: (1.0 if every answer token is the argmax else 0.0, answer NLL);
- `window_kl`: KL(p_unscaled || p_scaled) per position, against the same model unscaled.
`scaled(schedule, log_n)` puts the model under a schedule (its frequencies, and a changed position temperature) for a block of windows (a backend may do
real work there, e.g. write a GGUF with rope_freqs). A second runtime (llama.cpp) implements the
same Protocol and plugs in without touching evaluation, tuning or the CLI.

What a backend may leave out (position maps, a map's part of the cache key, closing notes, earlier fingerprints)
is declared too, with do-nothing defaults in `BackendDefaults`, which both backends inherit: the layers above call
every member directly, never `hasattr`. Calibration text (what a selecting map's key pairs are chosen on) is handed
in with the map (`scaled(..., calibration=)`), never written onto the backend.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.maps.mapped_attention import map_refusal, mapped
from ropecli.maps.pair_contributions import model_contributions
from ropecli.maps.pair_selection import CALIBRATION_WINDOW, select_pairs
from ropecli.maps.position_maps import BoundMap
from ropecli.models.cached_decoding import cached_token_losses
from ropecli.models.chunked_scoring import (
    greedy_tokens,
    oom_error,
    out_of_memory,
    passkey_scores,
    token_losses,
    window_kl,
    window_nll,
)
from ropecli.models.model_rope import ModelRope
from ropecli.models.patch import add_log_n_hooks, apply_schedule, restore
from ropecli.models.position_temperature import position_temperature
from ropecli.rope.schedule import Schedule

torch = deferred("torch")


Calibration = Callable[[], dict]  # () -> {name: text}: what a selecting map's key pairs are chosen on


class ModelBackend(Protocol):
    rope: ModelRope  # d, base, L, layer types scaled
    tokenizer: Any  # a transformers tokenizer (callable, bos_token_id)
    fingerprint: str  # identifies weights and config, for the cache key
    dtype: str  # e.g. "float32": part of the cache key
    device: str
    runtime: str  # "transformers" | "llamacpp" | "vllm" (`ropecli.export.runtimes`): part of the cache key
    # optional (defaults in `BackendDefaults`):
    maps: bool | tuple[str, ...]  # the position maps it runs: True (every map), their names, or False (none)
    earlier_fingerprints: tuple[str, ...]  # earlier fingerprints of the same weights: their cached windows are reused

    def describe(self) -> str: ...

    def scaled(self, schedule: Schedule, log_n: bool, position_map: BoundMap | None = None,
               calibration: Calibration | None = None) -> AbstractContextManager[None]: ...
    # `calibration`: the text a map that selects key pairs (DPE) chooses them on, handed in with the map

    def window_nll(self, ids: np.ndarray, chunk_tokens: int | None, score_last: int | None,
                   prefixes: list[int] | None = None, keep_tokens: bool = False): ...
    # (sum, scored tokens, position bins[, per-token NLL]), or one of those per prefix length

    def token_losses(self, ids: np.ndarray, chunk_tokens: int | None = None) -> np.ndarray: ...
    # every prediction's NLL, float64 (T-1,): what a key-token evaluator reads

    def passkey_scores(self, ids: np.ndarray, answer_start: int) -> tuple[float, float]: ...
    # (1.0 if every answer token ids[answer_start:] is the argmax else 0.0, their NLL summed)

    def greedy(self, ids: np.ndarray, max_new: int) -> str: ...
    # the greedy continuation of the prompt `ids`, max_new tokens at most, decoded (RULER's generation)

    def window_kl(self, ids: np.ndarray, schedule: Schedule, log_n: bool, chunk_tokens: int | None,
                  position_map: BoundMap | None = None, calibration: Calibration | None = None) -> tuple[float, int, int, list[float]]: ...

    # optional (defaults in `BackendDefaults`):
    def map_refusal(self) -> str | None: ...
    # why no position map runs on this model, or None (where `maps` names the maps it runs)

    def map_key(self) -> dict | None: ...
    # what a map's number measured here depends on beyond the model and the map (its cache key's `map_runtime`), or None

    def notes(self) -> list[str]: ...
    # what a command says at its end about what ran here

    def gather(self, units: list, score: Callable[[Any], Any]) -> None: ...
    # before a block's units are scored one by one: a batching backend answers their requests together


class BackendDefaults:
    """The optional members of `ModelBackend`, doing nothing: a backend inherits them and overrides what it has."""
    maps: bool | tuple[str, ...] = False  # runs no position map
    earlier_fingerprints: tuple[str, ...] = ()  # no earlier fingerprint: only today's cache keys

    def map_refusal(self) -> str | None:
        """Why no position map runs here: none may, unless the backend says which (`maps`)."""
        return None if self.maps else "this backend runs no position map"

    def map_key(self) -> dict | None:
        """Nothing beyond the model and the map: no `map_runtime` in the cache key."""
        return None

    def notes(self) -> list[str]:
        return []

    def gather(self, units: list, score: Callable[[Any], Any]) -> None:
        """Nothing ahead of the units: each is scored when the evaluator reaches it. (vLLM's backend runs `score` over
        the block's units first and answers their requests in batches: `export.vllm_backend.VllmBackend.gather`.)"""


def native_reference(rope: ModelRope, schedule: Schedule) -> Schedule:
    """KL's reference: the model as shipped (`native`); plain RoPE (Lambda_m = 1) for a model that ships none,
    written as `none` so that its patched arithmetic stays the one every cached KL was measured against."""
    if rope.shipped is None:
        return Schedule("none", np.ones_like(schedule.factors), 1.0)
    factors, attention = rope.shipped.at(rope.rotary_dim, rope.base)
    return Schedule("native", factors, attention)


def native_as_loaded(rope: ModelRope, schedule: Schedule, patched: bool) -> bool:
    """Whether `schedule` is run by leaving the model as loaded: `native`, unless the loaded modules lack the
    shipped schedule (`patched`) or it is dynamic NTK, whose transformers state (the largest length seen) would
    make a window's number depend on the windows before it: that one is written at each window's length, as a
    fresh model computes it."""
    return schedule.method == "native" and not patched and not (rope.shipped and rope.shipped.method == "dynamic")


@dataclass
class TransformersBackend(BackendDefaults):
    """A transformers causal LM whose rotary modules ropecli patches in place (`ropecli.models.patch`)."""
    model: Any  # torch.nn.Module
    tokenizer: Any
    rope: ModelRope
    slots: list  # the RotarySlots of the scaled layer types
    dtype: str
    device: str
    fingerprint: str
    runtime: str = "transformers"
    maps: bool = True  # runs every position map at the attention (`maps.mapped_attention`); llama.cpp: Self-Extend alone
    earlier_fingerprints: tuple[str, ...] = ()  # (with transformers' version in it, ropecli 0.x's): their windows are reused
    native_patched: bool = False  # the loaded rotary modules lack the shipped schedule (a GGUF's rope_freqs): write it
    _map_notes: list = field(default_factory=list)  # what a map chose on this model (LaMPE's fit), said at the end

    def notes(self) -> list[str]:
        """What a command says at its end about the maps that ran here (which of LaMPE's fits set U)."""
        return list(self._map_notes)

    @property
    def name(self) -> str:
        return self.rope.name

    def describe(self) -> str:
        return self.rope.describe(f"{self.dtype} on {self.device}")

    def map_refusal(self) -> str | None:
        """Why no position map runs on this model (`maps.mapped_attention.map_refusal`), or None."""
        return map_refusal(self.model)

    @contextmanager
    def scaled(self, schedule: Schedule, log_n: bool, position_map: BoundMap | None = None,
               calibration: Calibration | None = None):
        """The model with `schedule` (and log-n, and a position map at the attention: `maps.mapped_attention`)
        applied inside the block, restored after, whatever happens. `calibration`: what a selecting map's key pairs
        are chosen on (`pair_selection`)."""
        hooks = []
        selection = self.pair_selection(position_map, calibration) if position_map else None  # before any schedule
        try:
            # the model as shipped: untouched (under a map, written: a length-dependent rotary would pick its factors
            # from each rotation's own positions, and the map rotates queries and keys at different ones)
            as_loaded = not position_map and native_as_loaded(self.rope, schedule, self.native_patched)
            for slot in [] if as_loaded else self.slots:
                apply_schedule(slot, schedule.factors, schedule.attention_factor)
            if log_n:
                hooks = add_log_n_hooks(self.model, self.rope.train_len, list(self.rope.scaled_types) or None)
            with ExitStack() as stack:
                if schedule.temperature is not None:  # the model's own position temperature, changed
                    stack.enter_context(position_temperature(self.model, schedule.temperature))
                if position_map:
                    bound, note = self.rope.on_model(position_map)
                    if note and note not in self._map_notes:
                        self._map_notes.append(note)
                    stack.enter_context(mapped(self.model, bound, selection=selection))
                yield
        finally:
            for h in hooks:
                h.remove()
            for slot in self.slots:
                restore(slot)

    def pair_selection(self, bound: BoundMap, calibration: Calibration | None = None) -> dict | None:
        """The pairs a selecting map moves on this model (DPE's key pairs: `maps.pair_selection` on the contributions
        `maps.pair_contributions` measures on the model as shipped, once per model and process, on the `calibration`
        text handed in: the evaluation layer's training plays); None where the map moves every pair."""
        if bound.share >= 1.0:
            return None
        if calibration is None:
            raise RopeCliError(f"{bound.name}: its key pairs are chosen on calibration text, and none was given "
                               "(calibration=ropecli.evaluation.corpus.training_plays)")

        as_shipped = native_reference(self.rope, Schedule("none", np.ones(self.rope.rotary_dim // 2), 1.0))
        try:  # on the model as shipped, whatever schedule the evaluation asks for: one choice per model, as export's
            with self.scaled(as_shipped, False):
                contributions = model_contributions(self, calibration())
        except RuntimeError as exc:
            if out_of_memory(exc):
                raise oom_error(min(self.rope.shipped_len, CALIBRATION_WINDOW)) from None
            raise
        return select_pairs(contributions, bound.share)

    def _run(self, score, ids: np.ndarray, *args, **kw):
        """`score(model, ids (1, T) on the model's device, ...)`, an out-of-memory error as one line."""
        try:
            return score(self.model, torch.from_numpy(ids).unsqueeze(0).to(next(self.model.parameters()).device), *args, **kw)
        except RuntimeError as exc:
            if out_of_memory(exc):
                raise oom_error(len(ids)) from None
            raise

    def window_nll(self, ids: np.ndarray, chunk_tokens: int | None, score_last: int | None, prefixes: list[int] | None = None,
                   keep_tokens: bool = False):
        return self._run(window_nll, ids, chunk_tokens, score_last, prefixes, keep_tokens)

    def token_losses(self, ids: np.ndarray, chunk_tokens: int | None = None) -> np.ndarray:
        return self._run(token_losses, ids, chunk_tokens)

    def decode_losses(self, ids: np.ndarray, segments: list[tuple[int, Schedule, bool]]) -> np.ndarray:
        """Generation teacher-forced through the KV cache (`ropecli.models.cached_decoding`): the window's first
        segments[0][0] tokens prefilled, then each segment [previous end, end) in one forward pass under its
        schedule; the NLL of every continuation token, float64."""
        enter = lambda sched, log_n: (lambda: self.scaled(sched, log_n))  # noqa: E731
        return self._run(cached_token_losses, ids[:segments[-1][0]], [(n, enter(s, ln)) for n, s, ln in segments])

    def passkey_scores(self, ids: np.ndarray, answer_start: int) -> tuple[float, float]:
        return self._run(passkey_scores, ids, answer_start)

    def greedy(self, ids: np.ndarray, max_new: int) -> str:
        new = self._run(greedy_tokens, ids, max_new, self.tokenizer.eos_token_id)
        return self.tokenizer.decode(new, skip_special_tokens=True)

    def window_kl(self, ids: np.ndarray, schedule: Schedule, log_n: bool, chunk_tokens: int | None,
                  position_map: BoundMap | None = None, calibration: Calibration | None = None) -> tuple[float, int, int, list[float]]:
        reference = native_reference(self.rope, schedule)  # the model as shipped, no log-n, no map
        return self._run(window_kl, ids, reference=lambda: self.scaled(reference, False),
                         scaled=lambda: self.scaled(schedule, log_n, position_map, calibration), chunk_tokens=chunk_tokens)
