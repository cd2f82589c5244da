"""On-disk cache of finished evaluations, so nothing computed is lost.

One JSON file per evaluation, named by the sha256 of its key. The key covers everything that
changes the number: model fingerprint, data fingerprint (the exact token ids), length, samples,
seed, method and parameters, factor, log-n, dtype, scored tokens. A file is trusted only if it
parses, carries the same key, and its checksum matches its result; otherwise it is recomputed and
overwritten. Writes go to a temporary file and are renamed into place, so an interrupt never leaves
a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ropecli.files import atomic_write_text

FORMAT = 1


def default_cache_dir() -> Path:
    env = os.environ.get("ROPECLI_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ropecli"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def key_hash(key: dict) -> str:
    return hashlib.sha256(_canonical({"format": FORMAT, **key}).encode()).hexdigest()


class EvalCache:
    def __init__(self, directory: str | Path | None = None, enabled: bool = True):
        self.dir = Path(directory) if directory else default_cache_dir()
        self.enabled = enabled
        self.hits = 0
        self.misses = 0
        self.rejected = 0  # corrupt or foreign entries found and ignored

    def _path(self, key: dict) -> Path:
        return self.dir / f"{key_hash(key)}.json"

    def get(self, key: dict) -> dict | None:
        if not self.enabled:
            return None
        path = self._path(key)
        if not path.exists():
            self.misses += 1
            return None
        try:
            entry = json.loads(path.read_text())
            ok = (entry.get("format") == FORMAT and _canonical(entry.get("key")) == _canonical(key)
                  and entry.get("checksum") == hashlib.sha256(_canonical(entry.get("result")).encode()).hexdigest())
        except (OSError, ValueError, AttributeError):
            ok = False
        if not ok:
            self.rejected += 1
            self.misses += 1
            return None
        self.hits += 1
        return entry["result"]

    def put(self, key: dict, result: dict) -> None:
        if not self.enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        entry = {"format": FORMAT, "key": key, "result": result,
                 "checksum": hashlib.sha256(_canonical(result).encode()).hexdigest()}
        atomic_write_text(self._path(key), json.dumps(entry))
