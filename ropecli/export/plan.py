"""The one export function: `ropecli export` and `ropecli advise` both call `export_schedule`.

Routing: each runtime's module writes its artefact (`ropecli.export.runtimes.<name>.write`, its record's `artefact`):
transformers a model folder (a local folder: its files linked beside the merged config.json; a hub id: the merged
config.json; a GGUF: dequantized by transformers) or, with `--out FILE.json` or no --out, the rope_parameters block
(`export.writers`: `hf_result`, `write_block`, shared with vllm's overrides); llamacpp a GGUF copy (`to_gguf`:
rope_freqs, or the native scaling keys), which the GGUF-based runtimes reuse. By default the export is consistent
(short_factor = long_factor): every runtime applies the schedule at every length and generation through a KV cache is
safe. `consistent=False` (--switching) keeps transformers' short/long switch at L (Ls): cached keys go stale across
it, and the damage is measured and printed. A changed position temperature goes where each runtime reads it
(`export.served_temperature`), or is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.export.hf_folder import check_writable, place_weights
from ropecli.export.installed import too_old
from ropecli.export.manifest import write_manifest
from ropecli.export.p_rope import p_rope_refusal
from ropecli.export.registry import AT_START_UP, PER_FORWARD, ROPE_FREQS, Runtime, record, records, resolve_runtime
from ropecli.export.served import is_dynamic
from ropecli.export.served_temperature import temperature_line, temperature_refusal
from ropecli.export.switching import switching_report
from ropecli.export.writers import is_gguf
from ropecli.maps.map_spelling import map_json
from ropecli.models.model_rope import ModelRope
from ropecli.rope.geometry import Geometry
from ropecli.spec import Spec


def runtime_behaviour(rope: ModelRope, consistent: bool) -> dict[str, str]:
    """What each runtime does with an export, in words (from its record, `ropecli.export.runtimes`); a switching
    export (short_factor = 1, or the shipped schedule up to Ls) is described where it switches."""
    out = {}
    for name, rec in records().items():
        if consistent:
            out[name] = f"the schedule at every length; decoding: {rec.decoding}"
        elif rope.shipped is not None and rec.at_length_shipped:
            at_length = rec.at_length_shipped.format(Ls=rope.shipped_len, shipped=rope.shipped.label)
            out[name] = f"{at_length}; decoding: {rec.decoding}"
        else:
            out[name] = f"{rec.at_length}; decoding: {rec.decoding}"
    return out


def check_export_paths(runtime: str, out: str | None, model: str | None, gguf_file: str | None, force: bool,
                       mapped: bool = False) -> None:
    """Refuse, before any work, an output that cannot be written or a runtime the input cannot go to. `mapped`: the
    export carries a position map (a runtime whose `map_output` is a folder writes one for it)."""
    rec = record(runtime)
    runtime = rec.name
    if mapped and rec.map_output == "folder":
        if not out or out.rstrip("/").endswith((".json", ".gguf")):
            raise RopeCliError(f"--to {runtime} --map: the map is served from a model folder; pass --out DIR")
        if model is None:
            raise RopeCliError(f"--to {runtime} --map writes a model folder and needs --model (a local folder, hub id "
                               "or GGUF)")
        check_writable(out.rstrip("/"), "--out", force=True)
        return
    if rec.needs_gguf:
        if not is_gguf(model, gguf_file):
            raise RopeCliError(f"--to {runtime} needs --model FILE.gguf (or --model DIR --gguf-file NAME), the GGUF to export into")
        if rec.output == "gguf" and (not out or not out.endswith(".gguf")):
            raise RopeCliError(f"--to {runtime} needs --out NEW.gguf")
        if rec.output == "folder" and (not out or out.endswith((".gguf", ".json"))):
            raise RopeCliError(f"--to {runtime} needs --out DIR, the folder it writes ({rec.artefact})")
        check_writable(out.rstrip("/"), "--out", force)
        return
    to_folder = rec.output == "folder-or-json" and out is not None and not out.endswith(".json")
    if is_gguf(model, gguf_file) and not to_folder and rec.output != "json":
        raise RopeCliError(f"a GGUF model goes to llama.cpp with --to llamacpp, or to a transformers folder with "
                           f"--to transformers --out DIR (then --to {runtime} from that folder)")
    if to_folder and out.rstrip("/").endswith(".gguf"):
        raise RopeCliError(f"--out {out}: --to {runtime} writes a model folder, not a GGUF; name the folder without "
                           ".gguf (a GGUF goes to llama.cpp: --to llamacpp --out NEW.gguf)")
    if to_folder and model is None:
        raise RopeCliError(f"--to {runtime} --out DIR writes a model folder and needs --model (a local folder or hub "
                           "id); without a model pass --out FILE.json")
    if out is not None and not to_folder:
        if not out.endswith(".json"):
            raise RopeCliError(f"--out {out}: the overrides are JSON; write e.g. --out overrides.json")
        check_writable(out, "--out", force)
    if to_folder:
        check_writable(out.rstrip("/"), "--out", force=True)


def export_target(geom: Geometry, rope: ModelRope | None, base_given: bool) -> ModelRope:
    """The RoPE an export writes for: the model's (per-type bases from its config unless --base
    overrides them) with the final geometry's d and L, or the bare geometry without a model."""
    if rope is None:
        return ModelRope("", geom.rotary_dim, geom.base, geom.train_len)
    return rope.overridden(rotary_dim=geom.rotary_dim, base=geom.base if base_given else None, train_len=geom.train_len)


