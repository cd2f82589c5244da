"""What a runtime applies to a request of n tokens, for a schedule exported at factor k: the one rule,
read through the same code `ropecli verify` reads an artefact with (`ropecli.export.readback`).

- transformers (`rope_block` -> `transformers_applied`, i.e. transformers' own `ROPE_INIT_FUNCTIONS`
  at seq_len = n): longrope switches per forward pass, short_factor up to L (1 by default: the
  unscaled frequencies, with the export's attention_factor still on cos/sin), long_factor beyond;
  `--consistent` (short_factor = long_factor) applies the schedule at every length; dynamic NTK is
  transformers' own `dynamic` type, computed at the current length.
- vLLM (`vllm_block` -> `vllm_applied` at --max-model-len = k*L): decided once at start-up, the same
  for every request, short ones included (`Phi3LongRoPEScaledRotaryEmbedding.__init__`: use_long_rope
  = max_model_len > original_max_position_embeddings); `dynamic` fixes its base once at k*L
  (`DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache`). A short/long switch cannot be served.
- llama.cpp (a GGUF with `rope_freqs.weight`): `llama_model::get_rope_factors` (src/llama-model.cpp)
  returns rope_freqs whenever the tensor is present, at every length; only LongRoPE GGUFs'
  rope_long/rope_short switch, and by the context size the server was started with (n_ctx / n_seq_max >
  n_ctx_orig_yarn), not per request. llama.cpp has no dynamic NTK (its rope scaling types are none,
  linear, yarn, longrope): a dynamic candidate cannot be served there.
The served schedule is returned as a Spec: the candidate itself where the runtime applies exactly its
schedule (so its cached windows are reused), `none` where it applies the unscaled model, else the
factors and attention factor the runtime applies, as a `longrope` spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.evaluation.decode_across import measure_decode
from ropecli.export.hf import rope_block
from ropecli.export.p_rope import p_rope_refusal
from ropecli.export.registry import AT_START_UP, PER_FORWARD, ROPE_FREQS, Runtime
from ropecli.export.runtimes.transformers import transformers_applied
from ropecli.export.runtimes.vllm import vllm_applied, vllm_block
from ropecli.models.model_rope import ModelRope
from ropecli.spec import Spec, make_spec


@dataclass(frozen=True)
class Served:
    """The schedule runtime R applies to a request of `length` tokens (spec None: it cannot serve it)."""
    runtime: str
    length: int
    spec: Spec | None
    how: str


def served(runtime: Runtime, spec: Spec, length: int, rope: ModelRope, factor: float,
           consistent: bool = False) -> Served:
    """What `runtime` (its record) applies at `length` tokens to `spec` exported at factor
    k = `factor`, by the runtime's rule (`ropecli.export.runtimes.record.RULES`)."""
    rec = runtime
    runtime = rec.name
    if spec.native:  # nothing exported: every runtime serves the model as shipped
        return Served(runtime, length, spec, "the model as shipped")
    if (why := p_rope_refusal(spec, rope.geometry(factor), rope, rec)) is not None:
        return Served(runtime, length, None, why)
    # p-RoPE where the runtime writes no one-factor block of its own (transformers' 'proportional'): only as shipped
    if rope.rotating_pairs is not None and rec.p_rope_schedules != "uniform":
        return Served(runtime, length, spec, "the model as shipped (its p-RoPE block unchanged)")
    if is_dynamic(spec):
        if not rec.serves_dynamic:
            return Served(runtime, length, None, f"{rec.label} has no dynamic NTK")
        if rec.dynamic_rule == PER_FORWARD:  # the export's factor k, at the current length (k' = k*n/L - (k-1))
            return Served(runtime, length, spec.but(factor=factor), "dynamic at the request's length")
    rule = rec.dynamic_rule if is_dynamic(spec) else rec.rule
    factors, attention, how = _applied(rule, spec, length, rope, factor, consistent)
    return Served(runtime, length, as_spec(spec, factors, attention, rope, factor), how)


def is_dynamic(spec: Spec) -> bool:
    """Dynamic NTK (a schedule that follows the current length), not log-n or a composed schedule."""
    return spec.length_dependent and not spec.log_n and not spec.composed


