"""transformers: a model folder whose config.json carries the schedule (or the rope_parameters block alone).

Reads `rope_parameters` (transformers 5) — and, written beside it for a single-RoPE model, the transformers-4
`rope_scaling` + `rope_theta`, which transformers 5 also accepts (`convert_rope_params_to_dict` in
modeling_rope_utils.py: `rope_scaling or rope_parameters`, so the two must agree, and they do).
At a request of n tokens: longrope picks long_factor when the forward pass's length exceeds
original_max_position_embeddings, short_factor otherwise (`longrope_frequency_update`, per forward pass);
dynamic NTK grows its base with the longest length seen and resets below L (`dynamic_frequency_update`).
While decoding with a KV cache that choice is made again at every step, and the keys already cached keep
the rotation they were made with: a switching export (short_factor != long_factor) decodes a prompt shorter
than the switch into a continuation past it with stale keys. Only Phi-3's `prepare_inputs_for_generation`
(modeling_phi3.py; PR #33129) drops its cache at the switch. ropecli's default export is consistent
(short_factor = long_factor); `--switching` writes the switch, with its measured decode damage printed.
"""

from __future__ import annotations

import json

import numpy as np

from ropecli.backends.load import load_model
from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.evaluation.corpus import training_plays
from ropecli.export.map_folder import verify_map_folder, write_map_folder
from ropecli.export.readback import CONSISTENT, Applied, layer_config, read_json, rope_blocks
from ropecli.export.runs import run_transformers
from ropecli.export.runtimes.record import EVERY_MAP, PER_FORWARD, Runtime, Version
from ropecli.export.writers import hf_result, write_block
from ropecli.maps.position_maps import BoundMap
from ropecli.models.model_geometry import config_geometry

torch = deferred("torch")
transformers = deferred("transformers")
modeling_rope_utils = deferred("transformers.modeling_rope_utils")
utils = deferred("transformers.utils")

RECORD = Runtime(
    output="folder-or-json",
    name="transformers", label="transformers", aliases=("hf", "huggingface"), package="transformers",
    artefact="a model folder (config.json merged, the weights linked) or the rope_parameters block as JSON; with "
             "--map, a folder whose own modeling file runs the map (from_pretrained(..., trust_remote_code=True))",
    reads="config.json: rope_parameters (5.x), rope_scaling + rope_theta (4.x), max_position_embeddings",
    at_length="per forward pass: longrope's long_factor past original_max_position_embeddings, short_factor up to it; "
              "dynamic NTK at the longest length seen",
    decoding="the choice is made again at every decoding step; cached keys keep their rotation (stale after a switch), "
             "except Phi-3, whose generate() drops the cache at the switch",
    rule=PER_FORWARD, serves_dynamic=True, drops_cache_at_switch=("phi3",),
    at_length_shipped="per forward pass: long_factor once the sequence is longer than Ls = {Ls}, the shipped {shipped} "
                      "(short_factor) up to Ls",
    dynamic_keeps_L=True,  # dynamic NTK grows its base from max_position_embeddings = L (dynamic_frequency_update)
    decode_checked=True,  # ropecli's model runs its per-forward rule: verify decodes the export across L
    # every map of the registry, one registered later too, through the exported folder's own modeling file
    # (export.map_folder; loaded with trust_remote_code=True)
    maps=EVERY_MAP,
    versions=(
        Version(">=5.0", "reads rope_parameters (rope_type, rope_theta, factors) from config.json",
                "transformers 5.0, modeling_rope_utils.py: RotaryEmbeddingConfigMixin.convert_rope_params_to_dict",
                older="4.x reads rope_scaling + rope_theta: ropecli writes both forms for a single-RoPE model"),
        Version(">=4.43", "longrope with per-forward short/long switching (longrope_frequency_update)",
                "transformers 4.43, modeling_rope_utils.py: _compute_longrope_parameters, dynamic_rope_update"),
        Version(">=4.45", "Phi-3 drops its KV cache at the short/long switch in generate()",
                "transformers PR #33129, modeling_phi3.py: Phi3ForCausalLM.prepare_inputs_for_generation"),
    ),
    temperatures=(("llama4", "applies it from config.json (attn_temperature_tuning, floor_scale, attn_scale: "
                                "Llama4TextAttention.forward), kept as shipped"),
                  ("mistral4", "applies it from the rope block (llama_4_scaling_beta and its "
                               "original_max_position_embeddings: get_llama_4_attn_scale), kept as shipped")),
    p_rope_schedules="uniform",  # 'proportional' divides every pair by its one factor (export.p_rope)
    temperature_changes=(("llama4", "reads {values} from the text config (written beside the rope block)"),
                         ("mistral4", "reads {values} from the rope block (llama_4_scaling_beta)")),
)


