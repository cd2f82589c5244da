"""A position-map folder served by vLLM (`ropecli export --to transformers --map MAP --out DIR`, then `vllm serve DIR`):
the model class ropecli's vLLM plugin registers as `RopecliMapForCausalLM` (`maps.vllm_plugin.register`).

The folder's config.json names `RopecliMapForCausalLM` in `architectures`, the model's own class in `ropecli_map.
architecture` and the map in `ropecli_map`. vLLM builds the model's own vLLM class (Llama, Mistral, Qwen2, Qwen3) and
this module changes each mapped layer (`maps.map_layers.plan_layers`: the layers that attend globally with RoPE at the
exported length) so that it runs the folder's own map attention (`maps.map_run`, one `MapRun` shared by the layers):
- its `rotary_emb` rotates q and k at their true positions with the transformers rotary module of the folder's config
  (its schedule: the cos and sin the folder's model and ropecli's scoring use), as the folder's model does;
- its attention implementation (`MapAttentionImpl`, the backend's own class with two methods replaced) writes each new
  key into vLLM's paged cache turned once to the map's primary key set (`MapRun.primary_keys`: Self-Extend's grouped
  keys, DCA's chunked ones; true positions for STRING and the per-length maps), at its slot, by the backend's own write
  (`do_kv_cache_update`, in the layout its kernel reads: `cache_layout`). A prefill (or a chunk of one, or a step that
  mixes prefills and decoding) runs `map_run.map_attention` per request on its keys and values (those just written
  where the whole prompt is in the step, else read from its blocks). A step of decoding requests only runs in vLLM's
  own kernel on the paged cache in place (`ServedMap.decode_step`): each query turned to its one-call plan's reference
  region (`map_run.step_plan`), the other regions' bands (Self-Extend's window of W keys, DCA's last two chunks) turned
  in the cache for the step, every mapped layer's at once through strided views of the blocks (`block_views`), and put
  back bit for bit after the last mapped layer (`finish_step`).
A key's position in the primary set depends on its own position alone, so prefix caching shares blocks between
requests as it does for the model. A request's new tokens are always the last of its keys (vLLM's query_start_loc /
seq_lens), so a prefill, a chunk of a chunked prefill, a prefill after a prefix-cache hit and a decoding step are one
call each, at the positions they have in the request. A per-length map (LaMPE) is made at each request's length; a
per-prompt one (LaMPE's three regions) keeps each request's prompt length from its prefill through its decoding steps,
as its source decodes, the prompt read from vLLM's model runner by request (`ServedMap.prompts`: prefix caching and
chunked prefill at vLLM's defaults; a chunk's regions are the whole prompt's, as one pass makes them). Under these
maps a block's keys and values depend on the request's prompt length as well as on its tokens (the layers below it
attend under the prompt's regions), so prefix caching shares a block only between requests of one prompt length
(`salt_block_hashes`; where vLLM's engine core runs in another process than the model, a hit is refused). With tensor
parallelism each rank runs its own heads (a key-pair selection sliced to them). Unmapped layers (sliding windows
below the exported length) run vLLM's own attention untouched.
"""

from __future__ import annotations

import math
import re
import sys

import numpy as np
import torch
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from vllm import __version__ as VLLM_VERSION
from vllm.distributed import get_tensor_model_parallel_rank
from vllm.forward_context import get_forward_context, is_forward_context_available
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.llama import LlamaForCausalLM as VllmLlamaForCausalLM
from vllm.model_executor.models.registry import ModelRegistry

from ropecli.errors import RopeCliError
from ropecli.maps.map_run import (
    _ROTATES_HALF,
    decode_parts,
    map_attention,
    map_run_for,
    one_call_plan,
    STEPS_AHEAD,
    one_call_tag,
    rotate_half_into,
    rotation_matrix,
    step_plan,
)
from ropecli.maps.position_maps import bind
from ropecli.maps.vllm_plugin import ARCHITECTURE, SERVED, VLLM_VERSIONS


TRIG_CHUNK = 4096  # positions whose cos and sin the rotary module makes at once (`ServedMap.step_trig`)


def version_refusal(version: str) -> str | None:
    """Why this vLLM cannot serve a map folder through ropecli's plugin (one line), or None."""
    if any(version.startswith(v) for v in VLLM_VERSIONS):
        return None
    return (f"ropecli's vLLM plugin serves position maps on vLLM {', '.join(v + 'x' for v in VLLM_VERSIONS)}; this is "
            f"vLLM {version}: install a supported vLLM beside ropecli (pip install 'vllm=={VLLM_VERSIONS[0]}*'), or "
            "serve the folder with transformers")


