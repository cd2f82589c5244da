"""What an evaluation scores: the token windows (ppl, kl) and passkey prompts at each length, drawn
once from the documents and the same for every schedule, so that results are paired.

Windows: `ropecli.evaluation.data.sample_windows` (the YaRN protocol on a seeded sample). Prompts:
`ropecli.evaluation.passkey.make_samples`. A held-out copy (`held_out`) takes the windows and prompts
that follow this one's in the same seeded sample: text this one never scores.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.evaluation.data import Windows, count_windows, load_documents, sample_windows, tokenize_documents
from ropecli.evaluation.passkey import DEFAULT_DEPTHS


@dataclass
class Inputs:
    tokenizer: Any
    docs: list  # Documents
    tokens: list  # token ids of each document
    data_label: str  # where the text came from, in words
    samples: int = 4  # windows per length; passkey: prompts per depth and length
    seed: int = 0
    first_window: int = 0  # held-out: windows first_window … first_window+samples-1 of the seeded sample
    depths: tuple = DEFAULT_DEPTHS  # passkey: where the key sits in the filler
    digits: int = 5  # passkey: digits of a key
    _windows: dict = field(default_factory=dict, repr=False)
    _prompts: dict = field(default_factory=dict, repr=False)
    _stream: Any = field(default=None, repr=False)
    _resized: dict = field(default_factory=dict, repr=False)
    _fingerprints: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, tokenizer, data: list[str] | None = None, text_field: str = "text", **kw) -> "Inputs":
        docs, label = load_documents(data, text_field)
        return cls(tokenizer, docs, tokenize_documents(docs, tokenizer), label, **kw)

    def held_out(self, samples: int) -> "Inputs":
        """The `samples` windows (and prompts) after this one's; the tokenized documents are shared."""
        return replace(self, samples=samples, first_window=self.first_window + self.samples, _windows={}, _prompts={},
                       _resized={}, _fingerprints={})

    def resized(self, samples: int | None) -> "Inputs":
        """The first `samples` windows (prompts per depth) of the same seeded sample, from the same first
        window: a prefix of a larger sample, so the windows two sizes share are the same windows."""
        if samples is None or samples == self.samples:
            return self
        if samples not in self._resized:
            self._resized[samples] = replace(self, samples=samples, _windows={}, _prompts={}, _resized={},
                                             _fingerprints={})
        return self._resized[samples]

    def available(self, length: int) -> int:
        """Windows at `length` this sample can still take from its first window on (the data's limit)."""
        bos = getattr(self.tokenizer, "bos_token_id", None)
        return count_windows(self.tokens, length, bos) - self.first_window

    def check_available(self, length: int, samples: int, what: str = "--max-windows") -> None:
        have = self.available(length)
        if have < samples:
            raise RopeCliError(f"{what} {samples}: the data holds only {max(have, 0)} window(s) of {length} tokens from "
                               f"window {self.first_window} on; lower {what}, or add text with --data")

    def windows(self, length: int) -> Windows:
        if length not in self._windows:
            bos = getattr(self.tokenizer, "bos_token_id", None)
            win = sample_windows(self.docs, self.tokens, length, self.first_window + self.samples, self.seed, bos)
            if self.first_window:  # the first windows of a larger sample are the smaller sample: skip them
                win = Windows(length, win.ids[self.first_window:], win.names[self.first_window:], win.skipped)
            self._windows[length] = win
        return self._windows[length]

    def prompts(self, length: int) -> list:
        """The passkey prompts at `length`, depth-major ([depth 0 samples…, depth 1 samples…])."""
        if length not in self._prompts:
            from ropecli.evaluation.passkey import filler_stream, make_samples

            if self._stream is None:
                self._stream = filler_stream(self.tokens)
            rows = make_samples(self.tokenizer, self._stream, length, list(self.depths), self.samples,
                                self.digits, self.seed, first_sample=self.first_window)
            self._prompts[length] = [p for row in rows for p in row]
        return self._prompts[length]

    def units(self, metric: str = "ppl") -> int:
        """Forward passes of one evaluation: windows (ppl, kl) or prompts (passkey)."""
        return self.samples * (len(self.depths) if metric == "passkey" else 1)

    def unit_inputs(self, metric: str, length: int) -> list[tuple]:
        """(token ids, answer start) of each unit: windows (answer start None) or passkey prompts."""
        if metric == "passkey":
            return [(p.ids, p.answer_start) for p in self.prompts(length)]
        return [(w, None) for w in self.windows(length).ids]

    def unit_fingerprints(self, metric: str, length: int) -> list[str]:
        """sha256 of each unit's exact token ids (and a prompt's answer position): its cache identity.
        Hashed once per (units, length): every schedule of a race asks again."""
        kind = "passkey" if metric == "passkey" else "windows"
        if (kind, length) not in self._fingerprints:
            out = []
            for ids, answer_start in self.unit_inputs(metric, length):
                h = hashlib.sha256(ids.astype("int64").tobytes())
                if answer_start is not None:
                    h.update(f"answer@{answer_start}".encode())
                out.append(h.hexdigest()[:24])
            self._fingerprints[(kind, length)] = out
        return self._fingerprints[(kind, length)]

    def fingerprint(self, metric: str, length: int) -> str:
        """sha256 of exactly what is scored: the window token ids, or the prompts and their answer positions."""
        if metric != "passkey":
            return self.windows(length).fingerprint
        h = hashlib.sha256()
        for p in self.prompts(length):
            h.update(p.ids.tobytes())
            h.update(str(p.answer_start).encode())
        return h.hexdigest()[:16]
