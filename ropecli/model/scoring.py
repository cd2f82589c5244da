"""Memory-bounded perplexity: final hidden states once, then lm_head + cross-entropy in chunks.

Full logits at long length are the memory hog (T x vocab x ~10 bytes with their fp32 copies); this
never holds more than `chunk_tokens` rows of them. NLL per window is the sum of -log p(x_t | x_<t)
over the scored tokens (all T-1 predictions, or the last `score_last` of them), in float32 from
fp32-upcast logits, after the model's final-logit soft-capping where it has one (Gemma 2/3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ropecli.errors import RopeCliError

LOGIT_BUDGET_BYTES = 1 << 28  # 256 MiB of fp32 logits per chunk


def default_chunk_tokens(vocab_size: int) -> int:
    return max(16, LOGIT_BUDGET_BYTES // (4 * vocab_size))


def _softcap(model) -> float | None:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(cfg, "final_logit_softcapping", None)


@torch.inference_mode()
def window_nll(model, ids: torch.Tensor, chunk_tokens: int | None = None, score_last: int | None = None) -> tuple[float, int]:
    """(sum of NLL in nats, number of scored tokens) for one window `ids` of shape (1, T)."""
    head = model.get_output_embeddings()
    hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state  # (1, T, H)
    hidden, targets = hidden[:, :-1], ids[:, 1:]  # position t predicts token t+1
    if score_last:
        hidden, targets = hidden[:, -score_last:], targets[:, -score_last:]
    n = targets.shape[1]
    chunk = chunk_tokens or default_chunk_tokens(head.weight.shape[0])
    cap = _softcap(model)
    total = torch.zeros((), dtype=torch.float64, device=ids.device)
    for s in range(0, n, chunk):
        logits = head(hidden[:, s:s + chunk]).float()  # (1, c, V)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        total += F.cross_entropy(logits.view(-1, logits.shape[-1]), targets[:, s:s + chunk].reshape(-1), reduction="sum").double()
        del logits
    return float(total), n


@torch.inference_mode()
def naive_window_nll(model, ids: torch.Tensor) -> tuple[float, int]:
    """The field's usual `model(ids, labels=ids)`: full logits at once. Reference for tests and benchmarks."""
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    n = ids.shape[1] - 1
    return float(loss.double()) * n, n


def out_of_memory(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text


def oom_error(length: int) -> RopeCliError:
    return RopeCliError(f"out of memory at --len {length}; try --device-map auto (spread the model over GPUs/CPU), "
                        "a smaller --chunk-size, --dtype bf16, or a shorter --len")
