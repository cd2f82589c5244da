"""Evaluation documents: where text comes from and how fixed-length windows are sampled.

Sources (`--data`): text files, directories (every *.txt, *.md, *.jsonl, *.json inside, sorted), JSONL
files (one document per line, from the field `--text-field`, default "text"), JSON files (a list of
strings or of objects with that field, or one such object), or `hf:NAME[:CONFIG][:SPLIT]`
for a HF datasets dataset (optional extra). Without `--data`: the held-out Shakespeare plays.

Sampling policy (deterministic in `seed`): each document is tokenized whole; a document shorter than
the evaluation length is skipped; every eligible document is cut into non-overlapping windows of
`length` tokens (the tokens `--bos` puts before a text first: `ropecli.evaluation.bos_policy`). Windows are then taken round-robin
over the documents in a seeded order: a first window of every document, then a second, … until
`samples` are chosen. Which window of a document comes first, second, …: a stratified random order
along it (`stratified_order`): its first 2^j windows lie one in each 2^j-th of the document, each at
random inside its part. So the windows sampled from a document are a stratified random sample of the
windows it holds, whatever their number, and the estimand (`ropecli.evaluation.estimand`) is the mean
over the whole text, not over its heads (YaRN's "truncate to the target length" reads only heads: a
text whose loss drifts along it would be misread).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ropecli.deferred import deferred, installed
from ropecli.errors import RopeCliError
from ropecli.evaluation.corpus import held_out_plays

datasets = deferred("datasets")

TEXT_SUFFIXES = {".txt", ".md", ".jsonl", ".json"}


@dataclass(frozen=True)
class Document:
    name: str  # file name, play name, or "file.jsonl:line"
    text: str


def load_documents(data: list[str] | None, text_field: str = "text") -> tuple[list[Document], str]:
    """Documents and a short description of where they came from."""
    if not data:
        docs = [Document(name, text) for name, text in held_out_plays().items()]
        return docs, "built-in: held-out Shakespeare plays (" + ", ".join(d.name for d in docs) + ")"
    docs: list[Document] = []
    for item in data:
        if item.startswith("hf:"):
            docs.extend(_hf_documents(item[3:], text_field))
            continue
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
            if not files:
                raise RopeCliError(f"--data {item}: the folder has no .txt, .md, .jsonl or .json files")
        elif path.is_file():
            files = [path]
        else:
            raise RopeCliError(f"--data {item}: no such file or folder; pass a text file, a folder, a .jsonl or .json file, or hf:DATASET")
        for f in files:
            docs.extend(_file_documents(f, text_field))
    docs = [d for d in docs if d.text.strip()]
    if not docs:
        raise RopeCliError(f"--data {' '.join(data)} holds no text")
    return docs, ", ".join(data)


def _file_documents(path: Path, text_field: str) -> list[Document]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RopeCliError(f"cannot read {path} ({exc.__class__.__name__}); pass UTF-8 text files") from None
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _json_documents(path, text, text_field)
    if suffix != ".jsonl":
        return [Document(path.name, text)]
    docs = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            docs.append(Document(f"{path.name}:{i}", str(record[text_field])))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise RopeCliError(f"{path}:{i} is not a JSON object with a '{text_field}' field; fix the line or pass --text-field") from None
    return docs


def _json_documents(path: Path, text: str, text_field: str) -> list[Document]:
    """A JSON file: a list of strings, a list of objects with `text_field`, or one such object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RopeCliError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno}); fix it, or rename it .txt to score it as prose") from None
    records = data if isinstance(data, list) else [data]
    docs = []
    for i, record in enumerate(records):
        if isinstance(record, str):
            docs.append(Document(f"{path.name}:{i}", record))
        elif isinstance(record, dict) and isinstance(record.get(text_field), str):
            docs.append(Document(f"{path.name}:{i}", record[text_field]))
        else:
            raise RopeCliError(f"{path}: item {i} is neither a string nor an object with a '{text_field}' string; "
                               "pass --text-field, or write a list of texts")
    return docs


def _hf_documents(spec: str, text_field: str) -> list[Document]:
    if not installed("datasets"):
        raise RopeCliError("hf: data needs the 'datasets' package; pip install 'ropecli[datasets]'") from None
    name, config, split = (spec.split(":") + [None, None])[:3]
    ds = datasets.load_dataset(name, config or None, split=split or "test")
    if text_field not in ds.column_names:
        raise RopeCliError(f"dataset {name} has no field '{text_field}' (it has {', '.join(ds.column_names)}); pass --text-field")
    return [Document(f"{name}:{i}", row[text_field]) for i, row in enumerate(ds)]


@dataclass(frozen=True)
class Windows:
    """The sampled evaluation inputs at one length."""
    length: int
    ids: np.ndarray  # (samples, length) int64 token ids
    names: list[str]  # source document of each window
    skipped: int  # documents shorter than `length`

    @cached_property
    def fingerprint(self) -> str:
        """sha256 of the exact token ids: covers the text, the tokenizer and the sampling."""
        h = hashlib.sha256(str(self.ids.shape).encode())
        h.update(np.ascontiguousarray(self.ids, dtype=np.int64).tobytes())
        return h.hexdigest()[:16]


_TOKENIZED: OrderedDict[str, list[list[int]]] = OrderedDict()  # (tokenizer, texts) digest -> ids, the newest last
_TOKENIZED_KEPT = 4  # the plays under a handful of tokenizers: a few MB of ids


