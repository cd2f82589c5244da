"""What `ropecli verify` checks an artefact against (`Expected`): a Spec at factor k on the source model's
geometry and the target length T. Found, in this order (`what_was_measured`):
1. the manifest `ropecli export` wrote beside the artefact (`ropecli.export.manifest.write_manifest`);
2. advise's advice.json (--advice, or the one beside the artefact): its winner;
3. the flags (--method, --b, --param, --len) on --model's geometry, or the flags' and what the artefact
   itself states (`ropecli.export.readback.artefact_geometry`).
Explicit flags win over a file found beside the artefact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.export.manifest import describes, manifest_path
from ropecli.export.readback import artefact_geometry, read_json
from ropecli.export.runtimes.record import RuntimeHooks
from ropecli.maps.map_spelling import map_from_json
from ropecli.models.config import geometry_from_flags, read_rope_config
from ropecli.models.model_rope import ModelRope
from ropecli.spec import Spec, make_spec, parse_specs


@dataclass
class Expected:
    spec: Spec
    rope: ModelRope  # the source model's geometry: d, bases, L
    factor: float
    target_len: int
    source: str  # where the expectation came from, in words
    warning: str = ""  # what the user should know first (an artefact rewritten after its manifest), or ""

    def schedule(self, layer_type: str | None) -> tuple[np.ndarray, float]:
        """(factors, attention factor) the export must carry for `layer_type` at T; log-n as the
        constant sqrt(log_L T) the exporters write."""
        base = self.rope.scaled_bases.get(layer_type, self.rope.base)
        sched = self.spec.schedule(self.rope.geometry(self.factor, base), self.target_len)
        attention = sched.attention_factor
        if self.spec.log_n:
            attention = math.sqrt(math.log(self.target_len) / math.log(self.rope.train_len))
        return sched.factors, attention

    def switch_len(self, how: str) -> int:
        """The original length an artefact must state: L0, or for a model that ships a schedule and a longrope
        export, Ls (transformers switches from the shipped short_factor to the extension past it)."""
        if self.rope.shipped is not None and not how.startswith("dynamic"):
            return self.rope.shipped_len
        return self.rope.train_len

    def base_of(self, layer_type: str | None) -> float:
        return self.rope.scaled_bases.get(layer_type, self.rope.base)


def expected_from_advice(advice: dict, path: Path, rope: ModelRope | None = None) -> Expected:
    """The winner of an advice.json at its k; `rope` (the model's, read from its config) adds what the
    file does not keep (partial rotary, layer types), with the advice's d, base and L checked against it."""
    try:
        w = advice["winner_spec"]
        spec = make_spec(("native+" if w.get("composed") else "") + w["method"], {**w["params"], **(w.get("temperature") or {})},
                         log_n=w.get("log_n", False))
        L, k, d, base = int(advice["train_len"]), float(advice["factor"]), int(advice["rotary_dim"]), float(advice["base"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RopeCliError(f"{path} is not an advice.json written by `ropecli advise` (missing {exc}); "
                           "pass --method and --len instead") from None
    if rope is None or (rope.rotary_dim, rope.train_len) != (d, L):
        rope = ModelRope(advice.get("model") or "", d, base, L)
    return Expected(spec, rope, k, int(round(k * L)), f"{path} (the winner, {spec.label} at k = {k:g})")


def expected_from_export(manifest: dict, path: Path, rope: ModelRope | None = None) -> Expected:
    """What `ropecli export` wrote beside an artefact (`ropecli.export.manifest.write_manifest`): its schedule at
    its k on the geometry it used; `rope` (the model's) adds partial rotary and layer types."""
    try:
        params = manifest["params"]
        if not isinstance(params, dict):
            raise TypeError("params")
        method = ("native+" if manifest.get("composed") else "") + manifest["method"]
        spec = make_spec(method, {**params, **(manifest.get("temperature") or {})}, log_n=bool(manifest.get("log_n", False)))
        spec = spec.but(position_map=map_from_json(manifest.get("position_map")))
        L, k, d = int(manifest["train_len"]), float(manifest["factor"]), int(manifest["rotary_dim"])
        base, T = float(manifest["base"]), int(manifest["target_len"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise RopeCliError(f"{path} is not a manifest written by `ropecli export` (bad or missing {exc}); "
                           "export again, or pass --method and --len") from None
    if rope is None or (rope.rotary_dim, rope.train_len) != (d, L):
        rope = ModelRope(manifest.get("model") or "", d, base, L)
    return Expected(spec, rope, k, T, f"{path} ({spec.label} at k = {k:g})")


@dataclass
class Measured:
    """What verify's flags say (all optional): the model, the schedule, the target, an advice.json."""
    model: str | None = None
    gguf_file: str | None = None
    rotary_dim: int | None = None
    base: float | None = None
    train_len: int | None = None
    rope_layers: str | None = None
    k: float | None = None
    target_len: int | None = None
    methods: list[str] | None = None
    bs: list[float] | None = None
    params: list[str] | None = None
    factors: str | None = None
    log_n: bool = False
    advice: str | None = None


def what_was_measured(artefact: Path, runtime: RuntimeHooks, flags: Measured) -> tuple[Expected, str | None, str | None]:
    """(Expected, the source model, its GGUF file name): from the manifest beside `artefact`, an advice.json,
    or the flags, in that order unless flags are given."""
    flags_given = bool(flags.methods) or flags.target_len is not None
    model, gguf_file = flags.model, flags.gguf_file
    manifest = None if (flags.advice or flags_given) else manifest_path(artefact)
    if manifest is not None and manifest.is_file():
        made = read_json(manifest)
        model, gguf_file = model or made.get("model") or None, gguf_file or made.get("gguf_file")
        exp = expected_from_export(made, manifest, model_rope(model, gguf_file))
        if not describes(made, artefact):  # rewritten since (another command, a shell redirect, a hand edit)
            exp.warning = (f"{artefact} changed after ropecli wrote {manifest.name} beside it: checked against what that "
                           f"manifest describes ({made.get('label', '?')} for {made.get('runtime', '?')}); export it "
                           "again, or verify it as it is now with --model, --method and --len")
        return exp, model, gguf_file
    advice = Path(flags.advice) if flags.advice else (None if flags_given else advice_beside(artefact))
    if advice is not None:
        adv = read_json(advice)
        model = model or adv.get("model") or None
        return expected_from_advice(adv, advice, model_rope(model, gguf_file)), model, gguf_file
    return expected_from_flags(artefact, runtime, flags), model, gguf_file


def model_rope(model: str | None, gguf_file: str | None) -> ModelRope | None:
    """The geometry of `model` from its config, or None where it cannot be read (the file's own is used)."""
    if model is None:
        return None

    try:
        return read_rope_config(model, gguf_file)
    except RopeCliError:
        return None


def advice_beside(artefact: Path) -> Path | None:
    folder = artefact if artefact.is_dir() else artefact.parent
    return next((c for c in (folder / "advice.json", folder.parent / "advice.json") if c.is_file()), None)


def expected_from_flags(artefact: Path, runtime: RuntimeHooks, f: Measured) -> Expected:
    """The schedule from --method/--b/--param at --len on the geometry of --model (or --d/--base/--train-len,
    or, lacking those, what the artefact states)."""
    if f.target_len is None and f.k is None:
        raise RopeCliError("verify needs what was measured: --advice advice.json, or --method … with --len TARGET")
    if not f.methods:
        raise RopeCliError("verify needs the schedule that was measured: --method (and --b / --param), or --advice advice.json")
    specs = parse_specs(f.methods, f.bs, f.params, f.factors, default="mixed", log_n_modes=(f.log_n,))
    if len(specs) != 1:
        raise RopeCliError("verify checks one schedule: one --method, at most one --b")
    stated = None
    if f.model is None and None in (f.rotary_dim, f.base, f.train_len):  # the artefact fills the gaps (said in the output)
        stated = artefact_geometry(artefact, runtime.stated_geometry)
        if not stated["rotary_dim"] and f.rotary_dim is None:
            raise RopeCliError(f"{artefact}: its rotary dim cannot be read from it; pass --d or --model")
    geom, rope = geometry_from_flags(f.rotary_dim, f.base, f.train_len, f.k, f.target_len, f.model, f.gguf_file,
                                     f.rope_layers, fallback=stated)
    rope = rope or ModelRope("", geom.rotary_dim, geom.base, geom.train_len)
    src = f"--model {f.model}" if f.model else "the flags and the artefact's own d, base, L"
    return Expected(specs[0], rope, geom.factor, geom.target_len, f"{specs[0].label} at k = {geom.factor:g} on {src}")
