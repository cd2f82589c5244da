"""Layer 3: the evaluation protocol. Data and windows, passkey prompts, the evaluator (through the model
backend interface), typed results, the cache, paired statistics, and the split of windows under torchrun."""
