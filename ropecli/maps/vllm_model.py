"""A position-map folder served by vLLM (`ropecli export --to transformers --map MAP --out DIR`, then `vllm serve DIR`):
the model class ropecli's vLLM plugin registers as `RopecliMapForCausalLM` (`maps.vllm_plugin.register`).

The folder's config.json names `RopecliMapForCausalLM` in `architectures`, the model's own class in `ropecli_map.
architecture` and the map in `ropecli_map`. vLLM builds the model's own vLLM class (Llama, Mistral, Qwen2, Qwen3) and
this module changes each mapped layer (`maps.map_layers.plan_layers`: the layers that attend globally with RoPE at the
exported length) in two places:
- its `rotary_emb` hands q and k on unrotated, so the layer's KV cache holds keys unrotated, the same bytes whatever
  the map does with them: prefix caching shares blocks between requests, and a key is never turned twice;
- its attention implementation (`MapAttentionImpl`, the backend's own class with two methods replaced) writes the new
  keys and values into vLLM's paged cache at their slots (`do_kv_cache_update`, a plain [block, head, slot, dim]
  layout of the backend's own cache tensor), and in `forward` gathers each request's keys and values from its block
  table and runs ropecli's own map attention on them (`maps.region_attention.MappedAttention`, the code ropecli
  measures with): each region's queries and keys rotated as read, by the transformers rotary module of the folder's
  config (its schedule: the same cos and sin as ropecli's scoring), regions merged by log-sum-exp.
A request's new tokens are always the last of its keys (vLLM's query_start_loc / seq_lens), so a prefill, a chunk of a
chunked prefill, a prefill after a prefix-cache hit and a decoding step are one call each, at the positions they have
in the request: every schedule of vLLM's scheduler gives the map's numbers. A per-prompt map (LaMPE's three regions)
keeps each request's prompt length from its prefill through its decoding steps, as its source decodes (the request
told by its first KV block: prefix caching off); a prompt prefilled in chunks runs each chunk as the prompt up to it. Unmapped layers (sliding windows below the
exported length) run vLLM's own attention untouched.
"""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import torch
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from vllm import __version__ as VLLM_VERSION
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.llama import LlamaForCausalLM as VllmLlamaForCausalLM
from vllm.model_executor.models.registry import ModelRegistry

from ropecli.errors import RopeCliError
from ropecli.maps.map_layers import plan_layers
from ropecli.maps.position_maps import bind
from ropecli.maps.region_attention import BLOCK, MappedAttention
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


class _Unrotated(torch.nn.Module):
    """A mapped layer's `rotary_emb`: q and k handed on as they are (the map rotates them as it reads them)."""

    def forward(self, positions, query, key=None, *args, **kwargs):
        return query, key


class _Layer:
    """What ropecli's map attention asks of a layer: its index (its key-pair selection, the pass's first layer)."""

    def __init__(self, layer_idx: int):
        self.layer_idx = layer_idx


def install_map(model, vllm_config) -> "ServedMap":
    """Replace every mapped layer's rotary_emb and attention implementation; the map shared by them all."""
    hf = vllm_config.model_config.hf_config
    text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
    block = hf.ropecli_map
    length = int(block.get("length") or vllm_config.model_config.max_model_len)
    plans = plan_layers(text, [SimpleNamespace(layer_type=None)], length)
    served = ServedMap(block, text, plans)
    if served.per_prompt and getattr(vllm_config.cache_config, "enable_prefix_caching", False):
        raise RopeCliError(f"{served.name} fixes its regions from each request's prompt, which ropecli's plugin tells "
                           "apart by their KV blocks: serve it with prefix caching off (vllm serve DIR "
                           "--no-enable-prefix-caching; LLM(..., enable_prefix_caching=False))")
    changed = 0
    for module in model.modules():
        attn = getattr(module, "attn", None)
        if not (isinstance(attn, Attention) and hasattr(module, "rotary_emb")):
            continue
        layer = layer_index(attn.layer_name)
        if not plans[layer].mapped:
            continue
        module.rotary_emb = _Unrotated()
        attn.impl = map_impl(attn.impl, served, layer)
        changed += 1
    if changed != sum(p.mapped for p in plans):
        raise RopeCliError(f"{base_architecture(hf)}: {changed} of {sum(p.mapped for p in plans)} mapped layers found "
                           "in vLLM's model (each with rotary_emb and attn); not served")
    return served


def layer_index(name: str) -> int:
    """The decoder layer of an attention layer's name (`model.layers.3.self_attn.attn` -> 3)."""
    found = re.findall(r"\.(\d+)\.", f".{name}.")
    if not found:
        raise RopeCliError(f"vLLM attention layer '{name}' names no layer index; not served")
    return int(found[-1])


