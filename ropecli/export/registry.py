"""The registry of the runtimes ropecli serves to: one module and one record each (`runtimes.record.Runtime`) in the
package `ropecli.export.runtimes`, found by name.

`record(name)` resolves a name or an alias (hf, gguf, llama.cpp, …) to its record; `names()` is every runtime in a
fixed order; `resolve_runtime(name)` is the record with its module's writer, reader and optional hooks (`RuntimeHooks`). A module of the package
that defines `RECORD` is a runtime: adding one is adding its module. The registry sits above the runtime modules and
loads them by name, so no runtime module imports it, nor anything that does (the helpers they share live below:
`export.writers`, `export.readback`, `export.runs`, `export.hf`); tests/test_help_and_imports.py counts the edges
loading by name makes. Nothing here imports torch. `runtimes_markdown`: the records as docs/runtimes.md's table (a
test keeps the two equal).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from ropecli.errors import RopeCliError
from ropecli.export import runtimes
from ropecli.export.runtimes import ORDER, SERVED_BY_DEFAULT  # noqa: F401
from ropecli.export.runtimes.record import AT_START_UP, PER_FORWARD, ROPE_FREQS, Runtime, RuntimeHooks  # noqa: F401


@lru_cache(maxsize=1)
def records() -> dict[str, Runtime]:
    """{name: record} of every module of this package that defines RECORD, in ORDER."""
    found = {}
    for info in pkgutil.iter_modules(runtimes.__path__):
        module = importlib.import_module(f"ropecli.export.runtimes.{info.name}")
        if isinstance(getattr(module, "RECORD", None), Runtime):
            found[module.RECORD.name] = RuntimeHooks.of(module).record  # checked whole: a missing hook is one line
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


def resolve_runtime(name: str) -> RuntimeHooks:
    """The runtime resolved into one object: its record, its writer (`write`) and reader (`read_back`), and its optional
    hooks (None where its module has none)."""
    return RuntimeHooks.of(importlib.import_module(f"ropecli.export.runtimes.{canonical(name)}"))


def runtimes_markdown() -> list[str]:
    """One row per runtime: its name and aliases, what ropecli writes, how it applies an export at a request of n
    tokens and while decoding, and the versions that holds for (with their sources)."""
    lines = ["| runtime | `--to` (aliases) | writes | at a request of n tokens | while decoding with a KV cache | versions |",
             "|---|---|---|---|---|---|"]
    for rec in records().values():
        versions = "; ".join(f"{v.requirement or 'any'}: {v.what} ({v.source})" for v in rec.versions)
        aliases = f"`{rec.name}`" + (f" ({', '.join(f'`{a}`' for a in rec.aliases)})" if rec.aliases else "")
        lines.append(f"| {rec.label} | {aliases} | {rec.artefact} | {rec.at_length} | {rec.decoding} | {versions} |")
    return lines
