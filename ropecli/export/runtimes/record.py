"""One record per runtime: what ropecli writes for it, what it reads, how it applies a schedule at a request
of n tokens and while it decodes with a KV cache, which of its versions that holds for, and how to find the
installed version. The records are data; the code that writes and reads an artefact lives beside each
record in its runtime's module (`ropecli.export.runtimes.<name>`), and everything else asks the registry
(`ropecli.export.runtimes.record(name)`) instead of spelling runtime names itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# How a runtime decides which schedule a forward pass runs under (`ropecli.export.served`):
PER_FORWARD = "per-forward"  # transformers: each forward pass picks by its own length (longrope, dynamic)
AT_START_UP = "at-start-up"  # vLLM, SGLang: decided once from --max-model-len / --context-length
ROPE_FREQS = "rope-freqs"  # llama.cpp, Ollama: the GGUF's rope_freqs (or scaling keys), at every length
RULES = (PER_FORWARD, AT_START_UP, ROPE_FREQS)


@dataclass(frozen=True)
class Version:
    """A version requirement of what ropecli writes, with its source (a file and function, a PR)."""
    requirement: str  # a PEP 440 specifier, e.g. ">=0.11.1"; "" where it holds for every version
    what: str  # what holds from that version on
    source: str  # where it is written: the runtime's file and function, its PR
    older: str = ""  # what an older version does instead ("" where nothing differs)


@dataclass(frozen=True)
class Runtime:
    name: str  # the one spelling: flags, JSON, tables, cache keys
    label: str  # how its users write it, for people
    artefact: str  # what `ropecli export --to NAME` writes
    reads: str  # what the runtime reads of the artefact
    at_length: str  # how it applies an export at a request of n tokens
    decoding: str  # how it applies it while decoding with a KV cache
    rule: str  # one of RULES
    serves_dynamic: bool  # whether it has dynamic NTK
    aliases: tuple[str, ...] = ()  # older words, accepted everywhere
    package: str | None = None  # the pip distribution whose installed version is read
    command: str | None = None  # or the executable whose presence is checked
    versions: tuple[Version, ...] = field(default_factory=tuple)
    drops_cache_at_switch: tuple[str, ...] = ()  # model types whose generate() re-prefills at a short/long switch
    dynamic_rule: str = ""  # how it runs dynamic NTK where that differs from `rule` (SGLang: fixed at start-up)
    output: str = "json"  # what --out takes: "json" (a file), "folder-or-json", "gguf" (NEW.gguf), "folder"
    needs_gguf: bool = False  # the export goes into a GGUF (--model FILE.gguf)
    maps: tuple[str, ...] = ()  # the position maps (rope.position_maps) it serves; its module's `map_lines` says how
    maps_broken: tuple[tuple[str, str], ...] = ()  # (map, why): served by older builds, broken in current ones
    p_rope: str = ""  # what it does with Gemma 4's p-RoPE block (export.p_rope); "": not read
    p_rope_schedules: str = ""  # which schedules it serves there: "uniform" (one factor), "per-pair", "" (as shipped only)
    temperatures: tuple[tuple[str, str], ...] = ()  # (temperature kind, what it does with it) (export.temperature)
    # (kind, how the export carries a changed value, `{values}` filled in) where it can; (kind:instead, the way round)
    temperature_changes: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if not self.dynamic_rule:
            object.__setattr__(self, "dynamic_rule", self.rule)

    def describe(self) -> dict:
        """The record for --json and the docs."""
        return {"name": self.name, "label": self.label, "aliases": list(self.aliases), "artefact": self.artefact,
                "reads": self.reads, "at_length": self.at_length, "decoding": self.decoding, "rule": self.rule, "dynamic_rule": self.dynamic_rule,
                "serves_dynamic": self.serves_dynamic, "maps": list(self.maps),
                "maps_broken": dict(self.maps_broken),
                "versions": [{"requirement": v.requirement or "any", "what": v.what, "source": v.source,
                              **({"older": v.older} if v.older else {})} for v in self.versions]}


class RuntimeModule(Protocol):
    """What a runtime's module (`ropecli.export.runtimes.<name>`) defines beside its RECORD; the registry refuses a
    module that lacks one of the three (`REQUIRED`). `run(target, block, model, exp, run_len, cache_dir, gguf_file)`
    (the runtime itself scores a window, for verify) and `unavailable()` (why it cannot run here) are optional."""
    RECORD: Runtime

    def write(self, spec: Any, geom: Any, target: Any, out: str | None, *, model: str | None = None,
              gguf_file: str | None = None, force: bool = False, consistent: bool = True, replace: bool = False) -> dict:
        """Write the export (or, `out` None, say it): the result's `lines`, `block`, `path` … for the command."""

    def read_back(self, target: Any, exp: Any) -> tuple[Any, Any]:
        """(what the runtime applies at the target length, `ropecli.export.readback.Applied`; the block read)."""

    def claims(self, path: Any) -> bool:
        """Whether an artefact at `path` is this runtime's (verify without --runtime)."""


REQUIRED = ("write", "read_back", "claims")