def base_architecture(config) -> str:
    """The model's own class for a map folder's config: ropecli_map.architecture, else the first of `architectures`
    that is not ours, else transformers' causal LM class for its model_type."""
    block = getattr(config, "ropecli_map", None) or {}
    named = block.get("architecture") if isinstance(block, dict) else None
    named = named or next((a for a in (getattr(config, "architectures", None) or []) if a != ARCHITECTURE), None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return named or MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(getattr(text, "model_type", ""), "")


def serving_refusal(config) -> str | None:
    """Why ropecli's plugin cannot serve this folder in vLLM (one line), or None."""
    block = getattr(config, "ropecli_map", None)
    if not isinstance(block, dict) or "name" not in block:
        return ("config.json names RopecliMapForCausalLM but has no ropecli_map block: export the folder again "
                "(ropecli export --to transformers --map MAP --out DIR)")
    arch = base_architecture(config)
    if arch not in SERVED:
        return (f"ropecli's vLLM plugin serves position maps on {', '.join(SERVED)}; this folder's model is "
                f"{arch or 'of no known class'}: serve it with transformers (AutoModelForCausalLM.from_pretrained(DIR, "
                "trust_remote_code=True))")
    return None


def eager_refusal(vllm_config) -> str | None:
    """Why ropecli's plugin cannot serve under this compilation config (one line), or None. The plugin plans each
    step in Python from vLLM's forward context (`ServedMap.begin_step`), which neither torch.compile's graph nor CUDA
    graphs hold: compiled, vLLM 0.32's CPU build stopped at start-up on a data-dependent guard (torch._dynamo
    UserError), far from the cause. `--enforce-eager` sets both off (vllm/config/vllm.py: VllmConfig.__post_init__)."""
    compilation = getattr(vllm_config, "compilation_config", None)
    mode, graphs = getattr(compilation, "mode", 0), getattr(compilation, "cudagraph_mode", None)
    if int(mode or 0) == 0 and (graphs is None or getattr(graphs, "name", "NONE") == "NONE"):
        return None
    return ("ropecli's vLLM plugin serves a position map eagerly (it plans each step in Python, which torch.compile "
            "and CUDA graphs do not hold): serve the folder with --enforce-eager (LLM(DIR, enforce_eager=True))")


class RopecliMapForCausalLM(VllmLlamaForCausalLM):
    """What vLLM builds for `architectures: [RopecliMapForCausalLM]`: the folder's own vLLM class (ropecli_map.
    architecture) with its mapped layers changed (`install_map`). Constructing it returns that class's instance, so
    weights load, LoRA and pipeline parallelism stay the model's own."""

    def __new__(cls, *, vllm_config, prefix: str = ""):
        config = vllm_config.model_config.hf_config
        why = version_refusal(VLLM_VERSION) or serving_refusal(config) or eager_refusal(vllm_config)
        if why is not None:
            raise RopeCliError(why)
        base = ModelRegistry._try_load_model_cls(base_architecture(config))
        model = base(vllm_config=vllm_config, prefix=prefix)
        install_map(model, vllm_config)
        return model


class _TrueRotary(torch.nn.Module):
    """A mapped layer's `rotary_emb`: q (tokens, heads x dim) and k rotated at their true positions by the transformers
    rotary module of the folder's config, in rotate-half (vLLM's neox-style families: `vllm_plugin.SERVED`), as the
    folder's model rotates them; the first mapped layer's call begins the step (`ServedMap.begin_step`). In a decoding
    step served in place (`ServedMap.decode_step`) q goes from the projection straight to its reference region and k
    to its band, each by one matmul per request (the true rotation and the turn composed), the raw k kept for its
    primary form (`ServedMap.finish_step`)."""

    def __init__(self, served: "ServedMap", layer: int):
        super().__init__()
        self.served, self.layer = served, layer

    def forward(self, positions, query, key=None, *args, **kwargs):
        served = self.served
        if self.layer == served.first:
            served.begin_step(positions)
        step = served.step
        if step is not None and key is not None:  # a decoding step in place: q to its reference, k to its band
            step.raw[self.layer] = key
            return step.turn(query, step.query), step.turn(key, step.key)
        cos, sin = served.trig  # (1, T, D)
        return served.rotate(query, cos, sin), (None if key is None else served.rotate(key, cos, sin))


class _Layer:
    """What the map attention asks of a layer: its index (its key-pair selection, the pass's shared turns); its
    rotation is rotate-half over the whole head (declared below, as `map_run.rotation_of` would probe it)."""

    def __init__(self, layer_idx: int):
        self.layer_idx = layer_idx


_ROTATES_HALF[_Layer] = True


def install_map(model, vllm_config) -> "ServedMap":
    """Replace every mapped layer's rotary_emb and attention implementation; the map shared by them all."""
    hf = vllm_config.model_config.hf_config
    text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
    block = hf.ropecli_map
    length = int(block.get("length") or vllm_config.model_config.max_model_len)
    served = ServedMap(block, text, length, vllm_config)
    served.salted = salt_block_hashes(served)
    changed = []
    for module in model.modules():
        attn = getattr(module, "attn", None)
        if not (isinstance(attn, Attention) and hasattr(module, "rotary_emb")):
            continue
        layer = layer_index(attn.layer_name)
        if not served.plans[layer].mapped:
            continue
        module.rotary_emb = _TrueRotary(served, layer)
        attn.impl = map_impl(attn.impl, served, layer)
        served.names[layer] = attn.layer_name
        served.kv_heads = attn.impl.num_kv_heads
        changed.append(layer)
    # pipeline parallelism: this rank holds layers [start_layer, end_layer) (vLLM's make_layers), the others are
    # placeholders; every mapped layer it holds must be found, and its first one begins each step here
    body = getattr(model, "model", model)
    start, end = getattr(body, "start_layer", 0), getattr(body, "end_layer", len(served.plans))
    wanted = [i for i in range(start, end) if served.plans[i].mapped]
    if sorted(changed) != wanted:
        raise RopeCliError(f"{base_architecture(hf)}: {len(changed)} of {len(wanted)} mapped layers found in vLLM's "
                           "model (each with rotary_emb and attn); not served")
    if wanted:
        served.first, served.last = wanted[0], wanted[-1]
    return served


def salt_block_hashes(served: ServedMap) -> bool:
    """Whether the engine core building this model hashes each request's blocks with its prompt length too (vLLM's
    cache_salt, which enters a request's first block and so, chained, every later one), where the map's regions depend
    on the input (a per-prompt or per-length map: LaMPE) and prefix caching is on. There a block's keys and values are
    not its tokens' alone: every layer attends under regions made from the prompt's length (LaMPE's far keys squeezed
    over its T tokens), so the layers above read hidden states that differ with it, and a block another request of
    another prompt length computed holds other numbers (a request after one that shared its first 244 tokens scored
    its answer 47.2828 nats, alone 47.2692). Requests of one prompt length compute the same numbers for the same tokens and still share
    them (a repeated prompt, n > 1 samples). The engine core is found up the stack where the worker runs in its process
    (vLLM's uni executor: one device, ropecli's own engines with VLLM_ENABLE_V1_MULTIPROCESSING=0); where the workers
    run in processes of their own (the mp executor: tensor or pipeline parallelism, vLLM's CPU build with
    multiprocessing on, `vllm serve` there) it is not, and a prefix-cache hit is refused instead
    (`ServedMap.refuse_hits`)."""
    cls = getattr(sys.modules.get("vllm.v1.engine.core"), "EngineCore", None)
    if not served.prefix_caching or served.run.regions_at is None or cls is None:
        return False
    frame = sys._getframe(1)
    while frame is not None and not isinstance(frame.f_locals.get("self"), cls):
        frame = frame.f_back
    if frame is None:
        return False
    core = frame.f_locals["self"]
    own = type(core).preprocess_add_request

    def preprocess_add_request(request):  # its hasher is set after the model is built: wrapped at the first request
        hasher = core.request_block_hasher
        if hasher is not None and not getattr(hasher, "ropecli_salted", False):
            core.request_block_hasher = prompt_salted(hasher)
        return own(core, request)

    core.preprocess_add_request = preprocess_add_request  # this engine's alone (an attribute of its instance)
    return True


def prompt_salted(hasher):
    """vLLM's request block hasher (request -> the hashes of its new full blocks) with the request's prompt length
    added to its cache_salt while it hashes (the request's own salt kept, and put back after)."""
    def hashes(request):
        salt = request.cache_salt
        request.cache_salt = f"{salt or ''}|ropecli prompt {request.num_prompt_tokens}"
        try:
            return hasher(request)
        finally:
            request.cache_salt = salt

    hashes.ropecli_salted = True
    return hashes


def layer_index(name: str) -> int:
    """The decoder layer of an attention layer's name (`model.layers.3.self_attn.attn` -> 3)."""
    found = re.findall(r"\.(\d+)\.", f".{name}.")
    if not found:
        raise RopeCliError(f"vLLM attention layer '{name}' names no layer index; not served")
    return int(found[-1])


class ServedMap:
    """The map of a served folder: one `MapRun` (the folder's: `map_run.map_run_for`) for every mapped layer, the
    step's positions and their cos and sin, and per request shape the run's caches (a prefill's block plan, a
    decoding step's turns), shared by the layers of a step."""

    def __init__(self, block: dict, text, length: int, vllm_config=None):
        self.bound = bind(block["name"], block.get("params") or {})  # checked once, as ropecli binds a --map
        self.name = self.bound.name
        self.bound.regions(1)  # its parameters' own rules, before the first request
        if self.bound.share < 1.0 and not block.get("pairs"):
            raise RopeCliError(f"{self.name}: {self.bound.record.selects} = {self.bound.share:g} moves the key pairs "
                               "chosen on the model, and config.json's ropecli_map has none: export the folder again")
        heads = _rank_heads(text, vllm_config)
        pairs = {layer: rows[heads] for layer, rows in (block.get("pairs") or {}).items()} \
            if self.bound.share < 1.0 else None
        self.rotary = rotary_module(text)
        self.layers = {i: _Layer(i) for i in range(text.num_hidden_layers)}
        self.run = map_run_for(text, [(self.rotary, None)], self.layers, self.bound.record.regions, self.bound.values,
                               length, pairs)
        self.plans = self.run.plans
        self.first = min(i for i, p in enumerate(self.plans) if p.mapped)
        self.per_prompt = self.bound.record.per_prompt
        self.trig, self._positions = None, None
        self._rows: dict = {}  # {(T_q, T_k, prompt): (its turns, its layout)}: requests of one shape share them
        self._ahead: dict = {}  # {a request's first block: its decoding steps planned ahead (`map_run.step_plan`)}
        self._runner = None  # vLLM's model runner (its requests' prompt lengths), found on the first step
        self.prompts: list[int] | None = None  # this step's requests' prompt lengths, in the batch's order
        self._by_block: dict = {}  # without a runner: {a request's first block: its prompt} (prefix caching off)
        self.layout = None  # the backend's KV cache layout (`cache_layout`), probed at the first write
        self.names: dict[int, str] = {}  # {mapped layer: its attention layer's name} (`install_map`)
        self.caches: dict[int, torch.Tensor] = {}  # {mapped layer: its KV cache tensor}, seen at its first write
        self.kv_heads = 0  # this rank's KV heads
        self._views: list | None = None  # strided views of the mapped layers' key blocks (`block_views`)
        self._turns: dict = {}  # {T_k: a decoding step's turns at T_k keys (`request_turns`)}
        self._trig_chunks: dict = {}  # {c: cos, sin (TRIG_CHUNK, D) of positions c * TRIG_CHUNK …} (`step_trig`)
        self.last = self.first  # the last mapped layer this rank holds (`install_map`)
        self.step: DecodeStep | None = None  # this step's, where it is a decoding step served in place
        self.fresh: dict[int, torch.Tensor] = {}  # {mapped layer: the keys it wrote this step, in the primary set}
        self.prefix_caching = bool(getattr(getattr(vllm_config, "cache_config", None), "enable_prefix_caching", False))
        self.salted = False  # the engine core hashes each request's blocks with its prompt length (`salt_block_hashes`)

    def rotate(self, x, cos, sin):
        """x (tokens, heads x dim) rotated by cos, sin (1, tokens, dim) in rotate-half, as the model rotates it."""
        T, D = x.shape[0], cos.shape[-1]
        heads = x.view(T, -1, D).transpose(0, 1)[None]  # (1, heads, T, D)
        return rotate_half_into(heads.float(), cos, sin).to(x.dtype)[0].transpose(0, 1).reshape(x.shape)

    def begin_step(self, positions):
        """A new engine step: its tokens' positions (T,), their cos and sin, the run's caches of the last step
        dropped, and its requests' prompt lengths where vLLM's model runner is found."""
        self.trig, self._positions = self.step_trig(positions), positions
        self.run.begin(positions[None].long())
        self._rows = {}
        self.prompts = self.prompt_lengths() if self.per_prompt or self.run.regions_at is not None else None
        if self.prefix_caching and not self.salted and self.run.regions_at is not None:
            self.refuse_hits()
        self.finish_step()  # a step that stopped before its last mapped layer: its bands put back
        self.step = self.decode_step(positions)

    def step_trig(self, positions):
        """cos, sin (1, T, D) float32 of the step's positions (T,), as the rotary module gives them: read from chunks
        of TRIG_CHUNK positions the module made once (the same numbers: a position's cos and sin are its position
        times the frequencies, elementwise), the module itself where its frequencies move with the length (dynamic
        NTK, per-layer-type rotaries; LongRoPE below its original length, where it switches factors)."""
        x = torch.zeros(1, dtype=torch.float32, device=positions.device)
        kind = getattr(self.rotary, "rope_type", "default")
        top = int(positions.max()) + 1 if positions.numel() else 0
        original = ((getattr(self.rotary, "config", None) and self.rotary.config.rope_parameters or {})
                    .get("original_max_position_embeddings") if kind == "longrope" else None)
        if not isinstance(kind, str) or "dynamic" in kind or (kind == "longrope" and (original is None or top <= original)):
            cos, sin = self.rotary(x, positions[None].to(torch.float32))
            return cos.float(), sin.float()
        chunks = sorted(set((positions // TRIG_CHUNK).tolist()))
        for c in chunks:
            if c not in self._trig_chunks:
                pos = torch.arange(c * TRIG_CHUNK, (c + 1) * TRIG_CHUNK, device=positions.device)
                if original is not None:  # one more position past the original length: the module's long factors
                    pos = torch.cat([pos, pos.new_tensor([max(original, (c + 1) * TRIG_CHUNK)])])
                cos, sin = self.rotary(x, pos[None].to(torch.float32))
                self._trig_chunks[c] = (cos[0, :TRIG_CHUNK].float(), sin[0, :TRIG_CHUNK].float())
        if len(chunks) == 1:
            cos, sin = self._trig_chunks[chunks[0]]
            at = positions - chunks[0] * TRIG_CHUNK
            return cos[at][None], sin[at][None]
        table = [torch.cat([self._trig_chunks[c][i] for c in chunks]) for i in (0, 1)]
        at = positions - chunks[0] * TRIG_CHUNK
        return table[0][at][None], table[1][at][None]

    def prompt_lengths(self) -> list[int] | None:
        """This step's requests' prompt lengths, read from vLLM's model runner (its input batch, in the order of the
        attention metadata's requests); None where no runner is found (the request is then told by its first KV
        block: `ServedMap.prompt`)."""
        if self._runner is None:
            frame = sys._getframe(1)
            while frame is not None and self._runner is None:
                owner = frame.f_locals.get("self")
                if hasattr(owner, "input_batch") and hasattr(getattr(owner, "input_batch"), "num_prompt_tokens"):
                    self._runner = owner
                frame = frame.f_back
        if self._runner is None:
            return None
        batch = self._runner.input_batch
        return [int(n) for n in batch.num_prompt_tokens[:batch.num_reqs]]

    def refuse_hits(self):
        """Refuse a step where a new request starts after a prefix-cache hit (vLLM's scheduler output, read from the
        model runner's frame) under a map whose blocks the engine core does not hash with the prompt length
        (`salt_block_hashes`: workers in processes of their own): the blocks may be another prompt length's."""
        frame = sys._getframe(1)
        while frame is not None and "scheduler_output" not in frame.f_locals:
            frame = frame.f_back
        out = None if frame is None else frame.f_locals["scheduler_output"]
        if any(getattr(r, "num_computed_tokens", 0) for r in getattr(out, "scheduled_new_reqs", None) or ()):
            raise RopeCliError(f"{self.name}: a block's keys and values depend on its request's prompt length, and "
                               "this engine's prefix cache (its workers in processes of their own) shares blocks "
                               "between prompt lengths: serve it with prefix caching off (vllm serve DIR "
                               "--no-enable-prefix-caching; LLM(..., enable_prefix_caching=False))")

    def prompt(self, r: int, first_block: int, Tq: int, Tk: int) -> int | None:
        """Request r's prompt length: vLLM's own (`prompt_lengths`), else told by its first KV block (a prefill, or a
        chunk of one, sets it: prefix caching must be off then, `install_map`'s check); None for a map of fixed
        regions."""
        if self.prompts is not None and r < len(self.prompts):
            return self.prompts[r]
        if not self.per_prompt:
            return None
        if self.prefix_caching:
            raise RopeCliError(f"{self.name} fixes its regions from each request's prompt, and vLLM's model runner (which "
                               "says each request's prompt) was not found: serve it with prefix caching off (vllm serve "
                               "DIR --no-enable-prefix-caching; LLM(..., enable_prefix_caching=False))")
        if Tq > 1 or first_block not in self._by_block:
            self._by_block[first_block] = Tk
        return self._by_block[first_block]

    def keys_in(self, layer: int, key):
        """A step's new keys (tokens, kv heads, dim) at their true positions, turned to the run's primary key set."""
        run = self.run
        run._trig = self._rows.setdefault("step", ({}, {}))[0]
        run.position_ids = self._positions[:key.shape[0]][None].long()
        turned = run.primary_keys(layer, self.plans[layer], key.transpose(0, 1)[None])
        return turned[0].transpose(0, 1)

    def attend(self, layer: int, q, k, v, scale: float, Tq: int, Tk: int, prompt: int | None, first_block: int):
        """One request's new queries (1, heads, T_q, dim), true-rotated, against its T_k keys (in the primary set) and
        values: `map_attention` at the request's positions, the run's caches those of requests of its shape."""
        run = self.run
        run._trig, run._layout = self._rows.setdefault((Tq, Tk, prompt), ({}, {}))
        run._ahead = self._ahead.setdefault(first_block, {})
        run.position_ids = torch.arange(Tk - Tq, Tk, device=q.device)[None]
        run.fresh = False
        run._prompts = {0: prompt} if prompt is not None and self.per_prompt else {}
        run.prefill_to = {0: prompt} if prompt is not None and Tk <= prompt else {}
        out, _ = map_attention(run, self.layers[layer], self.plans[layer], q, k, v, None, scale, None, None,
                               base=run.primary)
        return out


    def decode_call(self, layer: int, q, Tk: int, first_block: int):
        """The OneCall of a request's decoding step (its one query (1, heads, 1, dim) at position T_k - 1): the turn of
        its query and of the other regions' bands (`map_run.step_plan`, planned several steps ahead, shared by the
        step's layers), or None where one call over all its keys cannot serve it (a per-length map, a key-pair
        selection, regions of different temperatures)."""
        run, plan = self.run, self.plans[layer]
        if run.regions_at is not None or run.selection:
            return None
        run._trig, run._layout = self._rows.setdefault((1, Tk, None), ({}, {}))
        run._ahead = self._ahead.setdefault(first_block, {})
        run.position_ids = torch.arange(Tk - 1, Tk, device=q.device)[None]
        tag = one_call_tag(plan, None, 0, run.primary, Tk)
        if tag not in run._trig:
            one = step_plan(run, plan, q, q, Tk - 1, 0, Tk, run.primary)
            if one is False:
                parts = decode_parts(run, Tk - 1, 0, Tk, plan.sliding)[0]
                one = None if parts is None else one_call_plan(run, plan, q, q, 0, [Tk - 1], list(range(Tk)), parts,
                                                               run.primary)
            run._trig[tag] = one
        one = run._trig[tag]
        return one if one is not None and (one.lo, one.hi) == (0, Tk) else None

    def decode_step(self, positions) -> "DecodeStep | None":
        """A step of decoding requests only, served in place in vLLM's paged cache by its own kernel, planned at the
        step's start (`begin_step`, before any layer writes its new key), or None where the step is not that (a
        prefill or a chunk of one in it, a request whose step is not one call over all its keys: `decode_call`,
        regions of different temperatures between requests, two requests' bands in one cache block: a prefix-cached
        one). The other regions' bands (Self-Extend's window of W keys, DCA's last two chunks) are turned in the
        cache through strided views of its blocks (`block_views`: every mapped layer at once where vLLM keeps their
        caches in one buffer, as its CPU backend does), a block's part per view, and put back bit for bit after the
        last mapped layer (`finish_step`); each layer's new key is written turned into its band already
        (`DecodeStep.key`) and put at its slot in its primary-set form with the bands."""
        context = get_forward_context() if is_forward_context_available() else None
        meta = getattr(context, "attn_metadata", None)
        meta = meta.get(self.names.get(self.first)) if isinstance(meta, dict) else None
        if meta is None or self.layout is None or len(self.caches) != len(self.names):
            return None
        lengths = meta.seq_lens.tolist()
        T = len(lengths)
        if int(meta.query_start_loc[-1]) != T or self.run.regions_at is not None or self.run.selection:
            return None
        if self._views is None:
            self._views = block_views({i: cache_views(c, self.kv_heads)[0] for i, c in self.caches.items()},
                                      self.layout[0])
        if not self._views:
            return None
        table = meta.block_table
        views, bs = self._views, self._views[0][1].shape[3] * self._views[0][1].shape[5]
        probe = torch.zeros(1, 1, 1, views[0][1].shape[4], dtype=torch.float32, device=table.device)
        firsts = table[:T, 0].tolist()
        turns = [self.request_turns(Tk, first, probe) for Tk, first in zip(lengths, firsts)]
        if any(t is None for t in turns) or len({t[4] for t in turns}) != 1:
            return None
        parts, news, blocks = [], [], set()
        for r, (turn, Tk) in enumerate(zip(turns, lengths)):
            row = table[r, :(Tk + bs - 1) // bs].tolist()
            mine = set()
            for a, z, cos, sin in turn[3]:
                for j in range(a // bs, (z - 1) // bs + 1):
                    lo, hi = max(a, j * bs) - j * bs, min(z, (j + 1) * bs) - j * bs
                    at = slice(j * bs + lo - a, j * bs + hi - a)  # the part's rows of the band's cos and sin
                    parts.append((row[j], lo, hi, cos[at], sin[at]))
                    mine.add(row[j])
            news.append((row[-1], (Tk - 1) % bs))
            if mine & blocks or row[-1] in blocks:
                return None
            blocks |= mine | {row[-1]}
        cos, sin = self.trig  # per request (T, D, D): the true rotation (the step's cos, sin), then each turn
        true = rotation_matrix(cos[0, :T], sin[0, :T])
        stacked = [torch.stack([t[i] for t in turns]) if T > 1 else turns[0][i][None] for i in range(3)]
        step = DecodeStep(T, true @ stacked[0], true @ stacked[1], true @ stacked[2], turns[0][4], news)
        for blk, lo, hi, cos, sin in parts:  # each band's part in a block, every layer's at once where one view holds them
            for layers, view in views:
                step.saved.append(turn_band(view[:, blk], lo, hi, cos, sin))
        return step

    def request_turns(self, Tk: int, first_block: int, probe):
        """A decoding step's turns at T_k keys, the same for every request of that length (a map of fixed regions):
        (the query's turn to its OneCall's reference region, the new key's to its band, the new key's to the primary
        set: (D, D) matrices x @ M; the other regions' keys before the new one [(start, stop, cos, sin (m, D))]; the
        regions' temperature), or None where one call cannot serve the step (`decode_call`), a position per group of
        pairs or a partial rotary (the per-request path serves those). Made STEPS_AHEAD lengths at a time, and again
        where the rotary's frequencies change (dynamic NTK)."""
        run, plan, D = self.run, self.plans[self.first], probe.shape[-1]
        f = run.frequencies(plan, probe)
        got = self._turns.get(Tk, False)
        if got is not False and (got is None or torch.equal(got[5], f)):
            return got
        if len(self._turns) > 8 * STEPS_AHEAD:
            self._turns.clear()
        made = []
        for n in range(Tk, Tk + STEPS_AHEAD):
            one = self.decode_call(self.first, probe, n, first_block)
            if one is None or any(c.shape[-1] != D for _, _, c, _ in one.runs):
                break
            made.append((n, one))
        newest = np.array([n - 1 for n, _ in made])
        delta = (run.key_at(run.primary, newest) - newest) if run.primary >= 0 else np.zeros(len(made))
        if not made or np.asarray(delta).ndim != 1:
            self._turns[Tk] = None
            return None
        k_cos, k_sin = run.turn_trig(plan, probe, np.asarray(delta, dtype=np.float64)[None])
        primary = rotation_matrix(k_cos[0], k_sin[0])  # (steps, D, D)
        c_new, s_new = torch.ones(len(made), D, device=probe.device), torch.zeros(len(made), D, device=probe.device)
        queries, runs = [], []
        for i, (n, one) in enumerate(made):
            queries.append(one.matrix if one.matrix is not None else
                           rotation_matrix(*(t.reshape(-1) for t in one.query)))
            runs.append([])
            for a, z, cos, sin in one.runs:
                cos, sin = cos.reshape(-1, D), sin.reshape(-1, D)
                if z == n:  # the new key's band: its turn goes into the key's own rotation
                    c_new[i], s_new[i] = cos[-1], sin[-1]
                    z, cos, sin = z - 1, cos[:-1], sin[:-1]
                if z > a:
                    runs[-1].append((a, z, cos, sin))
        key = primary @ rotation_matrix(c_new, s_new)
        for i, (n, one) in enumerate(made):
            self._turns[n] = (queries[i], key[i], primary[i], runs[i], run.regions[one.ref].scale, f)
        return self._turns[Tk]

    def finish_step(self):
        """The step's bands put back and each layer's new key written in its primary form (after the last mapped
        layer's kernel, or at the next step's start where a step stopped before it)."""
        step, self.step = self.step, None
        if step is None:
            return
        for part, old in reversed(step.saved):
            part.copy_(old)
        for layers, view in self._views:
            raw = [step.raw.get(layer) for layer in layers]
            if any(k is None for k in raw):
                continue  # the step stopped before these layers wrote their keys
            raw = torch.stack([k[:step.requests] for k in raw]).view(len(layers), step.requests, self.kv_heads, -1)
            keys = torch.matmul(raw.float(), step.primary[None]).to(view.dtype)  # (layers, requests, kv heads, dim)
            v = view.shape[5]
            for r, (blk, slot) in enumerate(step.news):
                view[:, blk, :, slot // v, :, slot % v] = keys[:, r]


class DecodeStep:
    """A step of decoding requests only, planned by `ServedMap.decode_step`: per request (T, D, D) matrices x @ M
    rotating its query from the raw projection to its OneCall's reference region, its new key to its band (the form
    the kernel reads this step) and to the primary set (what the cache keeps); the regions' temperature; each request's
    new key's (block, slot); the bands' parts turned in the cache and their old keys; each layer's raw new keys."""

    def __init__(self, requests, query, key, primary, scale, news):
        self.requests, self.query, self.key, self.primary, self.scale = requests, query, key, primary, scale
        self.news, self.saved, self.raw = news, [], {}

    def turn(self, x, m):
        """x (tokens, heads x dim) -> x @ m per request (the first T tokens; later ones are padding)."""
        T = self.requests
        if x.shape[0] == T and x.dtype == torch.float32:
            return torch.matmul(x.view(T, -1, m.shape[-1]), m).view(x.shape)
        out = x.clone() if x.shape[0] > T else torch.empty_like(x)
        out[:T] = torch.matmul(x[:T].reshape(T, -1, m.shape[-1]).float(), m).to(x.dtype).reshape(x[:T].shape)
        return out


def block_views(keys: dict, layout) -> list:
    """Strided views of mapped layers' key caches (keys: {layer: (blocks, kv heads, block size, dim)} of
    `cache_views`), each (layers, blocks, kv heads, block size / v, dim, v): a block's keys as vLLM's kernel keeps
    them, in groups of v slots with each dim's v slots adjacent (the CPU backend's: v = block size, each dim's slots
    in a row; v = 1: slot after slot), the layers of one buffer at even distances in one view. [] where the layout
    (`cache_layout`) is neither."""
    first = next(iter(keys.values()))
    bs, D = first.shape[2], first.shape[3]
    v = 1
    if layout is not None:
        slot, dim = layout
        v = next((v for v in range(2, bs + 1) if bs % v == 0 and torch.equal(
            slot * D + dim, (torch.arange(bs)[:, None] // v * v * D + torch.arange(D)[None] * v
                             + torch.arange(bs)[:, None] % v).to(slot.device))), None)
        if v is None or first.stride(2) != D or first.stride(3) != 1:
            return []
    S0, S1, S2, S3 = first.stride()
    inner = (bs // v, D, v), ((v * D, v, 1) if v > 1 else (S2, S3, 1))
    layers = sorted(keys)
    offsets = [keys[i].storage_offset() for i in layers]
    steps = {b - a for a, b in zip(offsets, offsets[1:])}
    same = len({keys[i].untyped_storage().data_ptr() for i in layers}) == 1 and len(steps) <= 1 and \
        all(keys[i].shape == first.shape and keys[i].stride() == first.stride() for i in layers)
    groups = [(layers, offsets[0], steps.pop() if steps else 0)] if same else [([i], keys[i].storage_offset(), 0)
                                                                               for i in layers]
    out = []
    for names, offset, step in groups:
        k = keys[names[0]]
        flat = k.as_strided((k.untyped_storage().nbytes() // k.element_size(),), (1,), 0)
        out.append((names, flat.as_strided((len(names), first.shape[0], first.shape[1]) + inner[0],
                                           (step, S0, S1) + inner[1], offset)))
    return out


def turn_band(block, lo: int, hi: int, cos, sin):
    """Slots lo … hi - 1 of a block's keys (layers, kv heads, block size / v, dim, v: `block_views`) turned in place
    by cos, sin (hi - lo, dim) in rotate-half -> (the turned part, its old keys) for `finish_step`. The part is one
    strided slice where the slots lie in one group of v (the CPU backend's, v = block size) or v = 1; elsewhere the
    whole groups they lie in, the slots outside kept (cos 1, sin 0)."""
    v, D = block.shape[4], block.shape[3]
    g0, g1 = lo // v, -(-hi // v)
    if g1 - g0 == 1:
        part = block[:, :, g0:g1, :, lo - g0 * v:hi - g0 * v]  # (layers, kv heads, 1, dim, m)
        c, s = cos.t()[None], sin.t()[None]
    elif v == 1:
        part = block[:, :, lo:hi]  # (layers, kv heads, m, dim, 1)
        c, s = cos[..., None], sin[..., None]
    else:
        part = block[:, :, g0:g1]  # (layers, kv heads, groups, dim, v)
        c = torch.ones((g1 - g0) * v, D, device=cos.device)
        s = torch.zeros((g1 - g0) * v, D, device=cos.device)
        c[lo - g0 * v:hi - g0 * v], s[lo - g0 * v:hi - g0 * v] = cos, sin
        c, s = (x.view(g1 - g0, v, D).transpose(1, 2) for x in (c, s))  # (groups, dim, v) as the part lays them out
    old, h = part.clone(), D // 2
    if part.dtype == torch.float32:  # written in place: four passes over the part, its copy included
        torch.mul(old, c, out=part)
        part[..., :h, :].addcmul_(old[..., h:, :], s[:, :h], value=-1)
        part[..., h:, :].addcmul_(old[..., :h, :], s[:, h:])
        return part, old
    x = old.float()  # rounded once, as the key's own turn would be
    new = x * c
    new[..., :h, :].addcmul_(x[..., h:, :], s[:, :h], value=-1)
    new[..., h:, :].addcmul_(x[..., :h, :], s[:, h:])
    part.copy_(new)
    return part, old


def _rank_heads(text, vllm_config) -> slice:
    """The query heads this tensor-parallel rank runs (all of them on one rank)."""
    size = getattr(getattr(vllm_config, "parallel_config", None), "tensor_parallel_size", 1) or 1
    if size == 1:
        return slice(None)
    from_rank = get_tensor_model_parallel_rank()
    per = text.num_attention_heads // size
    return slice(from_rank * per, (from_rank + 1) * per)


def rotary_module(text):
    """The transformers rotary module of the folder's config (its schedule, attention factor included): ropecli's
    scoring and the folder's model rotate with the same module class and config."""
    arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(text.model_type)
    module = sys.modules[getattr(transformers, arch).__module__]
    cls = next(v for k, v in vars(module).items() if k.endswith("RotaryEmbedding") and isinstance(v, type))
    return cls(config=text)


def cache_views(kv_cache: torch.Tensor, num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, values), each (blocks, kv heads, block size, head dim), views of a layer's paged cache tensor: the CPU
    backend's (blocks, kv heads, block size, 2 x head dim) split as it splits it (cpu_attn.py: the view (blocks, heads,
    2 x block size, dim), keys first), or the (2, blocks, block size, kv heads, dim) of FlashAttention's layout."""
    if kv_cache.ndim == 4 and kv_cache.shape[1] == num_kv_heads:
        nb, h, bs, _ = kv_cache.shape
        return kv_cache.view(nb, h, 2 * bs, -1).chunk(2, dim=2)
    if kv_cache.ndim == 5 and kv_cache.shape[0] == 2:
        return kv_cache[0].permute(0, 2, 1, 3), kv_cache[1].permute(0, 2, 1, 3)
    raise RopeCliError(f"ropecli's vLLM plugin does not know the KV cache layout {tuple(kv_cache.shape)}; not served")


def cache_layout(write, kv_cache: torch.Tensor, num_kv_heads: int) -> tuple:
    """Where the backend's own cache write (`write(key, value, cache, slots)`: its do_kv_cache_update, vLLM's op for
    its ISA) puts each slot's key and value dims inside a block and head: ((bs, D) slots, (bs, D) dims) for the keys
    and for the values, indices into the (block size, head dim) view of `cache_views`, or None where the write is the
    plain one. Probed once on a scratch block, each (slot, dim) written as its own number in base-64 digits (exact in
    bf16): vLLM's CPU kernels keep a block's keys transposed (vec16: each dim's 16 slots in a row)."""
    shape = (1,) + tuple(kv_cache.shape[1:]) if kv_cache.ndim == 4 else (2, 1) + tuple(kv_cache.shape[2:])
    keys, _ = cache_views(torch.zeros(shape, dtype=kv_cache.dtype, device=kv_cache.device), num_kv_heads)
    bs, D = keys.shape[2], keys.shape[3]
    code = torch.arange(bs * D, device=kv_cache.device)
    found = [torch.zeros(bs * D, dtype=torch.long, device=kv_cache.device) for _ in range(2)]
    digits, weight = max(1, math.ceil(math.log(bs * D, 64))), 1
    for _ in range(digits):
        scratch = torch.zeros(shape, dtype=kv_cache.dtype, device=kv_cache.device)
        x = (code // weight % 64).to(kv_cache.dtype).view(bs, 1, D).expand(bs, num_kv_heads, D).contiguous()
        write(x, x, scratch, torch.arange(bs, device=kv_cache.device))
        for f, view in zip(found, cache_views(scratch, num_kv_heads)):
            f += view[0, 0].reshape(-1).round().long() * weight  # at each (slot, dim) of the view: the code it holds
        weight *= 64
    out = []
    for f in found:
        where = torch.empty_like(f)
        where[f] = torch.arange(bs * D, device=f.device)  # code (slot s, dim d) -> its place in the view
        if not torch.equal(torch.sort(f).values, code):
            raise RopeCliError("ropecli's vLLM plugin could not read this backend's KV cache layout; not served")
        out.append(None if torch.equal(where, code) else (where.view(bs, D) // D, where.view(bs, D) % D))
    return tuple(out)


def read_blocks(cache: torch.Tensor, blocks: torch.Tensor, layout) -> torch.Tensor:
    """(n, heads, block size, dim) of blocks `blocks`, each slot's dims in order (`cache_layout`)."""
    got = cache[blocks]
    return got if layout is None else got[:, :, layout[0], layout[1]]


class MapAttentionMixin:
    """The two methods of a mapped layer's attention implementation (mixed into the backend's own class)."""

    ropecli_map: ServedMap
    ropecli_layer: int

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
        """The new tokens' keys, turned to the primary key set (in a decoding step served in place, to their band:
        `_TrueRotary` turned them), and values written at their slots by the backend's own write (its layout, which
        its kernel reads)."""
        served = self.ropecli_map
        if served.layout is None:
            served.layout = cache_layout(lambda k, v, c, s: super(MapAttentionMixin, self).do_kv_cache_update(
                layer, k, v, c, s), kv_cache, self.num_kv_heads)
        served.caches[self.ropecli_layer] = kv_cache
        n = min(key.shape[0], slot_mapping.shape[0])
        turned = key[:n] if served.step is not None else served.keys_in(self.ropecli_layer, key[:n]).to(key.dtype)
        if served.step is None:
            served.fresh[self.ropecli_layer] = turned
        super().do_kv_cache_update(layer, turned, value[:n], kv_cache, slot_mapping[:n])

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        """query (tokens, heads, dim) -> output (tokens, heads, dim): per request, its new queries against all its
        keys under the map; a decoding step served in place (`ServedMap.decode_step`) in the backend's own kernel."""
        if attn_metadata is None:  # the profile run
            return output
        served, idx = self.ropecli_map, self.ropecli_layer
        if getattr(layer.attn_backend, "forward_includes_kv_cache_update", False):
            self.do_kv_cache_update(layer, key, value, kv_cache, attn_metadata.slot_mapping)
        step = served.step
        if step is not None:
            before, self.scale = self.scale, self.scale * step.scale
            try:
                super().forward(layer, query, key, value, kv_cache, attn_metadata, output)
            except BaseException:
                served.finish_step()
                raise
            finally:
                self.scale = before
            if idx == served.last:
                served.finish_step()
            return output
        keys, values = cache_views(kv_cache, self.num_kv_heads)
        key_layout, value_layout = served.layout
        bs = keys.shape[2]
        starts = attn_metadata.query_start_loc.tolist()
        lengths = attn_metadata.seq_lens.tolist()
        table = attn_metadata.block_table
        fresh = served.fresh.pop(idx, None)
        for r, Tk in enumerate(lengths):
            q0, q1 = starts[r], starts[r + 1]
            Tq = q1 - q0
            if Tq <= 0:
                continue
            if Tq == Tk and fresh is not None:  # a whole prompt in this step: its keys as just written, not read back
                k = fresh[q0:q1].reshape(Tq, keys.shape[1], -1).transpose(0, 1)
                v = value[q0:q1].reshape(Tq, values.shape[1], -1).transpose(0, 1)
            else:
                blocks = table[r, :(Tk + bs - 1) // bs].long()
                k = read_blocks(keys, blocks, key_layout).permute(1, 0, 2, 3).reshape(keys.shape[1], -1, keys.shape[3])
                v = read_blocks(values, blocks, value_layout).permute(1, 0, 2, 3).reshape(values.shape[1], -1,
                                                                                          values.shape[3])
            q = query[q0:q1].view(Tq, -1, k.shape[-1]).transpose(0, 1)[None]  # (1, heads, Tq, dim)
            first = int(table[r, 0])
            out = served.attend(idx, q, k[None, :, :Tk].to(q.dtype), v[None, :, :Tk].to(q.dtype), self.scale, Tq, Tk,
                                served.prompt(r, first, Tq, Tk), first)
            output[q0:q1] = out[0].reshape(output[q0:q1].shape).to(output.dtype)
        return output


def map_impl(impl, served: ServedMap, layer: int):
    """The layer's attention implementation as an instance of a subclass of its own class with the map's two methods
    (the metadata builder and vLLM's checks see the backend's class)."""
    cls = type(f"RopecliMap{type(impl).__name__}", (MapAttentionMixin, type(impl)), {})
    out = object.__new__(cls)
    out.__dict__.update(impl.__dict__)
    out.ropecli_map, out.ropecli_layer = served, layer
    return out
