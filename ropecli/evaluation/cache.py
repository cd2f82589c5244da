"""On-disk cache of finished forward passes, so nothing computed is lost.

One JSON file per window (or passkey prompt) and schedule, named by the sha256 of its key. The key
covers everything that changes the number: model fingerprint, the unit's own fingerprint (its exact
token ids; a prompt's answer position too), length, method and parameters, factor, log-n, dtype,
scored tokens, metric (`ropecli.evaluation.evaluator.Evaluator.unit_key`). Not the number of windows
nor the seed: a window is the same window in a 4-window and an 8-window run, so `--samples 8` after
`--samples 4` computes only the 4 new ones, in any command. Each entry records the `FORMAT`
(the version of how results are computed and stored) it was written in. A file is trusted only if it
parses, carries the same key and format, and its checksum matches its result; otherwise it is
recomputed and overwritten. An entry of another format is never reused: it is recomputed, and the
command says once how many there were (`stale`). Writes go to a temporary file renamed into place,
so an interrupt never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ropecli.errors import RopeCliError
from ropecli.files import atomic_write_text

FORMAT = 2  # bump when a change to scoring or to the stored result would make old entries wrong
LEGACY_FORMAT = 1  # one entry per whole evaluation (samples and seed in the key): read once, split per window
_NAMING = 1  # part of every file name since the first format, so that entries of any format are found


def default_cache_dir() -> Path:
    env = os.environ.get("ROPECLI_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ropecli"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def key_hash(key: dict) -> str:
    return hashlib.sha256(_canonical({"format": _NAMING, **key}).encode()).hexdigest()


class EvalCache:
    def __init__(self, directory: str | Path | None = None, enabled: bool = True):
        self.dir = Path(directory) if directory else default_cache_dir()
        self.enabled = enabled
        self.hits = 0
        self.misses = 0
        self.rejected = 0  # corrupt or foreign entries found and ignored
        self.stale = 0  # entries of another FORMAT found and recomputed
        self.migrated = 0  # whole-evaluation entries of LEGACY_FORMAT split into per-window entries
        self.rekeyed = 0  # per-window entries stored under an earlier key of the same window, reused

    def check_writable(self) -> None:
        """Fail in one line, before any forward pass, when the cache folder cannot be created or written."""
        if not self.enabled:
            return
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            probe = self.dir / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise RopeCliError(f"--cache-dir {self.dir}: cannot write there ({exc.strerror or exc.__class__.__name__}); "
                               "pass a writable folder, or --no-cache") from None

    def reused(self, n: int, counter: str | None = None) -> None:
        """`n` windows found by a migration (`ropecli.evaluation.cache_migrations`) after `get` missed them:
        hits, not misses; `counter` (rekeyed) counts them too."""
        self.hits, self.misses = self.hits + n, self.misses - n
        if counter:
            self.count(counter, n)

    def count(self, counter: str, n: int = 1) -> None:
        """One more entry of a kind the closing note reports: stale, migrated, rekeyed."""
        setattr(self, counter, getattr(self, counter) + n)

    def _path(self, key: dict) -> Path:
        return self.dir / f"{key_hash(key)}.json"

    def get(self, key: dict, fmt: int = FORMAT) -> dict | None:
        """The stored result of `key` in format `fmt`, or None (a miss; a corrupt, foreign or stale entry is a miss too)."""
        if not self.enabled:
            return None
        path = self._path(key)
        entry = self._read(path)
        ok = entry is not None and _canonical(entry.get("key")) == _canonical(key) and \
            entry.get("checksum") == hashlib.sha256(_canonical(entry.get("result")).encode()).hexdigest()
        if ok and entry.get("format") == fmt:
            self.hits += 1
            return entry["result"]
        self.misses += 1
        if ok:  # another format: never reused, recomputed and counted for the closing note
            self.stale += 1
        elif entry is not None or path.exists():
            self.rejected += 1
        return None

    def legacy(self, key: dict, fmt: int = LEGACY_FORMAT) -> dict | None:
        """An entry of format `fmt` (default: a whole evaluation of LEGACY_FORMAT) under `key`, or None;
        counts nothing (the caller counts what it does with it)."""
        if not self.enabled:
            return None
        entry = self._read(self._path(key))
        if entry is None or entry.get("format") != fmt or _canonical(entry.get("key")) != _canonical(key):
            return None
        if entry.get("checksum") != hashlib.sha256(_canonical(entry.get("result")).encode()).hexdigest():
            return None
        return entry["result"]

    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def put(self, key: dict, result: dict) -> None:
        if not self.enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        entry = {"format": FORMAT, "key": key, "result": result,
                 "checksum": hashlib.sha256(_canonical(result).encode()).hexdigest()}
        atomic_write_text(self._path(key), json.dumps(entry))
