"""Position maps at the attention: Self-Extend, ReRoPE, Leaky ReRoPE, DCA, STRING, DPE, LaMPE. Where a map puts each
query and key, how it is spelled and checked, its rules for a model's length and the key pairs it moves (numpy:
position_maps, map_spelling, map_pairs, map_rules, pair_selection, llamacpp_positions), and the attention that runs it on
a model (torch: map_run, the one map attention; mapped_attention, map_layers, map_bands, region_attention,
flex_regions, pair_contributions; vllm_model and vllm_plugin inside vLLM's engine).

The package sits above `ropecli.models` (a map's attention reads a model's layers and rotary modules) and below the
spec, the backends, export and tuning, which hold a bound map and hand it on: the folder that serves a map is written by
`ropecli.export.map_folder`, its candidates in a search are `ropecli.tuning.candidates`'. Importing this package
imports none of its modules."""
