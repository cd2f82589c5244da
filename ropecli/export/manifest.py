"""The manifest `ropecli export` writes beside every artefact: what was exported (schedule, k, target, geometry,
runtime), so that `ropecli verify PATH` needs no other flag (`ropecli.export.expected.expected_from_export`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ropecli.export.runtimes.record import Runtime
from ropecli.files import atomic_write_text
from ropecli.maps.map_spelling import map_json
from ropecli.models.model_rope import ModelRope
from ropecli.rope.geometry import Geometry
from ropecli.spec import Spec

EDGE = 16 << 20  # bytes: a file larger than twice this is fingerprinted by its size, first and last EDGE bytes
MANIFEST = "ropecli-export.json"  # in an exported folder; beside a file: FILE.ropecli.json


def manifest_path(out: str | Path) -> Path:
    """Where the manifest of an export at `out` lives: inside a folder, beside a file."""
    out = Path(out)
    return out / MANIFEST if out.is_dir() else out.with_name(out.name + ".ropecli.json")


def fingerprint(out: str | Path) -> dict:
    """What the artefact at `out` holds now: the sha256 of the file (of a folder's config.json, where its schedule or
    map is written). A manifest keeps it, so that verify can tell an artefact rewritten since (another command writing
    the same path) from the one the manifest describes."""
    out = Path(out)
    target = out / "config.json" if out.is_dir() else out
    if not target.is_file():
        return {}
    digest, size = hashlib.sha256(), target.stat().st_size
    with open(target, "rb") as f:
        if size <= 2 * EDGE:
            digest.update(f.read())
        else:  # a GGUF of gigabytes: its size, its header (the keys an export writes) and its last tensor bytes
            digest.update(size.to_bytes(8, "little") + f.read(EDGE))
            f.seek(size - EDGE)
            digest.update(f.read(EDGE))
    return {"file": target.name, "sha256": digest.hexdigest(), **({"of": "size, first and last 16 MiB"}
                                                                   if size > 2 * EDGE else {})}


def describes(manifest: dict, out: str | Path) -> bool:
    """Whether a manifest describes the artefact at `out` as it is now (a manifest without a fingerprint, written
    before ropecli kept one, is taken at its word)."""
    kept = manifest.get("artefact")
    return not kept or fingerprint(out) == kept


def write_manifest(out: str, spec: Spec, geom: Geometry, rope: ModelRope, rec: Runtime, model: str | None,
                   gguf_file: str | None, consistent: bool) -> str:
    """What an export wrote, for `ropecli verify` to check it against with no flags: the schedule, k, the
    target length and the geometry it used; `rec`: the runtime's record."""
    path = manifest_path(out)
    atomic_write_text(path, json.dumps({
        "ropecli_export": 1, "runtime": rec.name, "method": spec.method, "composed": spec.composed, "label": spec.label,
        "shipped": rope.shipped.to_json() if rope.shipped else None,
        "params": {k: v for k, v in dict(spec.params).items() if v is not None and k != "factors"}, "log_n": spec.log_n,
        "factor": geom.factor, "target_len": geom.target_len, "train_len": geom.train_len,
        "rotary_dim": geom.rotary_dim, "base": geom.base, "model": model, "gguf_file": gguf_file,
        "consistent": consistent, "scaled_layer_types": list(rope.scaled_types),
        "position_map": map_json(spec.position_map), "temperature": dict(spec.temperature) or None,
        "works_with": rec.describe()["versions"], "artefact": fingerprint(out)}, indent=1))
    return str(path)
