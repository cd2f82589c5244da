"""A transformers model that runs under a position map, written by `ropecli export --to transformers --map MAP` into
the exported folder as `modeling_ropecli_map.py` and loaded with `from_pretrained(folder, trust_remote_code=True)`.

This file is the folder's glue: the class that wires the map into the model's own class (BASE_CLASS) and reads it
from config.json's `ropecli_map` (checked whole when the model loads: `check_map_block`). It is never imported by
ropecli: the export generates the folder's file from it (`export/folder_source.py`), as transformers generates
`modeling_<family>.py` from its modular file, replacing each `from ropecli… import name` below by the definition of
that name in ropecli (and those it uses, down to torch, numpy and transformers), and appending the map's region
function. So the folder runs ropecli's own map attention (`ropecli.maps.map_run`: what runs, as the model runs, is
described there) where ropecli is not installed, and no line of it is kept by hand.
"""

from __future__ import annotations

import inspect

import torch  # noqa: F401  (the map's region function may build torch positions)
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from ropecli.errors import RopeCliError
from ropecli.export.map_folder import check_map_block
from ropecli.maps.map_run import map_forward, model_map_run

BASE_CLASS = "LlamaForCausalLM"  # the model's own class (the export writes it)
REGION_FUNCTION = ""  # the map's region function's name (the export writes it with the function)
REFUSED_CACHES = ("quantized", "offloaded_hybrid_chunked")  # caches whose layers transform the widened keys
Base = getattr(transformers, BASE_CLASS)


class RopecliMapForCausalLM(Base):
    """The model under config.ropecli_map (its name, parameters and exported length) in every forward pass, generation
    included: batched and padded, through dynamic, static and sliding caches."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        why = check_map_block(getattr(config, "ropecli_map", None), text.num_hidden_layers)
        if why is not None:
            raise RopeCliError(why)

    def _map_run(self):
        if getattr(self, "_ropecli_run", None) is None:
            config = self.config.get_text_config() if hasattr(self.config, "get_text_config") else self.config
            spec = self.config.ropecli_map
            length = int(spec.get("length") or getattr(config, "max_position_embeddings", 0) or 0)
            self._ropecli_run = model_map_run(self, globals()[REGION_FUNCTION], spec["params"], length,
                                              spec.get("pairs"))
        return self._ropecli_run

    _can_compile_fullgraph = False  # its forward swaps the attention function and the cache's update: never compiled

    @classmethod
    def is_backend_compatible(cls):
        """Asked by vLLM alone, where no class is registered for RopecliMapForCausalLM (ropecli's plugin absent) and it
        would serve this file's model through its transformers backend with its own attention, without the map
        (vllm/model_executor/models/registry.py: _try_resolve_transformers): refused in one line instead."""
        raise RopeCliError("this folder runs a position map that vLLM serves only through ropecli's vLLM plugin: "
                           "pip install ropecli where vLLM is installed (and keep 'ropecli' in VLLM_PLUGINS if set), "
                           "then vllm serve DIR")

    def generate(self, *args, **kwargs):
        wanted = kwargs.get("cache_implementation") or getattr(kwargs.get("generation_config") or
                                                               self.generation_config, "cache_implementation", None)
        if wanted in REFUSED_CACHES:
            raise RopeCliError(f"cache_implementation='{wanted}' transforms the cached keys this map's folder widens: "
                               "use the dynamic (default) or static cache")
        return super().generate(*args, **kwargs)

    def forward(self, *args, **kwargs):
        names = list(inspect.signature(super().forward).parameters)
        return map_forward(self, self._map_run(), super().forward, names, {**dict(zip(names, args)), **kwargs})


# generate() reads the model's parameters from forward's signature (logits_to_keep: the prefill's logits for the last
# token only; the attention mask it derives): the model's own, not (*args, **kwargs)
RopecliMapForCausalLM.forward.__signature__ = inspect.signature(Base.forward)


# pipeline("text-generation") checks the model's class name against transformers' causal-LM names and logs a
# several-KB "is not supported" error for any other (transformers/pipelines/base.py: check_model_type): this class is
# named there under a model type no config has (the auto mappings look names up by config only: nothing else changes)
MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault("ropecli_map", RopecliMapForCausalLM.__name__)
