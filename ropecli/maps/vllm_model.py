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
  keys, DCA's chunked ones; true positions for STRING and the per-length maps), at its slot (`do_kv_cache_update`, a
  plain [block, head, slot, dim] layout of the backend's own cache tensor), and in `forward` reads each request's keys
  and values from its block table and runs `map_run.map_attention` on them: a prefill's block plan, a decoding step's
  one kernel call with only the other regions' bands turned (Self-Extend's window of W keys).
A key's position in the primary set depends on its own position alone, so prefix caching shares blocks between
requests as it does for the model. A request's new tokens are always the last of its keys (vLLM's query_start_loc /
seq_lens), so a prefill, a chunk of a chunked prefill, a prefill after a prefix-cache hit and a decoding step are one
call each, at the positions they have in the request. A per-length map (LaMPE) is made at each request's length; a
per-prompt one (LaMPE's three regions) keeps each request's prompt length from its prefill through its decoding steps,
as its source decodes, the prompt read from vLLM's model runner by request (`ServedMap.prompts`: prefix caching and
chunked prefill at vLLM's defaults; a chunk's regions are the whole prompt's, as one pass makes them). With tensor
parallelism each rank runs its own heads (a key-pair selection sliced to them). Unmapped layers (sliding windows
below the exported length) run vLLM's own attention untouched.
"""

from __future__ import annotations

import math
import re
import sys

import torch
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from vllm import __version__ as VLLM_VERSION
from vllm.distributed import get_tensor_model_parallel_rank
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
    one_call_tag,
    rotate_half_into,
    step_plan,
    turned_one,
)
from ropecli.maps.position_maps import bind
from ropecli.maps.vllm_plugin import ARCHITECTURE, SERVED, VLLM_VERSIONS


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


class RopecliMapForCausalLM(VllmLlamaForCausalLM):
    """What vLLM builds for `architectures: [RopecliMapForCausalLM]`: the folder's own vLLM class (ropecli_map.
    architecture) with its mapped layers changed (`install_map`). Constructing it returns that class's instance, so
    weights load, LoRA and pipeline parallelism stay the model's own."""

    def __new__(cls, *, vllm_config, prefix: str = ""):
        config = vllm_config.model_config.hf_config
        why = version_refusal(VLLM_VERSION) or serving_refusal(config)
        if why is not None:
            raise RopeCliError(why)
        base = ModelRegistry._try_load_model_cls(base_architecture(config))
        model = base(vllm_config=vllm_config, prefix=prefix)
        install_map(model, vllm_config)
        return model


