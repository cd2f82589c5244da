"""The runtimes ropecli serves to, one module each: its record (`record.Runtime`: what the runtime does with a config,
with sources), its writer and its reader (`record.RuntimeModule`). Found by name by `ropecli.export.registry`, which
nothing here imports."""

ORDER = ("transformers", "vllm", "llamacpp", "sglang", "ollama")  # how tables and lists show them; others after
SERVED_BY_DEFAULT = ("transformers", "vllm", "llamacpp")  # compare --workload without --runtime