def tokenizer_digest(tokenizer) -> str | None:
    """sha256 of what decides a text's ids: the tokenizer's class and its fast backend's whole serialization
    (vocabulary, merges, normalizer, pre-tokenizer, added tokens); None for a tokenizer without one (not memoized)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    return hashlib.sha256(f"{type(tokenizer).__qualname__}\0{backend.to_str()}".encode()).hexdigest()


def tokenize_documents(docs: list[Document], tokenizer) -> list[list[int]]:
    """Each document's token ids (no special tokens). The same texts under the same tokenizer are tokenized once per
    process: the built-in plays take seconds, and one process (advise, a test session) opens the corpus many times.
    The outer list is the caller's own; the id lists are shared, never changed."""
    digest = tokenizer_digest(tokenizer)
    if digest is None:
        return [tokenizer(d.text, add_special_tokens=False)["input_ids"] for d in docs]
    h = hashlib.sha256(digest.encode())
    for d in docs:
        h.update(b"\0%d\0" % len(d.text))
        h.update(d.text.encode("utf-8", "surrogatepass"))
    key = h.hexdigest()
    if key not in _TOKENIZED:
        _TOKENIZED[key] = [tokenizer(d.text, add_special_tokens=False)["input_ids"] for d in docs]
        while len(_TOKENIZED) > _TOKENIZED_KEPT:
            _TOKENIZED.popitem(last=False)
    _TOKENIZED.move_to_end(key)
    return list(_TOKENIZED[key])


def count_windows(token_ids: list[list[int]], length: int, lead: list[int]) -> int:
    """How many windows of `length` tokens (`lead`, the tokens before the text, counted in) the documents hold (what
    `sample_windows` can take at most)."""
    body = length - len(lead)
    return sum(len(ids) // body for ids in token_ids if len(ids) >= body) if body > 0 else 0


def split_documents(docs: list[Document], token_ids: list[list[int]], length: int, seed: int, lead: list[int],
                    part: int | None) -> list[int]:
    """Indices of the documents long enough for `length`, in the seeded order; with `part` and at least
    two of them, every other one from `part` on (0: the held-out half, the larger one with an odd count;
    1: the searched half), so that searched and held-out windows come from different documents."""
    body = length - len(lead)
    eligible = [i for i, ids in enumerate(token_ids) if len(ids) >= body]
    order = [eligible[j] for j in np.random.default_rng(seed).permutation(len(eligible))]
    return order[part::2] if part is not None and len(order) >= 2 else order


def sample_windows(docs: list[Document], token_ids: list[list[int]], length: int, samples: int, seed: int,
                   lead: list[int], part: int | None = None) -> Windows:
    """`samples` windows of `length` tokens: `lead` (the BOS of `--bos`, `ropecli.evaluation.bos_policy`, or nothing)
    then length - len(lead) tokens of one document, drawn along the documents in the seeded order."""
    if length < 2:
        raise RopeCliError(f"--len {length} is too short; perplexity needs at least 2 tokens")
    if samples < 1:
        raise RopeCliError(f"--samples {samples} must be at least 1")
    body = length - len(lead)  # text tokens per window
    order = split_documents(docs, token_ids, length, seed, lead, part)
    per_doc = [len(token_ids[i]) // body for i in order]
    along: dict[int, list[int]] = {}  # document -> its windows' sampling order, made when first needed
    chosen: list[tuple[str, list[int]]] = []
    for w in range(max(per_doc, default=0)):
        for j, i in enumerate(order):
            if w < per_doc[j] and len(chosen) < samples:
                if i not in along:
                    along[i] = stratified_order(per_doc[j], np.random.default_rng([seed, zlib.crc32(docs[i].name.encode())]))
                at = along[i][w]
                chosen.append((docs[i].name, token_ids[i][at * body:(at + 1) * body]))
    if len(chosen) < samples:
        longest = max((len(t) for t in token_ids), default=0)
        raise RopeCliError(f"too little text for --len {length}: only {len(chosen)} window(s) of {length} tokens "
                           f"(longest document {longest} tokens); lower --len or --samples, or add text with --data")
    ids = np.array([list(lead) + w for _, w in chosen], dtype=np.int64)
    return Windows(length, ids, [n for n, _ in chosen], len(docs) - len(split_documents(docs, token_ids, length, seed, lead, None)))


def stratified_order(m: int, rng: np.random.Generator) -> list[int]:
    """The positions 0…m-1 of a document's windows in sampling order: for every j, the first 2^j lie
    one in each 2^j-th of the document (as far as m allows), each at random inside its part. An
    Owen-scrambled base-2 van der Corput sequence (Owen 1995): point k's binary digits are k's bits
    reversed, each flipped by a coin of its node in the binary tree of parts, plus a uniform offset in
    its finest part; position = floor(u * m); positions already taken are skipped, and any never hit
    come last in random order. m = 1: [0]."""
    if m <= 1:
        return list(range(m))
    depth = (m - 1).bit_length() + 1  # 2^depth >= 2m points
    scale = 1 << depth
    flips = [-1] * (2 * scale)  # the coin of node (prefix of i digits v): index (1 << i) | v, drawn when first reached
    out, seen = [], [False] * m
    for k in range(scale):
        node, value = 1, 0  # value: the digits so far as an integer, the first digit highest
        for i in range(depth):
            flip = flips[node]
            if flip < 0:  # the same draws, in the same order, as one coin per node on first visit
                flip = flips[node] = int(rng.integers(2))
            digit = ((k >> i) & 1) ^ flip
            value = (value << 1) | digit
            node = (node << 1) | digit
        u = value / scale + rng.random() / scale  # sum(digit_i / 2^(i+1)): exact in binary, as is the division
        pos = min(int(u * m), m - 1)
        if not seen[pos]:
            seen[pos] = True
            out.append(pos)
    rest = [p for p in range(m) if not seen[p]]
    return out + [rest[i] for i in rng.permutation(len(rest))]
