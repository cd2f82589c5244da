"""One record per runtime: what ropecli writes for it, what it reads, how it applies a schedule at a request
of n tokens and while it decodes with a KV cache, which of its versions that holds for, and how to find the
installed version. The records are data; the code that writes and reads an artefact lives beside each
record in its runtime's module (`ropecli.export.runtimes.<name>`), and everything else asks the registry
(`ropecli.export.registry.record(name)`, `resolve_runtime(name)`: the record with its module's hooks) instead of spelling
runtime names itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable, Protocol

from ropecli.errors import RopeCliError
from ropecli.maps.position_maps import MAPS

# How a runtime decides which schedule a forward pass runs under (`ropecli.export.served`):
PER_FORWARD = "per-forward"  # transformers: each forward pass picks by its own length (longrope, dynamic)
AT_START_UP = "at-start-up"  # vLLM, SGLang: decided once from --max-model-len / --context-length
ROPE_FREQS = "rope-freqs"  # llama.cpp, Ollama: the GGUF's rope_freqs (or scaling keys), at every length
RULES = (PER_FORWARD, AT_START_UP, ROPE_FREQS)


class EveryMap:
    """`Runtime.maps = EVERY_MAP`: every map of the registry (`ropecli.maps.position_maps.MAPS`), read when asked, so a
    map registered later is served with no edit here (transformers: its folder's modeling file runs any map)."""

    def __repr__(self) -> str:
        return "EVERY_MAP"


EVERY_MAP = EveryMap()


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
    # the position maps (maps.position_maps) it serves, or EVERY_MAP; ask `serves_map`; its module's `map_lines` says how
    maps: tuple[str, ...] | EveryMap = ()
    maps_broken: tuple[tuple[str, str], ...] = ()  # (map, why): served by older builds, broken in current ones
    map_output: str = ""  # what --out takes for a position map where it differs from `output` ("folder": vLLM's plugin)
    map_versions: str = ""  # the releases that serve a position map where they are not `versions`' (vLLM: the plugin's)
    p_rope: str = ""  # what it does with Gemma 4's p-RoPE block (export.p_rope); "": not read
    p_rope_schedules: str = ""  # which schedules it serves there: "uniform" (one factor), "per-pair", "" (as shipped only)
    temperatures: tuple[tuple[str, str], ...] = ()  # (temperature kind, what it does with it) (export.served_temperature)
    # (kind, how the export carries a changed value, `{values}` filled in) where it can; (kind:instead, the way round)
    temperature_changes: tuple[tuple[str, str], ...] = ()
    # how it applies a switching export of a model that ships a schedule ({Ls}, {shipped} filled in); "": at_length
    at_length_shipped: str = ""
    dynamic_keeps_L: bool = False  # a dynamic NTK export declares L (max_position_embeddings), not T: it grows from L
    decode_checked: bool = False  # verify decodes its export across L through a KV cache by its rule, on ropecli's model

    def __post_init__(self):
        if not self.dynamic_rule:
            object.__setattr__(self, "dynamic_rule", self.rule)

    def map_names(self) -> tuple[str, ...]:
        """The names of the position maps it serves (EVERY_MAP: the registry's, in its order)."""
        if isinstance(self.maps, EveryMap):
            return tuple(MAPS)
        return self.maps

    def serves_map(self, name: str) -> bool:
        """Whether it serves the position map `name` (`maps_broken` says where current builds break one)."""
        return name in self.map_names()

    def describe(self) -> dict:
        """The record for --json and the docs."""
        return {"name": self.name, "label": self.label, "aliases": list(self.aliases), "artefact": self.artefact,
                "reads": self.reads, "at_length": self.at_length, "decoding": self.decoding, "rule": self.rule, "dynamic_rule": self.dynamic_rule,
                "serves_dynamic": self.serves_dynamic, "maps": list(self.map_names()),
                "maps_broken": dict(self.maps_broken),
                "versions": [{"requirement": v.requirement or "any", "what": v.what, "source": v.source,
                              **({"older": v.older} if v.older else {})} for v in self.versions]}


class RuntimeModule(Protocol):
    """What a runtime's module (`ropecli.export.runtimes.<name>`) defines beside its RECORD; the registry refuses a
    module that lacks one of the three (`REQUIRED`). The optional hooks (`run`, `unavailable`, `map_lines`, `write_map`,
    `verify_map`, `claim_note`, `stated_geometry`) are declared by `RuntimeHooks`, the object the registry resolves a runtime into."""
    RECORD: Runtime

    def write(self, spec: Any, geom: Any, rope: Any, out: str | None, *, model: str | None = None,
              gguf_file: str | None = None, force: bool = False, consistent: bool = True, replace: bool = False) -> dict:
        """Write the export (or, `out` None, say it): the result's `lines`, `block`, `path` … for the command."""

    def read_back(self, artefact: Any, exp: Any) -> tuple[Any, Any]:
        """(what the runtime applies at the target length, `ropecli.export.readback.Applied`; the block read)."""

    def claims(self, path: Any) -> bool:
        """Whether an artefact at `path` is this runtime's (verify without --runtime)."""


REQUIRED = ("write", "read_back", "claims")


@dataclass(frozen=True)
class RuntimeHooks:
    """A runtime resolved once (`ropecli.export.registry.resolve_runtime`): its record and what its module offers, the optional
    hooks None where it has none, so a caller asks `hooks.write_map is not None`, never `hasattr`."""
    record: Runtime
    write: Callable[..., dict]
    read_back: Callable[..., tuple]
    claims: Callable[[Any], bool]
    run: Callable[..., Any] | None = None  # (target, block, model, exp, run_len, cache_dir, gguf_file) -> Check: verify
    unavailable: Callable[[], str | None] | None = None  # why the runtime cannot run here (not installed)
    map_lines: Callable[..., list] | None = None  # (map, out, target_len, model=, gguf_file=) -> the flags serving a map
    write_map: Callable[..., dict] | None = None  # a position map written into the runtime's own config (SGLang: DCA)
    verify_map: Callable[..., list] | None = None  # (target, exp) -> the checks of such a config
    claim_note: Callable[[Any], str | None] | None = None  # (artefact) -> verify's note when it guessed this runtime
    stated_geometry: Callable[[Any], dict] | None = None  # (artefact) -> d, base, L as it states them; None: a JSON's

    @classmethod
    def of(cls, module: Any) -> "RuntimeHooks":
        """The hooks of a runtime module; a module lacking a required one is refused in one line."""
        name = module.__name__.rsplit(".", 1)[-1]
        missing = [f for f in REQUIRED if not callable(getattr(module, f, None))]
        if missing:
            raise RopeCliError(f"runtime module {name} lacks {', '.join(missing)} (see export/runtimes/record.py: "
                               "RuntimeModule)")
        return cls(module.RECORD, **{f.name: getattr(module, f.name, None) for f in fields(cls) if f.name != "record"})