def write(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, replace=False) -> dict:
    """The rope_parameters block (and the transformers-4 keys) in a folder's config.json or a JSON file."""
    block, result = hf_result(spec, geom, rope, RECORD.name, model, consistent)
    if out is None:  # the block alone on stdout (`> rope.json` is JSON); the lines go to people, on stderr
        result["stdout"] = json.dumps(block, indent=2)
        return result
    return write_block(result, block, out, model, gguf_file, force, folder=True)


def claims(path) -> bool:
    """A model folder, or a .json block without vLLM's mscale or ntk keys."""
    if path.is_dir():
        return (path / "config.json").is_file()
    return path.suffix == ".json" and not _vllm_keys(path.read_text())


def claim_note(path) -> str | None:
    """What verify says when it read a .json as this runtime's block without --runtime (vLLM's overrides look alike)."""
    if path.suffix == ".json":
        return "read as a transformers block (no vLLM mscale or ntk in it); a vLLM overrides file: --runtime vllm"
    return None


def _vllm_keys(text: str) -> bool:
    return "_mscale" in text or '"ntk"' in text


def read_back(artefact, exp):
    """What transformers applies at T: its own ROPE_INIT_FUNCTIONS on the folder's config or the block."""
    if artefact.is_dir():
        return transformers_applied(read_json(artefact / "config.json"), exp.target_len, exp.rope.scaled_types), None
    block = read_json(artefact)
    if "rope_parameters" not in block:
        raise RopeCliError(f"{artefact}: no rope_parameters in it; pass a block written by `ropecli export`")
    head_dim = int(round(exp.rope.rotary_dim / exp.rope.partial_rotary_factor))
    return transformers_applied(block, exp.target_len, exp.rope.scaled_types, head_dim=head_dim), block


# --- transformers ------------------------------------------------------------------------------

