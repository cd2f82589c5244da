"""Teacher forcing through vLLM's decoding: a logits processor (vLLM's V1 interface) that makes a request's n-th
generated token the n-th of the tokens it names (`SamplingParams(extra_args={"ropecli_force": [ids]})`), so an answer
is scored as vLLM decodes it, token by token through the prompt's paged KV cache.

What is read back is the raw log-probability vLLM's sampler takes before any logits processor runs
(`Sampler.forward` in vllm/v1/sample/sampler.py: `raw_logprobs = self.compute_logprobs(logits)` ahead of
`apply_logits_processors`, under the default logprobs_mode "raw_logprobs"), and its rank among them: the forced
token's probability under the model, and whether it was the argmax. ropecli uses it where a map's regions are fixed by
the prompt (LaMPE: `PositionMap.per_prompt`): one prefill of prompt + answer would count the answer's tokens too.

Imported only in vLLM's environment (`ropecli.export.vllm_worker`); it names vLLM's classes at import.
"""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from ropecli.export.vllm_worker import (
    FORCE,  # the SamplingParams.extra_args key: the token ids to generate, in order
)


class ForcedTokens(LogitsProcessor):
    """Each forcing request's logits row: -inf but at its next forced token (left as the model computed it)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        self.forced: dict[int, tuple[list[int], list[int]]] = {}  # batch row -> (tokens to force, its output so far)

    def is_argmax_invariant(self) -> bool:
        return False  # it changes what greedy decoding picks

    @staticmethod
    def _state(params, _prompt, output: list[int]):
        tokens = (params.extra_args or {}).get(FORCE)
        return (list(tokens), output) if tokens else None  # `output`: the live list vLLM appends to

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self.forced, batch_update, self._state)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for row, (tokens, output) in self.forced.items():
            step = len(output)
            if step < len(tokens):
                keep = logits[row, tokens[step]].clone()
                logits[row] = float("-inf")
                logits[row, tokens[step]] = keep
        return logits
