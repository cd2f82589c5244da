"""SGLang: `--json-model-override-args` JSON and the `sglang.launch_server` line.

SGLang reads rope_parameters (or rope_scaling) from the model's config after the override (`get_config` in
python/sglang/srt/utils/hf_transformers_utils.py: config.update(overrides); `get_rope_config` prefers
rope_parameters). Under transformers 5 (SGLang 0.5 pins it) rope_scaling is an alias of rope_parameters, so the
override replaces the whole block: ropecli writes both, each with rope_theta. Its longrope picks short or long
factors per forward pass (`Phi3LongRoPEScaledRotaryEmbedding.forward`: torch.any(positions > original)), like
transformers — the consistent export (the default) is the same at every step; its dynamic NTK fixes the base
once at start-up with vLLM's older formula. `--context-length` must be given (and allowed past the config's
length by SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, `_derive_context_length`).
"""

from __future__ import annotations

import json
import shlex

from ropecli.export.runtimes.record import AT_START_UP, PER_FORWARD, Runtime, Version

RECORD = Runtime(
    name="sglang", label="SGLang", package="sglang",
    artefact="--json-model-override-args JSON (rope_parameters and rope_scaling, the same block) and the launch line",
    reads="the overridden config's rope_parameters (or rope_scaling), --context-length",
    at_length="longrope per forward pass (long_factor once a position passes the original length); dynamic NTK fixed at "
              "start-up",
    decoding="longrope re-picked at every step with the cached keys kept (stale after a switch); a consistent export "
             "is the same at every step",
    rule=PER_FORWARD, dynamic_rule=AT_START_UP, serves_dynamic=True,
    versions=(
        Version(">=0.3.1", "--json-model-override-args", "SGLang 0.3.1, python/sglang/srt/server_args.py: "
                "ServerArgs.json_model_override_args"),
        Version("", "longrope short/long per forward pass", "python/sglang/srt/layers/rotary_embedding/rope_variant.py: "
                "Phi3LongRoPEScaledRotaryEmbedding.forward"),
    ),
)


# Maps it serves outside what ropecli writes (issue 48: the DCA block is the next export).
MAP_NOTES = {"dca": "SGLang's dual-chunk attention backend (dual_chunk_flashattention_backend.py) reads a model's "
                    "dual_chunk_attention_config, which ropecli does not write yet"}

def write(spec, geom, target, out, *, model=None, gguf_file=None, force=False, consistent=True, replace=False) -> dict:
    """The override JSON (to --out FILE.json, or printed) and the launch line."""
    from ropecli.export.hf import rope_block, write_json
    from ropecli.export.vllm import vllm_block

    block, note = rope_block(target, spec, geom.factor, consistent)
    block, how = vllm_block(target, spec, geom.factor, block)
    params = block["rope_parameters"]
    if params.get("rope_type") == "ntk":  # vLLM's own type: SGLang has none, so the longrope form
        block, note = rope_block(target, spec, geom.factor, consistent)
        p = block["rope_parameters"]
        p["short_mscale"] = p["long_mscale"] = p["attention_factor"]
        block = {**block, "rope_scaling": dict(p)}
    checkpoint = model or "MODEL"
    overrides = json.dumps(block, separators=(",", ":"))
    command = (f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server --model-path "
               f"{shlex.quote(checkpoint)} --json-model-override-args {shlex.quote(overrides)} "
               f"--context-length {block['max_position_embeddings']}")
    lines = [f"{note}; {how}", command]
    result = {"model": model, "factor": geom.factor, "target_len": geom.target_len, "block": block, "command": command,
              "note": note}
    if out is not None:
        write_json(out, block)
        lines.append(f"wrote {out}")
        result["path"] = out
    return {**result, "lines": lines}


def read_back(target, exp):
    """What SGLang applies at T from an override file: transformers' per-forward rule on the block."""
    from ropecli.export.readback import read_json, transformers_applied

    block = read_json(target)
    head_dim = int(round(exp.rope.rotary_dim / exp.rope.partial_rotary_factor))
    applied = transformers_applied(block, exp.target_len, exp.rope.scaled_types, head_dim=head_dim)
    from dataclasses import replace

    return [replace(a, runtime="sglang") for a in applied], block


def claims(path) -> bool:
    return False  # its JSON looks like vLLM's: named by the export manifest or --runtime sglang