def transformers_applied(config: dict, at_len: int, scaled: tuple[str, ...], head_dim: int | None = None) -> list:
    """A config.json (or a `{"rope_parameters", "max_position_embeddings"}` block with `head_dim`)
    through transformers' own RoPE functions at `at_len`: what it applies per scaled layer type
    (`ropecli.export.readback.Applied`; SGLang's reader and `export.served` use it too)."""
    verbosity = utils.logging.get_verbosity()
    utils.logging.set_verbosity_error()  # its warning on factor lists of the wrong length: said below in one line
    try:
        if "model_type" in config:  # special floats as transformers writes them ({"__float__": "Infinity"}: Falcon-H1) decoded
            cfg = transformers.AutoConfig.for_model(**transformers.PretrainedConfig._decode_special_floats(config))
        else:  # a bare block: a one-head LLaMA config carries it
            cfg = transformers.LlamaConfig(hidden_size=head_dim, num_attention_heads=1, num_key_value_heads=1, head_dim=head_dim,
                              max_position_embeddings=config["max_position_embeddings"],
                              rope_parameters=config["rope_parameters"])
    finally:
        utils.logging.set_verbosity(verbosity)
    text = cfg.get_text_config()
    out = []
    for layer_type, params in rope_blocks(text.rope_parameters).items():
        rope_type = params.get("rope_type", "default")
        if layer_type is not None and (layer_type not in scaled if scaled else rope_type == "default"):
            continue  # a layer type the schedule leaves alone (Gemma 3's sliding layers)
        base = float(params["rope_theta"])
        dim = config_geometry(text.to_dict(), params, layer_type).rotary_dim  # as transformers' default init: head_dim x partial
        plain = 1.0 / base ** (np.arange(0, int(dim), 2, dtype=np.float64) / int(dim))
        if rope_type == "default":
            factors, attention = np.ones_like(plain), 1.0
        elif rope_type in modeling_rope_utils.ROPE_INIT_FUNCTIONS:
            for key in ("long_factor", "short_factor"):
                if isinstance(params.get(key), list) and len(params[key]) != len(plain):
                    raise RopeCliError(f"the rope block's {key} has {len(params[key])} entries where rotary dim {int(dim)} has "
                                       f"{len(plain)} pairs: it was written for another model (rotary dim "
                                       f"{2 * len(params[key])}); export it for this one, or verify it with that model")
            try:
                inv, attention = modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](layer_config(text, layer_type), torch.device("cpu"),
                                                                seq_len=at_len, layer_type=layer_type)
            except (KeyError, TypeError, ValueError) as exc:
                raise RopeCliError(f"transformers cannot build rope_type '{rope_type}' from this config ({exc!r}); "
                                   "it would fail at load time too") from None
            if len(inv) != len(plain):
                raise RopeCliError(f"rope_type '{rope_type}' gives {len(inv)} frequencies for rotary dim {int(dim)}: "
                                   "its factor lists do not fit this model")
            inv = inv.double().numpy()
            factors = np.divide(plain, inv, out=np.ones_like(plain), where=inv > 0)  # p-RoPE's zero pairs: unscaled
        else:
            factors, attention = None, 1.0
        L = config_geometry(text.to_dict(), params).original_len
        which = ""
        if rope_type == "longrope":
            which = " long_factor" if at_len > int(L or text.max_position_embeddings) else " short_factor"
            if params.get("short_factor") == params.get("long_factor"):
                which += CONSISTENT
        out.append(Applied(RECORD.name, layer_type, factors, float(attention), base, L and int(L),
                           int(text.max_position_embeddings), at_len, f"{rope_type}{which}"))
    return out


def run(artefact, block, model, exp, run_len, cache_dir, gguf_file):
    """The artefact reloaded by transformers alone scores a window (`ropecli.export.runs.run_transformers`)."""
    return run_transformers(RECORD.name, artefact, block, model, exp, run_len, cache_dir, gguf_file)


def write_map(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, **_) -> dict:
    """A model folder that generates under the map (`export.map_folder`): the schedule's folder, then the map's
    modeling file and config keys."""
    def folder(path: str) -> dict:  # the model as shipped (config.json as it is), or the schedule's folder
        if spec.native:
            return write_block({"model": model, "lines": []}, None, path, model, gguf_file, force, folder=True)
        return write(spec, geom, rope, path, model=model, gguf_file=gguf_file, force=force, consistent=consistent)

    def select() -> dict | None:  # DPE's key pairs: chosen on the model as shipped, as ropecli's evaluations choose them
        if spec.position_map.share >= 1.0:
            return None

        backend = load_model(model, gguf_file=gguf_file, dtype="fp32", device="cpu")
        return backend.pair_selection(spec.position_map, training_plays)

    return write_map_folder(spec, out, folder, select, geom.target_len)


def verify_map(artefact, exp) -> list:
    return verify_map_folder(artefact, exp, RECORD.name)


def map_lines(position_map: BoundMap, out: str | None, target_len: int, **_) -> list[str]:
    return []  # write_map wrote the map, in the folder itself
