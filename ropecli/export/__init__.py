"""Layer 4 (beside tuning's inputs): a chosen schedule written where each runtime reads it: transformers
and vLLM (`hf`), llama.cpp / Ollama (`gguf`), and the one function `export` and `advise` call (`plan`)."""
