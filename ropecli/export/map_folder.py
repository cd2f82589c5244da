"""`export --to transformers --map MAP --out DIR`: a model folder that generates under the map in plain
transformers. The folder is what `--to transformers` writes for the schedule (config.json merged, the weights placed),
plus `modeling_ropecli_map.py` (generated from ropecli's own map attention, `maps/map_run.py`, its glue
`export/map_modeling.py` and the map's region function: `export/folder_source.py`; no ropecli import at load or run
time), `auto_map` pointing AutoModelForCausalLM at it, and the map with its
parameters in config.json (`ropecli_map`). `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`, its
`generate()` and `pipeline("text-generation")` then run every forward pass, each decoded token included, under the map.
"""

from __future__ import annotations

import json
from pathlib import Path

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.export.folder_source import folder_source
from ropecli.export.readback import Check, read_json
from ropecli.export.writers import load_line
from ropecli.maps import vllm_plugin
from ropecli.maps.mapped_attention import config_refusal
from ropecli.maps.position_maps import resolve_map

transformers = deferred("transformers")
modeling_auto = deferred("transformers.models.auto.modeling_auto")

MODELING = "modeling_ropecli_map.py"
AUTO_MAP = {"AutoModelForCausalLM": "modeling_ropecli_map.RopecliMapForCausalLM"}
MAP_KEYS = {"name": str, "params": dict, "length": int, "pairs": dict, "architecture": str}  # config.json's ropecli_map, whole


def check_map_block(block, layers: int | None = None) -> str | None:
    """Why config.json's `ropecli_map` cannot be served (one line), or None: every key known and of its type, the
    parameters numbers, the length a positive integer, the key pairs {layer: [each head's pair indices]}. `ropecli
    verify` and this file's loader ask the same question."""
    fix = "export the folder again (ropecli export --to transformers --map MAP --out DIR)"
    if not isinstance(block, dict):
        return f"config.json ropecli_map is {type(block).__name__}, expected an object: {fix}"
    unknown = sorted(set(block) - set(MAP_KEYS))
    if unknown:
        return f"config.json ropecli_map has an unknown key '{unknown[0]}' (known: {', '.join(MAP_KEYS)}): {fix}"
    for key, kind in MAP_KEYS.items():
        if key in ("name", "params") and key not in block:
            return f"config.json ropecli_map has no '{key}': {fix}"
        if key in block and not isinstance(block[key], kind) or (kind is int and isinstance(block.get(key), bool)):
            return (f"config.json ropecli_map.{key} is {type(block[key]).__name__}, expected "
                    f"{ {str: 'a string', dict: 'an object', int: 'an integer'}[kind]}: {fix}")
    bad = [k for k, v in block["params"].items() if isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        return f"config.json ropecli_map.params.{bad[0]} is not a number: {fix}"
    if "length" in block and block["length"] < 1:
        return f"config.json ropecli_map.length is {block['length']}, expected the exported length (> 0): {fix}"
    for layer, heads in (block.get("pairs") or {}).items():
        if not str(layer).isdigit() or (layers is not None and int(layer) >= layers):
            return f"config.json ropecli_map.pairs has a layer '{layer}' the model does not have: {fix}"
        if not isinstance(heads, list) or not all(isinstance(h, list) and all(isinstance(m, int) and not
                                                                              isinstance(m, bool) and m >= 0 for m in h)
                                                  for h in heads):
            return f"config.json ropecli_map.pairs['{layer}'] is not a list of each head's pair indices: {fix}"
    return None


def modeling_source(position_map, base_class: str) -> str:
    """The folder's modeling file: generated from ropecli's own map attention and the map's region function
    (`export.folder_source`), on the model's class."""
    return folder_source(resolve_map(position_map.name).regions, base_class)


def write_map_folder(spec, out: str | None, write_schedule, select=None, length: int | None = None) -> dict:
    """Write the folder: `write_schedule(out)` first (the schedule's folder, or the model as shipped), then the map.
    `select()`: {layer: (heads, pairs) bool}, the pairs a selecting map moves on this model (DPE's key pairs), asked
    for once the folder is known to serve the map, written as config.json's ropecli_map.pairs: {layer: [each head's
    pair indices]}."""
    position_map = spec.position_map
    if out is None or out.endswith(".json"):
        raise RopeCliError(f"--to transformers --map {position_map.name}: the map is served by a model folder's own "
                           "modeling file; pass --out DIR")
    result = write_schedule(out)
    folder = Path(out)
    config = json.loads((folder / "config.json").read_text())
    base = _base_class(config)
    if (why := _refusal(config)) is not None:
        raise RopeCliError(f"--to transformers --map {position_map.name}: {why}")
    # architectures names the class only ropecli's vLLM plugin registers (maps.vllm_plugin): vLLM without the plugin
    # refuses the folder instead of serving it without its map; transformers loads it through auto_map
    config["ropecli_map"] = {"name": position_map.name, "params": position_map.values, "architecture": base}
    config["architectures"] = [vllm_plugin.ARCHITECTURE]
    if length:  # the length the map is exported for: a sliding layer whose window is shorter runs as shipped
        config["ropecli_map"]["length"] = int(length)
    if (selection := select() if select is not None else None) is not None:
        config["ropecli_map"]["pairs"] = {str(layer): [[int(m) for m in row.nonzero()[0]] for row in mask]
                                          for layer, mask in selection.items()}
    config["auto_map"] = {**config.get("auto_map", {}), **AUTO_MAP}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / MODELING).write_text(modeling_source(position_map, base))
    result["lines"].append(f"wrote {out}/{MODELING} and the map in config.json: the folder generates under "
                           f"{position_map.name} (generate(), pipeline('text-generation', model=...), lm-eval's hf model, "
                           "each with trust_remote_code=True)")
    result["load"] = load_line(out, remote_code=True)
    result["served_map"] = config["ropecli_map"]
    return result