def decode_segments(rec: Runtime, spec: Spec, rope: ModelRope, factor: float, consistent: bool, prompt_len: int,
                    total_len: int) -> list[tuple[int, Served]]:
    """Generation as the runtime `rec` runs it: a prompt of `prompt_len` tokens prefilled, then the continuation decoded
    with a KV cache up to `total_len`, as [(end, served)]: the tokens up to `end` (from the previous end) go
    through forward passes that all apply `served`; the first entry is the prefill. Exact for token-by-token
    decoding: a runtime that decides per forward pass (transformers) changes its schedule only where its rule
    says — longrope at the switch length, dynamic NTK at every token past L — so the tokens between two such
    points share one schedule; the others decide once (one segment after the prefill)."""
    rule = rec.dynamic_rule if is_dynamic(spec) else rec.rule
    ends = [prompt_len, total_len]
    if rule == PER_FORWARD and is_dynamic(spec):
        L = rope.train_len  # forward passes ending at or below L run unscaled; past it, each token its own base
        ends = [prompt_len, *([L] if prompt_len < L < total_len else []), *range(max(prompt_len, L) + 1, total_len + 1)]
    elif rule == PER_FORWARD:
        switch = switch_length(rope, spec, consistent)
        ends = sorted({prompt_len, total_len, *([switch] if prompt_len < switch < total_len else [])})
    if rule == AT_START_UP:  # decided once, for the longest request: every segment runs at total_len
        once = served(rec, spec, total_len, rope, factor, consistent)
        return [(n, once) for n in dict.fromkeys(ends)]
    return [(n, served(rec, spec, n, rope, factor, consistent)) for n in dict.fromkeys(ends)]


def switch_length(rope: ModelRope, spec: Spec, consistent: bool) -> int:
    """Where a transformers export switches from short to long factors: Ls for a model that ships a schedule,
    else L; never for --consistent (returned as 0: no switch)."""
    if consistent or spec.native:
        return 0
    return rope.shipped_len if rope.shipped is not None else rope.train_len


def _applied(rule: str, spec: Spec, length: int, rope: ModelRope, factor: float, consistent: bool):
    """(factors, attention factor, how) from the export's readback (transformers, vLLM) or rope_freqs (llama.cpp)."""
    geom = rope.geometry(factor)
    if rule == ROPE_FREQS:  # rope_freqs = the schedule, at every length; log-n as one constant (export/plan.py)

        sched = spec.schedule(geom)
        attention = math.sqrt(math.log(geom.target_len) / math.log(geom.train_len)) if spec.log_n else sched.attention_factor
        return sched.factors, attention, "rope_freqs at every length"
    block, _ = rope_block(rope, spec, factor, consistent)
    if rope.layer_types:  # per layer type: the scaled type's block (the one ropecli's evaluation patches with)
        block = {**block, "rope_parameters": block["rope_parameters"][rope.layer_type]}
    # p-RoPE's d is the whole head already (its zero pairs are pairs of it)
    head_dim = rope.rotary_dim if rope.rotating_pairs is not None else int(round(rope.rotary_dim / rope.partial_rotary_factor))
    if rule == AT_START_UP:
        block, _ = vllm_block(rope, spec, factor, block)
        a = vllm_applied(block, geom.target_len, head_dim)[0]
    else:
        a = transformers_applied(block, length, (), head_dim)[0]
    if a.factors is None:
        raise RopeCliError(f"{a.runtime}: {a.how} cannot be reconstructed")
    return a.factors, a.attention_factor, a.how


def as_spec(spec: Spec, factors: np.ndarray, attention: float, rope: ModelRope, factor: float) -> Spec:
    """The candidate where `factors`/`attention` are its own schedule at k (within float32 rounding), `none`
    where they are the unscaled model, else an explicit `longrope` spec at k."""
    geom = rope.geometry(factor)
    if rope.shipped is not None and not spec.log_n:  # the shipped schedule at this length: the model as shipped
        native, native_attention = rope.shipped.at(rope.rotary_dim, rope.base)
        if np.allclose(native, factors, rtol=1e-5) and abs(native_attention - attention) < 1e-6:
            return make_spec("native")
    if not spec.log_n and not spec.length_dependent:
        own = spec.schedule(geom)
        if np.allclose(own.factors, factors, rtol=1e-5) and abs(own.attention_factor - attention) < 1e-6:
            return spec.but(factor=factor)  # at the export's k whatever the request length
    if np.allclose(factors, 1.0, rtol=1e-6) and abs(attention - 1.0) < 1e-6:
        return make_spec("none")  # k per length: the unscaled model's windows are shared with every other run
    return make_spec("longrope", {"factors": tuple(float(x) for x in factors), "attention_factor": float(attention)},
                     factor=factor)


def decode_damage(ev, runtime: Runtime, spec: Spec, factor: float, consistent: bool, plan, samples: int | None = None,
                  span: int | None = None) -> dict:
    """Decode across L of `spec` exported at k = `factor` as `runtime` (its record) generates
    (`ropecli.evaluation.decode_across`)."""
    rec, rope = runtime, ev.backend.rope
    segments = decode_segments(rec, spec, rope, factor, consistent, plan.prompt_len, plan.total_len)
    whole = served(rec, spec, plan.total_len, rope, factor, consistent)
    result = measure_decode(ev, spec.label, segments, whole, plan, samples, span=span)
    return {**result, "consistent": consistent}
