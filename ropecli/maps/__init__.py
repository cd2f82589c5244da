"""Position maps, one feature in one place: where a map puts each query and key (Self-Extend, ReRoPE, DCA, STRING,
DPE, llama.cpp's Self-Extend), how it is spelled and checked, its rules for a model's length, the key pairs it moves,
the attention that runs it on a model (blocks on the CPU, flex attention on CUDA), the transformers folder that serves
it, and its candidates in a search.

The modules sit at the levels of the layers they serve, and import-linter holds each to its level (pyproject.toml):
numpy only (position_maps, map_spelling, map_pairs, map_rules, map_checks, pair_selection, llamacpp_positions), torch
where a model runs (mapped_attention, map_layers, map_bands, map_rotation, region_attention, flex_regions,
pair_contributions), export (map_folder, and map_modeling: the folder's modeling file) and tuning (map_candidates).
Importing this package imports none of them."""
