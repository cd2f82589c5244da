"""What an evaluation scores: the token windows (ppl, kl) and passkey prompts at each length, drawn
once from the documents and the same for every schedule, so that results are paired.

Windows: `ropecli.evaluation.data.sample_windows` (the YaRN protocol on a seeded sample). Prompts:
`ropecli.evaluation.passkey.make_samples`. A held-out copy (`held_out`) takes the windows and prompts
that this one never scores: with at least two documents long enough for a length, windows of other
documents (the seeded order of the documents alternates between the searched and the held-out part,
`ropecli.evaluation.data.split_documents`), so a held-out verdict is about text the search never saw;
with one, the windows that follow this one's in the same document (`split_note` says which).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.evaluation.data import (Windows, count_windows, load_documents, sample_windows, split_documents,
                                     tokenize_documents)
from ropecli.evaluation.bos_policy import lead_ids
from ropecli.evaluation.chat_template import RAW, PromptFrame
from ropecli.evaluation.passkey import DEFAULT_DEPTHS, filler_stream, make_published_samples, make_samples
from ropecli.evaluation.metrics import PASSKEY_TEXT, PPL, Metric, metric_record
from ropecli.evaluation.ruler.builders import Haystack
from ropecli.evaluation.ruler.generate import make_units


@dataclass
class Inputs:
    tokenizer: Any
    docs: list  # Documents
    tokens: list  # token ids of each document
    data_label: str  # where the text came from, in words
    samples: int = 4  # windows per length (and prompts per depth where `prompt_count` is None)
    seed: int = 0
    first_window: int = 0  # held-out: windows first_window … first_window+samples-1 of the seeded sample
    prompt_count: int | None = None  # passkey and RULER tasks: prompts per depth and length (None: `samples`)
    first_prompt: int | None = None  # held-out: the first prompt per depth (None: `first_window`)
    split: str | None = None  # "search" / "held": this part of the documents (held_out splits them)
    depths: tuple = DEFAULT_DEPTHS  # passkey: where the key sits in the filler
    digits: int = 5  # passkey: digits of a key
    frame: PromptFrame = RAW  # passkey and RULER tasks: raw prompts or a chat template's (--chat-template)
    span: int | None = None  # windows at a length below it are the prefixes of the windows at `span`
    bos: str = "auto"  # --bos: what stands before every window's and prompt's text (`ropecli.evaluation.bos_policy`)
    _windows: dict = field(default_factory=dict, repr=False)
    _prompts: dict = field(default_factory=dict, repr=False)
    _tasks: dict = field(default_factory=dict, repr=False)  # (task, length) -> its TaskUnits
    _haystack: Any = field(default=None, repr=False)
    _stream: Any = field(default=None, repr=False)
    _resized: dict = field(default_factory=dict, repr=False)
    _fingerprints: dict = field(default_factory=dict, repr=False)
    _spanned: dict = field(default_factory=dict, repr=False)
    lead: list = field(default=None, repr=False)  # the token ids --bos resolved to on this tokenizer

    def __post_init__(self):
        if self.frame.bos != self.bos:  # the prompts' frame carries the same choice
            self.frame = replace(self.frame, bos=self.bos)
        if self.lead is None:
            self.lead = lead_ids(self.tokenizer, self.bos)

    @classmethod
    def load(cls, tokenizer, data: list[str] | None = None, text_field: str = "text", **kw) -> "Inputs":
        docs, label = load_documents(data, text_field)
        return cls(tokenizer, docs, tokenize_documents(docs, tokenizer), label, **kw)

    def held_out(self, samples: int) -> "Inputs":
        """The `samples` held-out windows (and the prompts after this one's): from the other half of the
        documents where a length has two or more (this one then keeps its own half), else the windows
        after this one's. The tokenized documents are shared."""
        if self.split is None:
            self.split = "search"
            self._windows.clear(), self._resized.clear(), self._fingerprints.clear(), self._spanned.clear()
        first_prompt = self.prompt_start + self.per_depth if self.prompt_count is not None else None
        return replace(self, samples=samples, split="held", first_window=self.first_window + self.samples,
                       first_prompt=first_prompt, _windows={}, _prompts={}, _tasks={}, _resized={}, _fingerprints={},
                       _spanned={})

    @property
    def per_depth(self) -> int:
        """Prompts per depth and length (passkey, RULER tasks): --prompts, else --samples."""
        return self.samples if self.prompt_count is None else self.prompt_count

    @property
    def prompt_start(self) -> int:
        """The index of this sample's first prompt per depth in the seeded sequence of prompts."""
        return self.first_window if self.first_prompt is None else self.first_prompt

    def count(self, metric: Metric = PPL) -> int:
        """How many of its units an evaluation of `metric` takes: windows per length, or prompts per depth."""
        return self.samples if metric.units == "windows" else self.per_depth

    def _part(self, length: int) -> tuple[int | None, int]:
        """(which half of the documents, first window) of this sample at `length`."""
        part = {"search": 1, "held": 0}.get(self.split)  # the held-out half is the larger one: its verdict ranks
        if part is not None and len(split_documents(self.docs, self.tokens, length, self.seed, self.lead, None)) >= 2:
            return part, 0 if self.split == "held" else self.first_window
        return None, self.first_window

    def first_window_at(self, length: int) -> int:
        """The index of this sample's first window among its documents' windows at `length` (0 for the
        held-out half of the documents)."""
        return self._part(self._at(length))[1]

    def split_note(self, length: int) -> str:
        """Where these windows come from relative to the searched ones, in words."""
        length = self._at(length)
        part, _ = self._part(length)
        if self.split is None:
            return "no held-out split"
        if part is None:
            return ("held out by window: one document is long enough, so the held-out windows follow the searched ones "
                    "in it (not text the search never saw the like of)")
        names = lambda p: ", ".join(self.docs[i].name for i in split_documents(self.docs, self.tokens, length, self.seed, self.lead, p))  # noqa: E731
        return f"held out by document: searched on {names(1)}; held out on {names(0)}"

    def spanning(self, span: int | None) -> "Inputs":
        """The same sample, with the windows at every length below `span` the first tokens of the windows at
        `span`: several lengths of one evaluation score the same text at growing context, and a static
        schedule scores them all in one forward pass of the longest (`Evaluator.evaluate_lengths`)."""
        if span == self.span:
            return self
        if span not in self._spanned:  # kept: every evaluation of a multi-length run asks again
            self._spanned[span] = replace(self, span=span, _windows={}, _prompts={}, _tasks={}, _resized={}, _fingerprints={},
                                          _spanned={})
        return self._spanned[span]

    def _at(self, length: int) -> int:
        """The length whose windows those at `length` are cut from."""
        return self.span if self.span and length < self.span else length

    def resized(self, samples: int | None) -> "Inputs":
        """The first `samples` windows and prompts per depth of the same seeded sample, from the same first
        ones: a prefix of a larger sample, so the windows two sizes share are the same windows (a race or a
        screening step asks for a count of the units of the metric it runs)."""
        if samples is None or (samples == self.samples and self.prompt_count in (None, samples)):
            return self
        if samples not in self._resized:
            self._resized[samples] = replace(self, samples=samples, prompt_count=None if self.prompt_count is None else samples,
                                             _windows={}, _prompts={}, _tasks={}, _resized={}, _fingerprints={},
                                             _spanned={})
        return self._resized[samples]

    def available(self, length: int) -> int:
        """Windows at `length` this sample can still take from its first window on (the data's limit)."""
        length = self._at(length)
        part, first = self._part(length)
        docs = split_documents(self.docs, self.tokens, length, self.seed, self.lead, part)
        return count_windows([self.tokens[i] for i in docs], length, self.lead) - first

    def check_available(self, length: int, samples: int, what: str = "--max-windows") -> None:
        length = self._at(length)
        have = self.available(length)
        if have < samples:
            part, first = self._part(length)
            where = f"in the {'searched' if part == 1 else 'held-out'} half of the documents" if part is not None else \
                f"from window {first} on"
            raise RopeCliError(f"{what} {samples}: the data holds only {max(have, 0)} window(s) of {length} tokens {where}; "
                               f"lower {what}, or add text with --data")

    def windows(self, length: int) -> Windows:
        if length not in self._windows and self._at(length) != length:  # the prefixes of the spanning windows
            full = self.windows(self.span)
            self._windows[length] = Windows(length, np.ascontiguousarray(full.ids[:, :length]), full.names, full.skipped)
        if length not in self._windows:
            part, first = self._part(length)
            win = sample_windows(self.docs, self.tokens, length, first + self.samples, self.seed, self.lead, part)
            if first:  # the first windows of a larger sample are the smaller sample: skip them
                win = Windows(length, win.ids[first:], win.names[first:], win.skipped)
            self._windows[length] = win
        return self._windows[length]

    def documents(self, length: int, samples: int | None = None) -> int:
        """Distinct documents among the first `samples` windows at `length` (default: this sample's)."""
        return len(set(self.resized(samples).windows(length).names))

    def prompts(self, length: int, metric: str) -> list:
        """The passkey prompts at `length`, depth-major ([depth 0 samples…, depth 1 samples…]): the published prompt
        (`passkey`) or the real-text variant (`passkey-text`), `ropecli.evaluation.passkey`."""
        if (metric, length) not in self._prompts:
            if metric_record(metric) is PASSKEY_TEXT:
                if self._stream is None:
                    self._stream = filler_stream(self.tokens)
                rows = make_samples(self.tokenizer, self._stream, length, list(self.depths), self.per_depth,
                                    self.digits, self.seed, first_sample=self.prompt_start, frame=self.frame)
            else:
                rows = make_published_samples(self.tokenizer, length, list(self.depths), self.per_depth, self.seed,
                                              first_sample=self.prompt_start, frame=self.frame)
            self._prompts[(metric, length)] = [p for row in rows for p in row]
        return self._prompts[(metric, length)]

    def task_units(self, task: str, length: int) -> list:
        """A RULER task's prompts at `length` (`ropecli.evaluation.ruler.generate.make_units`), depth-major:
        `per_depth` per depth of `depths`, the haystack the documents' text."""
        if (task, length) not in self._tasks:
            if self._haystack is None:
                self._haystack = Haystack.of([d.text for d in self.docs])
            self._tasks[(task, length)] = make_units(self.tokenizer, self._haystack, task, length, list(self.depths),
                                                     self.per_depth, self.seed, first_sample=self.prompt_start,
                                                     frame=self.frame)
        return self._tasks[(task, length)]

    def units(self, metric: Metric = PPL) -> int:
        """Units of one evaluation: windows (ppl, kl), prompts (passkey, a task: per_depth per depth)."""
        return self.samples if metric.units == "windows" else self.per_depth * len(self.depths)

    def unit_inputs(self, metric: str, length: int) -> list[tuple]:
        """(token ids, answer start) of each unit: windows (answer start None), passkey prompts, or a task's
        (TaskUnit, None): by the metric's units (`ropecli.evaluation.metrics`)."""
        kind = _kind(metric)
        if kind == "prompts":
            return [(p.ids, p.answer_start) for p in self.prompts(length, metric)]
        if kind == "task":
            return [(u, None) for u in self.task_units(metric, length)]
        return [(w, None) for w in self.windows(length).ids]

    def unit_fingerprints(self, metric: str, length: int) -> list[str]:
        """sha256 of each unit's exact token ids (and a prompt's answer position): its cache identity.
        Hashed once per (units, length): every schedule of a race asks again."""
        kind = "windows" if _kind(metric) == "windows" else metric
        if (kind, length) not in self._fingerprints:
            out = []
            for ids, answer_start in self.unit_inputs(metric, length):
                if _kind(metric) == "task":  # the prompt, the answer's place and the control prompt
                    u = ids
                    h = hashlib.sha256(u.ids.tobytes())
                    h.update(f"answer@{u.answer_start}".encode())
                    if u.control_ids is not None:
                        h.update(u.control_ids.tobytes())
                        h.update(f"control@{u.control_start}".encode())
                    out.append(h.hexdigest()[:24])
                    continue
                h = hashlib.sha256(ids.astype("int64").tobytes())
                if answer_start is not None:
                    h.update(f"answer@{answer_start}".encode())
                out.append(h.hexdigest()[:24])
            self._fingerprints[(kind, length)] = out
        return self._fingerprints[(kind, length)]

    def fingerprint(self, metric: str, length: int) -> str:
        """sha256 of exactly what is scored: the window token ids, or the prompts and their answer positions."""
        if _kind(metric) == "task":
            return hashlib.sha256("".join(self.unit_fingerprints(metric, length)).encode()).hexdigest()[:16]
        if _kind(metric) == "windows":
            return self.windows(length).fingerprint
        h = hashlib.sha256()
        for p in self.prompts(length, metric):
            h.update(p.ids.tobytes())
            h.update(str(p.answer_start).encode())
        return h.hexdigest()[:16]


def _kind(metric: str) -> str:
    """What the units of the metric named `metric` (the name its units are cached under, a task's name) are: windows,
    prompts (passkey) or task (`ropecli.evaluation.metrics`)."""
    return metric_record(metric).units
