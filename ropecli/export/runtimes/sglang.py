"""SGLang: `--json-model-override-args` JSON and the `sglang.launch_server` line (a long one, with longrope's factor
lists inline, as an executable script beside the JSON: `launch_lines`).

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
from dataclasses import replace
from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.export.hf import rope_block, write_json
from ropecli.export.readback import Check, read_json
from ropecli.export.runtimes.record import AT_START_UP, PER_FORWARD, Runtime, Version
from ropecli.export.runtimes.transformers import transformers_applied
from ropecli.export.runtimes.vllm import vllm_block
from ropecli.files import atomic_write_text
from ropecli.maps.position_maps import BoundMap

RECORD = Runtime(
    name="sglang", label="SGLang", package="sglang",
    artefact="--json-model-override-args JSON (rope_parameters and rope_scaling, the same block) and the launch line",
    reads="the overridden config's rope_parameters (or rope_scaling), --context-length",
    at_length="longrope per forward pass (long_factor once a position passes the original length); dynamic NTK fixed at "
              "start-up",
    decoding="longrope re-picked at every step with the cached keys kept (stale after a switch); a consistent export "
             "is the same at every step",
    rule=PER_FORWARD, dynamic_rule=AT_START_UP, serves_dynamic=True, maps=("dca",),
    versions=(
        Version(">=0.3.1", "--json-model-override-args", "SGLang 0.3.1, python/sglang/srt/server_args.py: "
                "ServerArgs.json_model_override_args"),
        Version("", "longrope short/long per forward pass", "python/sglang/srt/layers/rotary_embedding/rope_variant.py: "
                "Phi3LongRoPEScaledRotaryEmbedding.forward"),
        Version("<=0.5.19", "Dual Chunk Attention (--map dca): --attention-backend dual_chunk_flash_attn, on Qwen2, "
                "Qwen2-MoE and GLM-4 only",
                "python/sglang/srt/layers/attention/dual_chunk_flashattention_backend.py: DualChunkFlashAttentionBackend "
                "(removed in 0.5.20, sgl-project/sglang PR #32114; absent from the 0.5.20-0.5.23 wheels); "
                "rotary_embedding/rope_variant.py: DualChunkRotaryEmbedding.forward(positions, query, key, offsets) "
                "takes no fused_set_kv_buffer_arg, which models/qwen3_moe.py Qwen3MoeAttention.apply_qk_norm_rope "
                "always passes (sglang #16461)"),
    ),
    p_rope="SGLang's Gemma4Attention (models/gemma4_causal.py) passes get_rope the rope_type alone: it serves the "
           "model as shipped only",
    temperatures=(("llama4", "applies the same formula, NoPE on every 4th layer hard-coded (models/llama4.py)"),
                  ("mistral4", "applies config.llama_4_scaling (native format); the HF key as for vLLM")),
)


# Dual Chunk Attention, read from the SGLang wheels on PyPI (0.5.7, 0.5.15-0.5.23; python/sglang/srt/…):
# - the backend (layers/attention/dual_chunk_flashattention_backend.py) is in 0.5.19 and earlier; 0.5.20 deleted it
#   (PR #32114), and 0.5.23, what `pip install sglang` brings today, has no dual_chunk_flash_attn choice at all
#   (arg_groups/choices.py ATTENTION_BACKEND_CHOICES), while its get_rope still builds the DCA rotary from the config
#   (a 5x-wide query no remaining backend reads): DCA is served by sglang<=0.5.19 only, the version pinned below;
# - the architectures whose get_rope is passed the config: models/qwen2.py, qwen2_moe.py, glm4.py (their attention
#   calls rotary_emb(positions, q, k): loads), and qwen3_moe.py, whose Qwen3MoeAttention.apply_qk_norm_rope passes
#   fused_set_kv_buffer_arg= unconditionally to a DualChunkRotaryEmbedding.forward that takes no such keyword: a
#   TypeError at the first forward on every version with the backend (sglang #16461, open); qwen3.py and llama.py never
#   pass the config (DCA silently ignored);
# get_rope (layers/rotary_embedding/factory.py)
# builds DualChunkRotaryEmbedding from chunk_size and local_size before it looks at rope_scaling, so DCA serves the
# model's plain RoPE; DualChunkRotaryEmbedding (rope_variant.py) rotates keys at j mod c, queries at i mod c, min(i mod c
# + c, s) and min(2c - 1, s): ropecli's `dca` map. original_max_position_embeddings > 0 adds a length temperature
# (0.1 ln(n / orig) + 1, DualChunkFlashAttentionBackend) ropecli does not measure: written as 0 (off).
DCA_ARCHS = ("qwen2", "qwen2_moe", "glm4")  # where SGLang's DCA loads
DCA_BROKEN = {"qwen3_moe": "SGLang's Qwen3MoeAttention passes fused_set_kv_buffer_arg to DualChunkRotaryEmbedding.forward, "
                           "which does not take it: TypeError at the first forward pass (sglang #16461, every version "
                           "with the DCA backend)",
              "qwen3": "SGLang's Qwen3 never passes dual_chunk_attention_config to its rotary: the model would run "
                       "plain RoPE, not the map",
              "llama": "SGLang's Llama never passes dual_chunk_attention_config to its rotary: the model would run "
                       "plain RoPE, not the map"}
DCA_VERSION = "0.5.19"  # the last SGLang with the dual_chunk_flash_attn backend
# characters: a longer launch line goes to a script. Longrope's factor lists inline make a schedule's line 1-3 KB;
# a DCA line, which names no factors, is 300-400 with a folder's path and reads (and copies) fine on a terminal
LONG_LINE = 500


def launch_lines(command: str, out: str | None) -> tuple[list[str], dict]:
    """The launch line as the export says it: the line itself, or, past LONG_LINE characters where there is a file to
    put it beside, where the script that runs it is (a terminal wraps a KB line over a screen, and a copy from it may
    break at the wraps); with `launch_script` for --json, whose `command` stays whole."""
    if out is None or len(command) <= LONG_LINE:
        return [command], {}
    script = write_launch_script(command, out)
    said = f"{RECORD.label}: launch line written to {script} ({len(command)} characters)"
    return [said], {"launch_script": str(script)}


def write_launch_script(command: str, out: str) -> Path:
    """The launch line as an executable shell script beside the override JSON (OUT.launch.sh, replaced with the JSON
    it serves); arguments given to it pass on to the server (--port, --tp-size)."""
    script = Path(out).with_suffix(".launch.sh")
    atomic_write_text(script, f'#!/bin/sh\n{command} "$@"\n')
    mode = script.stat().st_mode
    script.chmod(mode | (mode & 0o444) >> 2)  # executable by whoever may read it
    return script


def write_map(spec, geom, rope, out, *, model=None, **_) -> dict:
    """DCA: the override JSON (`dual_chunk_attention_config`, `max_position_embeddings`) and the launch line naming
    the backend (SGLang does not pick it by itself: `_handle_attention_backend_compatibility` sets a default backend
    first, then refuses DCA under it). One line where SGLang would serve something else than ropecli measured."""
    if rope.model_type in DCA_BROKEN:
        raise RopeCliError(f"--map dca --to sglang: {DCA_BROKEN[rope.model_type]}; SGLang's DCA loads on "
                           f"{', '.join(DCA_ARCHS)} models only, in sglang<={DCA_VERSION}")
    if rope.model_type not in DCA_ARCHS:
        raise RopeCliError(f"--map dca --to sglang: SGLang serves Dual Chunk Attention on {', '.join(DCA_ARCHS)} models "
                           f"only (their get_rope passes dual_chunk_attention_config), in sglang<={DCA_VERSION}; "
                           f"{rope.name} is {rope.model_type or 'of an unknown type'}")
    if spec.method != "none" and not (spec.native and rope.shipped is None):
        raise RopeCliError("--map dca --to sglang: SGLang's DCA rotary takes the model's plain RoPE (get_rope builds it "
                           "before reading rope_scaling), so a frequency schedule under it would not be served; export "
                           "--method none with --map dca" + (f" (the shipped {rope.shipped.label} is dropped too)"
                                                              if rope.shipped is not None else ""))
    params = spec.position_map.values
    chunk, local = int(params["chunk"]), int(params["local"])
    block = {"dual_chunk_attention_config": {"chunk_size": chunk, "local_size": local,
                                             "original_max_position_embeddings": 0},
             "max_position_embeddings": geom.target_len}
    overrides = json.dumps(block, separators=(",", ":"))
    command = (f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server --model-path "
               f"{shlex.quote(model or 'MODEL')} --json-model-override-args {shlex.quote(overrides)} "
               f"--attention-backend dual_chunk_flash_attn --context-length {geom.target_len}")
    said, launch = launch_lines(command, out)
    lines = [f"SGLang serves Dual Chunk Attention in sglang<={DCA_VERSION} only: 0.5.20 removed its attention backend "
             f"(PR #32114), and the sglang that installs today has none (pip install 'sglang<={DCA_VERSION}')",
             f"Dual Chunk Attention (chunk {chunk}, local {local}) on the model's plain RoPE: SGLang turns off the radix "
             f"cache and mixed chunking for it, needs chunk - local = {chunk - local} a multiple of --page-size, and runs "
             "it on CUDA only (sgl_kernel); no sparse attention (no sparse_attention_config)", *said]
    result = {"model": model, "factor": geom.factor, "target_len": geom.target_len, "block": block, "command": command,
              **launch}
    if out is not None:
        write_json(out, block)
        lines.append(f"wrote {out}")
        result["path"] = out
    return {**result, "lines": lines}


def verify_map(artefact, exp) -> list:
    """`ropecli verify` of a DCA override: the block SGLang reads against the measured map, at the target length."""
    block = read_json(artefact)
    dca, params = block.get("dual_chunk_attention_config") or {}, exp.spec.position_map.values
    want = {"chunk_size": int(params["chunk"]), "local_size": int(params["local"]), "original_max_position_embeddings": 0}
    checks = [Check(RECORD.name, None, f"dual_chunk_attention_config.{key}" + (" (0: no length temperature)" if v == 0 else ""),
                    str(v), str(dca.get(key)), dca.get(key) == v) for key, v in want.items()]
    n = block.get("max_position_embeddings")
    checks.append(Check(RECORD.name, None, "max_position_embeddings (the DCA rotary's key cache)", f">= {exp.target_len}",
                        str(n), isinstance(n, int) and n >= exp.target_len))
    return checks


def map_lines(position_map: BoundMap, out: str | None, target_len: int, **_) -> list[str]:
    return []  # write_map wrote the map, in the override itself

def write(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, replace=False) -> dict:
    """The override JSON (to --out FILE.json, or printed) and the launch line."""
    block, note = rope_block(rope, spec, geom.factor, consistent)
    block, how = vllm_block(rope, spec, geom.factor, block)
    params = block["rope_parameters"]
    if params.get("rope_type") == "ntk":  # vLLM's own type: SGLang has none, so the longrope form
        block, note = rope_block(rope, spec, geom.factor, consistent)
        p = block["rope_parameters"]
        p["short_mscale"] = p["long_mscale"] = p["attention_factor"]
        block = {**block, "rope_scaling": dict(p)}
    checkpoint = model or "MODEL"
    overrides = json.dumps(block, separators=(",", ":"))
    command = (f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server --model-path "
               f"{shlex.quote(checkpoint)} --json-model-override-args {shlex.quote(overrides)} "
               f"--context-length {block['max_position_embeddings']}")
    said, launch = launch_lines(command, out)
    lines = [f"{note}; {how}", *said]
    result = {"model": model, "factor": geom.factor, "target_len": geom.target_len, "block": block, "command": command,
              "note": note, **launch}
    if out is not None:
        write_json(out, block)
        lines.append(f"wrote {out}")
        result["path"] = out
    return {**result, "lines": lines}


def read_back(artefact, exp):
    """What SGLang applies at T from an override file: transformers' per-forward rule on the block."""
    block = read_json(artefact)
    head_dim = int(round(exp.rope.rotary_dim / exp.rope.partial_rotary_factor))
    applied = transformers_applied(block, exp.target_len, exp.rope.scaled_types, head_dim=head_dim)

    return [replace(a, runtime=RECORD.name) for a in applied], block


def claims(path) -> bool:
    return False  # its JSON looks like vLLM's: named by the export manifest or --runtime sglang
