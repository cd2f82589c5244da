"""The runtimes ropecli serves to, one module and one record each (`record.Runtime`), found by name.

`record(name)` resolves a name or an alias (hf, gguf, llama.cpp, …) to its record; `names()` is every
runtime in a fixed order. A module in this package that defines `RECORD` is a runtime: adding one is adding
its module. Nothing here imports torch.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from ropecli.errors import RopeCliError
from ropecli.export.runtimes.record import (AT_START_UP, PER_FORWARD, REQUIRED, ROPE_FREQS, Runtime,  # noqa: F401
                                            RuntimeModule, Version)

ORDER = ("transformers", "vllm", "llamacpp", "sglang", "ollama")  # how tables and lists show them; others after
SERVED_BY_DEFAULT = ("transformers", "vllm", "llamacpp")  # compare --workload without --runtime


@lru_cache(maxsize=1)
def records() -> dict[str, Runtime]:
    """{name: record} of every module of this package that defines RECORD, in ORDER."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        rec = getattr(module, "RECORD", None)
        if isinstance(rec, Runtime):
            missing = [f for f in REQUIRED if not callable(getattr(module, f, None))]
            if missing:  # a RuntimeModule (record.py) defines all three
                raise RopeCliError(f"runtime module {info.name} lacks {', '.join(missing)} (see export/runtimes/record.py: "
                                   "RuntimeModule)")
            found[rec.name] = rec
    return {n: found[n] for n in sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))}


def names() -> tuple[str, ...]:
    return tuple(records())


def spellings() -> dict[str, str]:
    """{every accepted word: the runtime's name}: names and aliases, lower case."""
    out = {}
    for rec in records().values():
        for word in (rec.name, *rec.aliases):
            out[word.lower()] = rec.name
    return out


def canonical(name: str) -> str:
    """The runtime's one spelling for `name` or an alias; one line naming the choices otherwise."""
    got = spellings().get(str(name).strip().lower())
    if got is None:
        raise RopeCliError(f"unknown runtime '{name}'; choose from {', '.join(names())}")
    return got


def record(name: str) -> Runtime:
    return records()[canonical(name)]


def module(name: str) -> RuntimeModule:
    """The runtime's module: its writer (`write`) and reader (`read_back`) beside its record."""
    return importlib.import_module(f"{__name__}.{canonical(name)}")