class ServedMap:
    """The map of a served folder: its regions, the rotary module of the folder's schedule, the key-pair selection,
    and per engine step one `MappedAttention` per (queries, keys) shape, shared by the layers of the step (its block
    plan and its cos and sin made once per shape: requests of one shape have the same positions)."""

    def __init__(self, block: dict, text, plans):
        self.bound = bind(block["name"], block.get("params") or {})  # checked once, as ropecli binds a --map
        self.name = self.bound.name
        self.bound.regions(1)  # its parameters' own rules, before the first request
        if self.bound.share < 1.0 and not block.get("pairs"):
            raise RopeCliError(f"{self.name}: {self.bound.record.selects} = {self.bound.share:g} moves the key pairs "
                               "chosen on the model, and config.json's ropecli_map has none: export the folder again")
        self.selection = _selection(block.get("pairs"), text) if self.bound.share < 1.0 else None
        self.rotary = _rotary_forward(text)
        self.first = min(i for i, p in enumerate(plans) if p.mapped)
        self._step: dict = {}
        self.per_prompt, self._prompts = self.bound.record.per_prompt, {}  # {a request's first block: its prompt's length}

    def prompt(self, first_block: int, Tq: int, Tk: int) -> int | None:
        """A per-prompt map's prompt length for the request whose block table starts at `first_block` (with prefix
        caching off, `install_map`, a live request's own): its keys at a pass of more than one new token (a prefill,
        or a chunk of one: the prompt up to it) or at its first; kept through its decoding steps. None for any other
        map."""
        if not self.per_prompt:
            return None
        if Tq == Tk or Tq > 1 or first_block not in self._prompts:
            self._prompts[first_block] = Tk
        return self._prompts[first_block]

    def attention(self, Tq: int, Tk: int, prompt: int | None = None) -> MappedAttention:
        """The step's attention for Tq new queries ending Tk keys of a request whose prompt was `prompt` tokens (a
        per-prompt map's; a new step begins at the first mapped layer)."""
        key = (Tq, Tk, prompt)
        if key not in self._step:
            self._step[key] = MappedAttention(self.bound.regions, self.rotary, BLOCK, name=self.bound,
                                              first_layer=self.first, selection=self.selection,
                                              per_prompt=self.per_prompt)
        self._step[key].prompt = prompt
        return self._step[key]

    def begin_step(self):
        self._step = {}


def _rotary_forward(text):
    """The transformers rotary module of the folder's config (its schedule, attention factor included): ropecli's
    scoring rotates with the same module class and config."""
    arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(text.model_type)
    module = sys.modules[getattr(transformers, arch).__module__]
    cls = next(v for k, v in vars(module).items() if k.endswith("RotaryEmbedding") and isinstance(v, type))
    rotary = cls(config=text)
    return rotary.forward


def _selection(pairs: dict | None, text) -> dict:
    """config.json's {layer: [each head's pair indices]} as {layer: (heads, pairs) bool} (MappedAttention's)."""
    heads = text.num_attention_heads
    half = int(getattr(text, "head_dim", None) or text.hidden_size // heads) // 2
    out = {}
    for layer, rows in (pairs or {}).items():
        mask = torch.zeros(len(rows), half, dtype=torch.bool)
        for h, chosen in enumerate(rows):
            mask[h, chosen] = True
        out[int(layer)] = mask
    return out


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


class MapAttentionMixin:
    """The two methods of a mapped layer's attention implementation (mixed into the backend's own class)."""

    ropecli_map: ServedMap
    ropecli_layer: int

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
        """The new tokens' keys (unrotated) and values written at their slots; slots < 0 are padding."""
        keys, values = cache_views(kv_cache, self.num_kv_heads)
        n = min(key.shape[0], slot_mapping.shape[0])
        slots = slot_mapping[:n].long()
        keep = slots >= 0
        slots = slots[keep]
        bs = keys.shape[2]
        block, offset = slots // bs, slots % bs
        keys[block, :, offset] = key[:n][keep].to(keys.dtype)
        values[block, :, offset] = value[:n][keep].to(values.dtype)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        """query (tokens, heads, dim) -> output (tokens, heads, dim): per request, its new queries against all its
        keys under the map."""
        if attn_metadata is None:  # the profile run
            return output
        served, idx = self.ropecli_map, self.ropecli_layer
        if idx == served.first:
            served.begin_step()
        if getattr(layer.attn_backend, "forward_includes_kv_cache_update", False):
            self.do_kv_cache_update(layer, key, value, kv_cache, attn_metadata.slot_mapping)
        keys, values = cache_views(kv_cache, self.num_kv_heads)
        bs = keys.shape[2]
        starts = attn_metadata.query_start_loc.tolist()
        lengths = attn_metadata.seq_lens.tolist()
        table = attn_metadata.block_table
        module = _Layer(idx)
        for r, Tk in enumerate(lengths):
            q0, q1 = starts[r], starts[r + 1]
            Tq = q1 - q0
            if Tq <= 0:
                continue
            blocks = table[r, :(Tk + bs - 1) // bs].long()
            k = keys[blocks].permute(1, 0, 2, 3).reshape(keys.shape[1], -1, keys.shape[3])[None, :, :Tk]
            v = values[blocks].permute(1, 0, 2, 3).reshape(values.shape[1], -1, values.shape[3])[None, :, :Tk]
            q = query[q0:q1].transpose(0, 1)[None]  # (1, heads, Tq, dim)
            attention = served.attention(Tq, Tk, served.prompt(int(table[r, 0]), Tq, Tk))
            out, _ = attention(module, q, k.to(q.dtype), v.to(q.dtype), None, scaling=self.scale)
            output[q0:q1] = out[0].to(output.dtype)
        return output


def map_impl(impl, served: ServedMap, layer: int):
    """The layer's attention implementation as an instance of a subclass of its own class with the map's two methods
    (the metadata builder and vLLM's checks see the backend's class)."""
    cls = type(f"RopecliMap{type(impl).__name__}", (MapAttentionMixin, type(impl)), {})
    out = object.__new__(cls)
    out.__dict__.update(impl.__dict__)
    out.ropecli_map, out.ropecli_layer = served, layer
    return out
