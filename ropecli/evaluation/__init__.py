"""The evaluation protocol, above the backends and the spec: data and windows, passkey and RULER prompts, the evaluator
(through the model backend interface), typed results, the cache, paired statistics, and the split of windows under
torchrun."""
