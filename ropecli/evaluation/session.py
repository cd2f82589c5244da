"""An evaluation session: a loaded model backend and its Evaluator, with what every evaluating command
does around them: run specs x lengths under one progress bar, check the text before any forward pass,
describe the run for `--json`, count what it cost. `Session` is what the tuning layer takes
(`ropecli.tuning.objective.Bench`; its `run` is the `Evaluate`). The CLI opens one
(`ropecli.cli.session_opening.open_session`) and hands it a rich progress bar; tests use `Progress()`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator

from ropecli.evaluation.bos_policy import bos_fields
from ropecli.evaluation.cache import FORMAT
from ropecli.evaluation.metrics import PPL, Metric

if TYPE_CHECKING:
    from ropecli.backends.backend import ModelBackend
    from ropecli.evaluation.evaluator import Evaluator
    from ropecli.spec import Spec
from ropecli.deferred import deferred
from ropecli.models.memory import resident_bytes

torch = deferred("torch")


class Progress:
    """Where a session reports progress; this one reports nowhere (the CLI's draws a rich bar).
    `task(total, label)` opens a bar over a block (a block inside an open one adds nothing: the
    outer total counts it); `grow(count)` raises the open bar's total, `show` names what runs,
    `advance(count)` ticks."""

    @contextmanager
    def task(self, total: int, label: str) -> Iterator[None]:
        yield

    def grow(self, count: int) -> None: ...

    def show(self, label: str) -> None: ...

    def advance(self, count: int) -> None: ...


_OPENED: list["Session"] = []  # every session of this process, for the closing notes


@dataclass
class Session:
    model: ModelBackend
    ev: Evaluator
    progress: Progress = field(default_factory=Progress)  # shared by a command's sessions: one bar over everything
    memory: dict | None = None  # weights and KV cache at the longest length, read before loading (`ropecli.models.memory`)

    def __post_init__(self):
        _OPENED.append(self)

    @property
    def rope(self):
        """The model's RoPE geometry (ModelRope)."""
        return self.model.rope

    @property
    def inputs(self):
        """The windows and passkey prompts scored (ropecli.evaluation.inputs.Inputs)."""
        return self.ev.inputs

    @property
    def is_main(self) -> bool:
        """True in a single process and on rank 0 under torchrun: the process that prints and writes."""
        return self.ev.dist.is_main

    def held_out(self, samples: int | None) -> "Session":
        """The same model on the windows after this session's (default: as many as it has)."""
        return Session(self.model, self.ev.held_out(samples or self.inputs.samples), self.progress, self.memory)

    def check(self, metric: Metric, length: int, samples: int | None = None) -> None:
        """Fail in one line when the text cannot give `samples` windows (prompts) at `length`, before any forward pass."""
        self.ev.check_inputs(metric, length, samples)

    def run(self, specs: list[Spec], lengths: list[int], metric: Metric = PPL, samples: int | None = None,
            span: int | None = None) -> list:
        """Every (spec, length) of one metric (ppl, passkey, kl), spec-major, as EvalResults on the first
        `samples` windows (prompts per depth; default: the session's); cached ones are instant. Several
        ppl lengths score the first tokens of the longest windows, a static schedule all of them in one
        forward pass per window (`Evaluator.evaluate_lengths`); `span`: the windows are the prefixes of those
        at `span` tokens (a longer length scored elsewhere), whatever the lengths asked here."""
        for n in lengths:  # fail on too little text before any forward pass
            self.check(metric, n, samples)
        units = self.inputs.resized(samples).units(metric)
        results, bar = [], self.progress
        with bar.task(len(specs) * len(lengths) * units, "evaluating"):
            for spec in specs:
                bar.show(f"{spec.label} @ {', '.join(map(str, lengths))}" + (f" ({metric.name})" if metric is not PPL else ""))
                results += self.ev.evaluate_lengths(spec, lengths, on_window=bar.advance, metric=metric, samples=samples,
                                                    span=span)
        return results

    def header(self) -> dict:
        """What was evaluated on what: the head of every evaluating command's `--json`. Under torchrun
        it also says how the windows were split (a collective: every rank calls it)."""
        lm, ev, rope = self.model, self.ev, self.rope
        out = {"model": rope.name, "model_fingerprint": lm.fingerprint, "rotary_dim": rope.rotary_dim, "base": rope.base,
               "train_len": rope.train_len, "L0": rope.train_len, "Ls": rope.shipped_len,
               "shipped": rope.shipped.to_json() if rope.shipped else None, "runtime": lm.runtime, "dtype": lm.dtype, "device": lm.device,
               "data": ev.inputs.data_label, "samples": ev.inputs.samples,
               **({"prompts": ev.inputs.prompt_count} if ev.inputs.prompt_count is not None else {}), "seed": ev.inputs.seed,
               "chat_template": ev.inputs.frame.to_json(), **self.bos(),
               "score_last": ev.score_last, "world_size": ev.dist.world, "key_rule": self.key_rule(), "memory": self.measured_memory()}
        if ev.dist.world > 1:
            out["windows_per_rank"] = [len(w) for w in ev.dist.gather(ev.dist.windows_done)]
        return out

    def bos(self) -> dict:
        """What stood before every window and prompt (`--bos`): the choice, its ids and their tokens."""
        return bos_fields(self.model.tokenizer, self.ev.inputs.bos, self.ev.inputs.lead)

    def measured_memory(self) -> dict | None:
        """The memory plan printed before loading, with this process's peak resident memory since the model loaded
        (`peak_bytes`, measured: `models.memory.resident_bytes`; on CUDA the device's peak allocation beside it)."""
        if self.memory is None:
            return None

        out = {**self.memory, "peak_bytes": resident_bytes("VmHWM")}
        if self.model.device.startswith("cuda"):
            out["cuda_peak_bytes"] = int(torch.cuda.max_memory_allocated())
        return out

    def key_rule(self) -> dict | None:
        """The key-token rule in use (`ropecli.evaluation.key_tokens`): name and parameters; None when off."""
        rule = self.ev.key_rule
        return None if rule is None else {"name": rule.name, **rule.params()}

    def forward_passes(self) -> int:
        """Windows run through the model in this command, summed over ranks (a collective under torchrun)."""
        return sum(self.ev.dist.gather(self.ev.forward_passes))

    def tally(self, *others: "Session") -> dict:
        """What the run cost, for every evaluating command's `--json`: forward passes (summed over ranks and
        over `others`, e.g. the held-out session) and the cache's counts (a collective under torchrun)."""
        c = self.ev.cache
        rule = self.ev.key_rule
        return {"forward_passes": self.forward_passes() + sum(o.forward_passes() for o in others),
                "key_evaluator_passes": rule.passes if rule is not None else 0,  # a long-short evaluator's own
                "cache": {"hits": c.hits, "misses": c.misses, "rejected": c.rejected, "stale": c.stale, "migrated": c.migrated}}


def closing_notes() -> list[str]:
    """What a command says once at its end about its sessions (entries of another cache format recomputed)."""
    sessions = list(_OPENED)
    caches = list({id(s.ev.cache): s.ev.cache for s in sessions}.values())
    _OPENED.clear()
    stale, migrated = sum(c.stale for c in caches), sum(c.migrated for c in caches)
    rekeyed = sum(c.rekeyed for c in caches)
    notes = []
    if migrated:
        notes.append(f"note: {migrated} cached evaluation(s) of the older whole-evaluation format were split into "
                     f"per-window entries (format {FORMAT}) and reused")
    if rekeyed:
        notes.append(f"note: {rekeyed} cached window(s) stored under an earlier key (another transformers version, an "
                     "older spelling of the runtime, or ropecli 0.x) were reused and stored under today's")
    if stale:
        notes.append(f"note: {stale} cached result(s) were of another ropecli cache format and were recomputed (format {FORMAT} now)")
    backends = {id(s.ev.backend): s.ev.backend for s in sessions}.values()
    notes += [n for be in backends for n in be.notes()]  # llama.cpp: its Self-Extend
    return notes
