"""Generation through a KV cache, teacher-forced: the losses a runtime's decoding gives the continuation of a
prompt, beside the losses one forward pass gives the same tokens.

`cached_token_losses(model, ids (1, N), segments)`: the tokens are fed in segments [start, end) — the first is
the prompt (prefill) — each through one forward pass with the cache of the ones before (`use_cache=True`,
positions start .. end-1), each under its own state (`enter()`: a context manager that puts the model in the
schedule the runtime applies to a forward pass ending at `end`). Keys computed under one state stay in the
cache under it: that is what a runtime that switches schedules mid-generation does. Returns -log p(x_t) of
every continuation token t = P .. N-1 (P = the prompt's length) in float64 (N-P,); the logit at position
t-1 predicts token t, so the prompt's last position is scored too.
"""

from __future__ import annotations

import inspect

import numpy as np

from ropecli.deferred import deferred
from ropecli.models.chunked_scoring import _logits, _softcap, decoder, inference_mode, token_nll

transformers = deferred("transformers")
torch = deferred("torch")


@inference_mode
def cached_token_losses(model, ids: torch.Tensor, segments: list[tuple[int, object]]) -> np.ndarray:
    """`segments`: [(end, enter)], ends increasing, the last = N; see the module's docstring."""
    head = model.get_output_embeddings()
    cap = _softcap(model)
    cache = transformers.DynamicCache(config=model.config)  # filled in place by every forward pass
    cache_kw = cache_keyword(model)
    prompt_len = segments[0][0]
    hidden = []  # the final hidden states at positions P-1 .. N-2, segment by segment
    start = 0
    for end, enter in segments:
        positions = torch.arange(start, end, device=ids.device)[None]
        with enter():
            out = decoder(model)(input_ids=ids[:, start:end], position_ids=positions, use_cache=True,
                                   **{cache_kw: cache})
        h = out.last_hidden_state[0]  # (end - start, H)
        lo = max(start, prompt_len - 1) - start
        hidden.append(h[lo:end - start])
        start = end
    h = torch.cat(hidden)[:-1]  # positions P-1 .. N-2
    targets = ids[0, prompt_len:]
    return token_nll(_logits(model, head, h, cap), targets).cpu().numpy()


def cache_keyword(model) -> str:
    """transformers renamed `past_key_values` to `cache` during 5.x (the old name is deprecated until 5.40)."""
    return "cache" if "cache" in inspect.signature(decoder(model).forward).parameters else "past_key_values"
