"""Re-key committed cache entries made under another transformers version (ropecli once hashed the config's
`transformers_version` into the model fingerprint; it no longer does, `ropecli.backends.load.fingerprint`).

    python measurements/rekey_cache.py --model smollm2 --version 5.23.0 [--cache-dir measurements/cache]

Loads the model, computes the fingerprint it had under that version and today's, and stores every entry of the
old one under today's key (the old files are left; an entry already there is kept). Prints the count."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ropecli.evaluation.cache import EvalCache, FORMAT
from ropecli.backends.load import fingerprint, load_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--version", required=True, help="the transformers version the entries were made with")
    ap.add_argument("--cache-dir", default="measurements/cache")
    a = ap.parse_args()
    backend = load_model(a.model, dtype="fp32", device="cpu")
    new, (old, _) = fingerprint(backend.model, a.version)
    cache, moved = EvalCache(a.cache_dir), 0
    for path in sorted(Path(a.cache_dir).glob("*.json")):
        entry = json.loads(path.read_text())
        if entry.get("format") != FORMAT or entry.get("key", {}).get("model") != old:
            continue
        key = entry["key"] | {"model": new}
        if cache.get(key) is None:
            cache.put(key, entry["result"])
            moved += 1
    print(f"{a.model}: {moved} entries of fingerprint {old} (transformers {a.version}) stored under {new}")


if __name__ == "__main__":
    main()
