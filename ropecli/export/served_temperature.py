"""What each runtime does with a model's position temperature when ropecli exports a schedule for it: one line per
export, and where the schedule changes the temperature (`Spec.temperature`: `--param attn_scale=0.2`, a search's
winner), the keys that carry the change, or one line saying that the runtime cannot. Whether a runtime applies the
temperature, and from where, is its record's (`temperatures`, `temperature_changes`: read in each one's source
through the search index, late 2026; docs/architectures.md has the table).
"""

from __future__ import annotations

from ropecli.export.runtimes.record import Runtime
from ropecli.models.model_rope import ModelRope
from ropecli.rope.temperature import HF_KEYS, Temperature, tempered
from ropecli.spec import Spec


def _changed(spec: Spec, rope: ModelRope) -> Temperature | None:
    return tempered(rope.temperature, spec.temperature) if spec.temperature else None


def temperature_refusal(spec: Spec, rope: ModelRope, rec: Runtime) -> str | None:
    """One line where the runtime `rec` cannot carry the spec's changed temperature; None where it can (or nothing changed)."""
    t = _changed(spec, rope)
    if t is not None and spec.native:  # the export writes a schedule; the model as shipped has none to write
        keys = ", ".join(f"{HF_KEYS[k][1]} = {v:g}" for k, v in spec.temperature)
        return (f"native writes nothing, and a changed temperature alone is config keys: set {keys} in the model's "
                f"config.json ({'the rope block' if t.kind == 'mistral4' else 'its text config'}), or export it with "
                f"a frequency schedule (e.g. --method yarn --param …)")
    if t is None or t.kind in dict(rec.temperature_changes):
        return None
    said = dict(rec.temperatures).get(t.kind, "ropecli has not read whether it applies it")
    hint = dict(rec.temperature_changes).get(f"{t.kind}:instead", "")
    return (f"{rec.name} {said}: it cannot be served the changed temperature {t.label}; export the schedule without "
            f"{', '.join(k for k, _ in spec.temperature)}{'; ' + hint if hint else ''}")


def hf_temperature_keys(block: dict, spec: Spec, rope: ModelRope) -> dict:
    """The rope_parameters block with the changed temperature's keys: Mistral 4's beta in the block itself, Llama 4's
    attn_scale / floor_scale under `config` (merged into the text config by `export.hf.merged_config`)."""
    if _changed(spec, rope) is None:
        return block
    out = {**block, "rope_parameters": dict(block["rope_parameters"])}
    for name, value in spec.temperature:
        where, key = HF_KEYS[name]
        (out["rope_parameters"] if where == "rope_parameters" else out.setdefault("config", {}))[key] = value
    return out


def temperature_line(rope: ModelRope, rec: Runtime, spec: Spec | None = None, arch: str | None = None) -> str | None:
    """`position temperature llama4(…): vllm applies it …`, or how the changed one is carried (`arch`: the GGUF's
    architecture, named in llama.cpp's key); None for a model without one."""
    t = rope.temperature
    if t is None:
        return None
    if spec is not None and (changed := _changed(spec, rope)) is not None:
        values = {**dict(t.params), **dict(spec.temperature)}
        how = dict(rec.temperature_changes)[t.kind].format(
            values=" ".join(f"{k}={v:g}" for k, v in spec.temperature), arch=arch or "ARCH", **{k: f"{v:g}" for k, v in values.items()})
        return f"position temperature changed to {changed.label} on {t.layers}: {rec.name} {how}"
    said = dict(rec.temperatures).get(t.kind, "ropecli has not read whether it applies it")
    return f"position temperature {t.label} on {t.layers} (the model's own; ropecli changes frequencies only): {rec.name} {said}"