class _TrueRotary(torch.nn.Module):
    """A mapped layer's `rotary_emb`: q (tokens, heads x dim) and k rotated at their true positions by the transformers
    rotary module of the folder's config, in rotate-half (vLLM's neox-style families: `vllm_plugin.SERVED`), as the
    folder's model rotates them; the first mapped layer's call begins the step (`ServedMap.begin_step`)."""

    def __init__(self, served: "ServedMap", layer: int):
        super().__init__()
        self.served, self.layer = served, layer

    def forward(self, positions, query, key=None, *args, **kwargs):
        served = self.served
        if self.layer == served.first:
            served.begin_step(positions)
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
        served.first = wanted[0]
    return served


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
        self.prefix_caching = bool(getattr(getattr(vllm_config, "cache_config", None), "enable_prefix_caching", False))

    def rotate(self, x, cos, sin):
        """x (tokens, heads x dim) rotated by cos, sin (1, tokens, dim) in rotate-half, as the model rotates it."""
        T, D = x.shape[0], cos.shape[-1]
        heads = x.view(T, -1, D).transpose(0, 1)[None]  # (1, heads, T, D)
        return rotate_half_into(heads.float(), cos, sin).to(x.dtype)[0].transpose(0, 1).reshape(x.shape)

    def begin_step(self, positions):
        """A new engine step: its tokens' positions (T,), their cos and sin, the run's caches of the last step
        dropped, and its requests' prompt lengths where vLLM's model runner is found."""
        x = torch.zeros(1, dtype=torch.float32, device=positions.device)
        cos, sin = self.rotary(x, positions[None].to(torch.float32))
        self.trig, self._positions = (cos.float(), sin.float()), positions
        self.run.begin(positions[None].long())
        self._rows = {}
        self.prompts = self.prompt_lengths() if self.per_prompt or self.run.regions_at is not None else None

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

    def decode_plan(self, layer: int, query, keys, lengths, table):
        """A decoding step's plan for `decode_in_place`, made by its first mapped layer and shared by the others: ([(request,
        its query's rows, its OneCall, [(its band's places in the cache storage (m, dim, kv heads), cos, sin)])], the
        regions' temperature), or None where the step is not one call per request (`decode_call`)."""
        if "decode" in self._rows:
            return self._rows["decode"]
        self._rows["decode"] = None
        bs, D, H = keys.shape[2], keys.shape[3], keys.shape[1]
        layout = self.layout[0]
        strides = keys.stride()
        heads = torch.arange(H, device=keys.device) * strides[1]
        calls, slots = [], []
        for r, Tk in enumerate(lengths):
            q = query[r:r + 1].view(1, -1, D).transpose(0, 1)[None]  # (1, heads, 1, dim)
            one = self.decode_call(layer, q, Tk, int(table[r, 0]))
            if one is None:
                return None
            bands = []
            for a, z, cos, sin in one.runs:
                pos = torch.arange(a, z, device=keys.device)
                blk, off = table[r, pos // bs].long(), pos % bs
                slots.append(blk * bs + off)
                s_at, d_at = (off[:, None].expand(-1, D), torch.arange(D, device=keys.device).expand(len(pos), D)) \
                    if layout is None else (layout[0][off], layout[1][off])
                at = (blk[:, None] * strides[0] + s_at * strides[2] + d_at * strides[3])[..., None] + heads
                bands.append((at, cos, sin))  # from the layer's first key: the same in every layer
            calls.append((r, slice(r, r + 1), one, bands))
        scales = {self.run.regions[one.ref].scale for _, _, one, _ in calls}
        if len(scales) > 1 or (slots and len(torch.cat(slots).unique()) != sum(len(x) for x in slots)):
            return None
        self._rows["decode"] = (calls, scales.pop())
        return self._rows["decode"]

    def turned_query(self, layer: int, one, q):
        """q (1, heads, 1, dim) turned to the OneCall's reference region (one matmul where it can)."""
        run = self.run
        if one.matrix is not None and ("R", id(one)) not in run._trig:
            run._trig[("R", id(one))] = one.matrix
        return turned_one(self.layers[layer], q, *one.query, run._trig, ("R", id(one)))


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
        """The new tokens' keys, turned to the primary key set, and values written at their slots by the backend's own
        write (its layout, which its kernel reads: `decode_in_place`)."""
        served = self.ropecli_map
        if served.layout is None:
            served.layout = cache_layout(lambda k, v, c, s: super(MapAttentionMixin, self).do_kv_cache_update(
                layer, k, v, c, s), kv_cache, self.num_kv_heads)
        n = min(key.shape[0], slot_mapping.shape[0])
        turned = served.keys_in(self.ropecli_layer, key[:n]).to(key.dtype)
        super().do_kv_cache_update(layer, turned, value[:n], kv_cache, slot_mapping[:n])

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        """query (tokens, heads, dim) -> output (tokens, heads, dim): per request, its new queries against all its
        keys under the map (a step of decoding requests only: in the backend's own kernel, `decode_in_place`)."""
        if attn_metadata is None:  # the profile run
            return output
        served, idx = self.ropecli_map, self.ropecli_layer
        if getattr(layer.attn_backend, "forward_includes_kv_cache_update", False):
            self.do_kv_cache_update(layer, key, value, kv_cache, attn_metadata.slot_mapping)
        keys, values = cache_views(kv_cache, self.num_kv_heads)
        key_layout, value_layout = served.layout
        bs = keys.shape[2]
        starts = attn_metadata.query_start_loc.tolist()
        lengths = attn_metadata.seq_lens.tolist()
        table = attn_metadata.block_table
        if starts[-1] == len(lengths) and self.decode_in_place(layer, query, key, value, kv_cache, attn_metadata, output,
                                                              keys, lengths, table):
            return output
        for r, Tk in enumerate(lengths):
            q0, q1 = starts[r], starts[r + 1]
            Tq = q1 - q0
            if Tq <= 0:
                continue
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

    def decode_in_place(self, layer, query, key, value, kv_cache, attn_metadata, output, keys, lengths, table) -> bool:
        """A step of decoding requests only, read from vLLM's paged cache in place by its own kernel (the backend's
        forward): each request's query turned to its OneCall's reference region, the other regions' bands of its keys
        (Self-Extend's window of W keys) turned in place in the cache for the call and put back after it, bit for bit.
        False (nothing done) where a request's step is not one call over all its keys, the regions' temperatures differ
        between requests, or two requests' bands share a cache slot (a prefix-cached block). What the step's layers
        share (each request's OneCall, its bands' places in the cache) is made by its first layer
        (`ServedMap.decode_plan`)."""
        served, idx = self.ropecli_map, self.ropecli_layer
        plan = served.decode_plan(idx, query, keys, lengths, table)
        if plan is None:
            return False
        calls, scale = plan
        # the layer's cache as one row of its storage (each layer's cache starts elsewhere in vLLM's one buffer)
        flat = keys.as_strided((keys.untyped_storage().nbytes() // keys.element_size() - keys.storage_offset(),), (1,),
                               keys.storage_offset())
        turned = query.clone()
        saved = []
        try:
            for r, q_slice, one, bands in calls:
                q = query[q_slice].view(1, -1, keys.shape[-1]).transpose(0, 1)[None]
                turned[r] = served.turned_query(idx, one, q)[0, :, 0].reshape(turned[r].shape)
                for at, cos, sin in bands:  # at (m, dim, kv heads): where each band key's dims sit in the storage
                    old = torch.take(flat, at)
                    saved.append((at, old))
                    new = rotate_half_into(old.permute(2, 0, 1)[None], cos, sin)[0].permute(1, 2, 0)
                    flat.put_(at, new.to(flat.dtype).contiguous())  # put_ reads its source in memory order
            before, self.scale = self.scale, self.scale * scale
            try:
                super().forward(layer, turned, key, value, kv_cache, attn_metadata, output)
            finally:
                self.scale = before
        finally:
            for at, old in reversed(saved):
                flat.put_(at, old)
        return True


def map_impl(impl, served: ServedMap, layer: int):
    """The layer's attention implementation as an instance of a subclass of its own class with the map's two methods
    (the metadata builder and vLLM's checks see the backend's class)."""
    cls = type(f"RopecliMap{type(impl).__name__}", (MapAttentionMixin, type(impl)), {})
    out = object.__new__(cls)
    out.__dict__.update(impl.__dict__)
    out.ropecli_map, out.ropecli_layer = served, layer
    return out
