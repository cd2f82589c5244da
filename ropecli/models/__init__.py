"""What a model is, above `ropecli.rope`: its RoPE config (config.json, GGUF header; no torch there), its layers and
rotary modules (patched in place for a schedule and log-n), its files and memory, and the memory-bounded kernels that
score it. The backends that put a model under a schedule and a map sit above it and the maps (`ropecli.backends`)."""