def _base_class(config: dict) -> str:
    named = (config.get("ropecli_map") or {}).get("architecture") if isinstance(config.get("ropecli_map"), dict) else None
    arch = named or next((a for a in config.get("architectures") or [] if a != vllm_plugin.ARCHITECTURE), None) or \
        modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(
        str((config.get("text_config") or {}).get("model_type") or config.get("model_type")))
    if not arch or not hasattr(transformers, arch):
        raise RopeCliError(f"--to transformers --map: config.json names no transformers class ({arch}); the folder's "
                           "modeling file subclasses the model's own")
    return arch


def _refusal(config: dict) -> str | None:
    """Why ropecli cannot map this model (`maps.mapped_attention.config_refusal`, from its config alone)."""
    cfg = transformers.AutoConfig.for_model(**{k: v for k, v in config.items() if k not in ("auto_map", "ropecli_map")})
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return config_refusal(text)


def verify_map_folder(artefact: Path, exp, runtime: str) -> list:
    """`ropecli verify DIR` of a map folder: the map and parameters config.json carries against the measured ones, and
    the modeling file with auto_map pointing at it; each check labelled `runtime` (the record's name that serves it)."""
    config = read_json(artefact / "config.json")
    text = config.get("text_config") or config
    if (why := check_map_block(config.get("ropecli_map"), text.get("num_hidden_layers"))) is not None:
        raise RopeCliError(f"{artefact}: {why}")
    served, want = config.get("ropecli_map") or {}, exp.spec.position_map
    checks = [Check(runtime, None, "ropecli_map.name", want.name, str(served.get("name")),
                    served.get("name") == want.name)]
    got = served.get("params") or {}
    checks += [Check(runtime, None, f"ropecli_map.params.{k}", f"{v:g}", str(got.get(k)),
                     isinstance(got.get(k), (int, float)) and float(got[k]) == float(v)) for k, v in want.key_values.items()]
    if want.share < 1.0:  # the key pairs chosen on the model, per layer and head
        checks.append(Check(runtime, None, "ropecli_map.pairs", "each layer's key pairs per head",
                            f"{len(served.get('pairs') or {})} layers", bool(served.get("pairs"))))
    checks.append(Check(runtime, None, f"auto_map.AutoModelForCausalLM ({MODELING})", AUTO_MAP["AutoModelForCausalLM"],
                        str((config.get("auto_map") or {}).get("AutoModelForCausalLM")),
                        (config.get("auto_map") or {}).get("AutoModelForCausalLM") == AUTO_MAP["AutoModelForCausalLM"]
                        and (artefact / MODELING).is_file()))
    return checks
