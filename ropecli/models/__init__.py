"""Layer 2, where torch lives: a model's RoPE config (config.json, GGUF header; no torch there), loading,
patching RoPE and log-n in place, memory-bounded scoring, and the model backends the evaluator talks to.
Imports only `ropecli.rope` below it."""
