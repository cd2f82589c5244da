"""A model under a schedule and a position map, as the evaluator reaches it (`backend.ModelBackend`): transformers
(`backend.TransformersBackend`, opened by `load.load_model`) and llama.cpp (`llamacpp_backend.LlamaCppBackend`, opened by
`llamacpp_open.open_gguf`). Above `ropecli.maps` (a backend installs a map's attention on its model) and `ropecli.models`
(what a model is: its RoPE, its layers, its files, the kernels that score it)."""