def export_schedule(spec: Spec, geom: Geometry, rope: ModelRope, runtime: str, out: str | None, **kw) -> dict:
    """`write_schedule` of `spec` with its map as it runs on this model (LaMPE's fit = auto: the model family's, written
    into the artefact and said in its lines: `ModelRope.on_model`)."""
    bound, note = rope.on_model(spec.position_map)
    result = write_schedule(spec.but(position_map=bound) if note else spec, geom, rope, runtime, out, **kw)
    if note:
        result["lines"] = [note, *result.get("lines", [])]
    return result


def write_schedule(spec: Spec, geom: Geometry, rope: ModelRope, runtime: str, out: str | None, *,
                   model: str | None = None, gguf_file: str | None = None, force: bool = False,
                   consistent: bool = True, replace: bool = False, measure_switching: bool = True,
                   weights: str = "auto") -> dict:
    """Write `spec` at geom's k for `runtime` (a name or alias; paths checked by `check_export_paths` first) with
    the runtime's writer (`ropecli.export.runtimes.<name>.write`); returns what was written, the lines to tell the user,
    and what each runtime does with it. `native` (the model as shipped) writes nothing. `consistent=False`
    (--switching) writes the short/long switch; transformers then decodes across it with stale keys, and that
    damage is measured on `model` and printed (`measure_switching`). `weights`: how a model folder's other files
    sit beside the merged config.json: "link" (symbolic links by absolute path), "hardlink", "copy", or "auto"
    (copies of ropecli's own models, links otherwise: `hf_folder.place_weights`)."""
    hooks = resolve_runtime(runtime)  # resolved once: its record (passed down: no helper looks one up) and its hooks
    rec = hooks.record
    runtime = rec.name
    check_map_served(spec, rec)
    if (why := p_rope_refusal(spec, geom, rope, rec) or temperature_refusal(spec, rope, rec)) is not None:
        raise RopeCliError(why)
    if spec.position_map and hooks.write_map is not None:  # the runtime's own config serves the map (SGLang: DCA)
        result = {**hooks.write_map(spec, geom, rope, out, model=model, gguf_file=gguf_file, force=force,
                                    consistent=consistent), "runtime": runtime,
                  "position_map": map_json(spec.position_map), "versions": works_with(rec), "runtimes": {}}
        if result.get("linked"):
            result["weights"] = weights
            result["lines"].append(place_weights(Path(out), result["linked"], weights))
        if out is not None:
            result["manifest"] = write_manifest(out, spec, geom, rope, rec, model, gguf_file, consistent)
            result["lines"].append(f"wrote {result['manifest']}: what was exported (`ropecli verify {out}` reads it)")
        result["lines"] += load_lines(result, rec)
        return result
    map_lines = (hooks.map_lines(spec.position_map, out, geom.target_len, model=model, gguf_file=gguf_file)
                 if spec.position_map else [])  # checked first
    if spec.native:
        native = native_export(rope, rec)
        return {**native, "lines": [*native.get("lines", []), *map_lines]} if map_lines else native
    result = hooks.write(spec, geom, rope, out, model=model, gguf_file=gguf_file, force=force,
                                   consistent=consistent, replace=replace)
    result["runtime"] = runtime
    if spec.position_map:  # the schedule is written; the map is the runtime's own flags, said first: no
        result["position_map"] = map_json(spec.position_map)  # line serves the map's base schedule alone
        alone = f"{rec.label}: "
        result["lines"] = [*map_lines, *(line for line in result["lines"] if not line.startswith(alone)),
                           f"  the file carries the map's base schedule ({spec.method}) for the flags above; served "
                           f"without them it is {spec.method} alone at {geom.target_len}, which is not what was "
                           f"measured (the schedules {rec.label} serves on every build: `ropecli advise --len "
                           f"{geom.target_len}` ranks them)"]
    else:
        result["lines"] += [f"{o.label}: --to {o.name} writes {o.artefact} (context {geom.target_len})"
                            for o in records().values() if rec.needs_gguf and o.needs_gguf and o is not rec]
    if result.get("linked"):
        result["weights"] = weights
        result["lines"].append(place_weights(Path(out), result["linked"], weights))
    result["lines"] += [line] if (line := temperature_line(rope, rec, spec, result.get("arch"))) else []  # or changed
    result.update(runtimes=runtime_behaviour(rope, consistent), consistent=consistent, versions=works_with(rec))
    result["lines"] += [works_with_line(rec), *installed_lines(rec)]
    flag = replaces_shipped(rope, rec, consistent)
    if flag:
        result["replaces_shipped"] = flag
        result["lines"].append(f"note: {flag}")
    dynamic = is_dynamic(spec)
    if (rec.dynamic_rule if dynamic else rec.rule) == PER_FORWARD and (not consistent or dynamic):
        result.update(switching_report(spec, geom, rope, model, gguf_file, measure_switching, rec))
        result["lines"] += result["switching_lines"]
    if out is not None:
        result["manifest"] = write_manifest(out, spec, geom, rope, rec, model, gguf_file, consistent)
        result["lines"].append(f"wrote {result['manifest']}: what was exported (`ropecli verify {out}` reads it)")
    result["lines"] += load_lines(result, rec)
    return result


def load_lines(result: dict, rec: Runtime) -> list[str]:
    """The last line of a transformers folder's export: exactly what to type to load it (`writers.load_line`: with
    trust_remote_code=True where the folder runs a map). Other runtimes print their serving command among their lines."""
    return [f"load it: {result['load']}"] if result.get("load") else []


def works_with(rec: Runtime) -> list[dict]:
    """The versions of the runtime the artefact works with (its record's), for --json and the manifest."""
    return rec.describe()["versions"]


def works_with_line(rec: Runtime, position_map: bool = False) -> str:
    """'works with vLLM >=0.11.1, >=0.22.0 (what each version changes: `ropecli runtimes vllm`)'; for a position map
    the releases that serve one where the record names them (vLLM: its plugin's, 0.32.x)."""
    reqs = ", ".join(dict.fromkeys(v.requirement for v in rec.versions if v.requirement)) or "any version"
    if position_map and rec.map_versions:
        reqs = f"{rec.map_versions} (ropecli's plugin serves the map on these releases alone)"
    named = f"{rec.label} ({rec.package} {reqs})" if rec.package and rec.package.lower() != rec.label.lower() and \
        rec.package.lower() != rec.name else f"{rec.label} {reqs}"  # the requirements are the package's versions
    return f"works with {named} (what each version changes, with sources: `ropecli runtimes {rec.name}`)"


def installed_lines(rec: Runtime) -> list[str]:
    """One line where the runtime installed here is older than the artefact needs (`ropecli.export.installed`)."""
    return too_old(rec)


def native_export(rope: ModelRope, rec: Runtime) -> dict:
    """`native` exported: nothing to write, and the line that says so."""
    line = (f"native is {rope.name or 'the model'} as shipped ({rope.describe_shipped()}): nothing to export, no "
            f"file written; serve the model as it is")
    return {"runtime": rec.name, "native": True, "factor": 1.0, "target_len": rope.shipped_len, "block": None,
            "lines": [line], "runtimes": {}, "consistent": False}


def replaces_shipped(rope: ModelRope, rec: Runtime, consistent: bool) -> str | None:
    """Whether an export would replace the shipped schedule within Ls, in the runtime's own terms (None: it keeps it)."""
    if rope.shipped is None:
        return None
    what = f"the shipped {rope.shipped.label}"
    if rec.rule == ROPE_FREQS:
        return f"{rec.label} applies the GGUF's schedule at every length: this export replaces {what} within Ls = {rope.shipped_len} too"
    if rec.rule == AT_START_UP:
        return (f"{rec.label} picks long_factor once at start-up for every request: this export replaces {what} within "
                f"Ls = {rope.shipped_len} too")
    if consistent:
        return (f"the consistent export (the default) writes the extension at every length: it replaces {what} within "
                f"Ls = {rope.shipped_len} (--switching keeps it, with stale keys when generation crosses Ls)")
    return None


def check_map_served(spec: Spec, rec: Runtime) -> None:
    """A position map goes only to a runtime that serves it (`Runtime.serves_map`); one line naming the runtimes that
    serve it (or none: the measurement still stands, no runtime ropecli writes for can serve it)."""
    if not spec.position_map:
        return
    name = spec.position_map.name
    if rec.serves_map(name):
        return
    serving = [r.name for r in records().values() if r.serves_map(name)]
    verb = "serves" if len(serving) == 1 else "serve"
    where = f"{', '.join(serving)} {verb} it: --to {serving[0]}" if serving else \
        "no runtime ropecli exports to serves it (the measurement stands; serving it needs a patched model)"
    raise RopeCliError(f"--map {name}: {rec.name} does not serve this position map; {where}")
