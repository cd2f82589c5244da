"""Memory-bounded scoring: final hidden states once, then lm_head + the measure in chunks.
(Perplexity, passkey answers and KL against the unscaled model; never full logits.)

Full logits at long length are the memory hog (T x vocab x ~10 bytes with their fp32 copies); this
never holds more than `chunk_tokens` rows of them. NLL per window is the sum of -log p(x_t | x_<t)
over the scored tokens (all T-1 predictions, or the last `score_last` of them), in float32 from
fp32-upcast logits, after the model's final-logit soft-capping where it has one (Gemma 2/3).
"""

from __future__ import annotations

import functools
import inspect

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.models.memory import LOGIT_BUDGET_BYTES
from ropecli.models.token_losses import prefix_summaries

torch = deferred("torch")
F = deferred("torch.nn.functional")
transformers = deferred("transformers")


def inference_mode(fn):
    """`fn` run under torch.inference_mode() (a decorator that imports torch when `fn` first runs, not at import)."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.inference_mode():
            return fn(*args, **kwargs)

    return run


def default_chunk_tokens(vocab_size: int) -> int:
    return max(16, LOGIT_BUDGET_BYTES // (4 * vocab_size))


def decoder(model):
    """The model without its LM head: `base_model`, else its `model` (Llama 4's causal LM is its own base_model_prefix
    target, so `base_model` returns the whole model and its output has logits, not `last_hidden_state`)."""
    body = model.base_model
    return body if body is not model else model.model


def final_hidden(model, ids: torch.Tensor) -> torch.Tensor:
    """The final hidden states (1, T, H) of one window, without the cache."""
    return decoder(model)(input_ids=ids, use_cache=False).last_hidden_state


def _softcap(model) -> float | None:
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return getattr(cfg, "final_logit_softcapping", None)


@inference_mode
def window_nll(model, ids: torch.Tensor, chunk_tokens: int | None = None, score_last: int | None = None,
               prefixes: list[int] | None = None, keep_tokens: bool = False):
    """(sum of NLL in nats over the scored tokens, their number, the NLL summed in each of the
    POSITION_BINS bins of all T-1 predictions) for one window `ids` of shape (1, T); with `prefixes`
    (lengths up to T), a list of those for the window's first n tokens, n in `prefixes`, from this one
    forward pass (causal attention: the first n tokens see nothing after them); `keep_tokens` adds every
    prediction's NLL (`ropecli.models.token_losses.encode_tokens`)."""
    return prefix_summaries(token_losses(model, ids, chunk_tokens), score_last, prefixes, keep_tokens)  # models.token_losses


@inference_mode
def token_losses(model, ids: torch.Tensor, chunk_tokens: int | None = None):
    """-log p(x_{t+1} | x_<=t) of every prediction of one window `ids` (1, T): numpy float64 (T-1,), the
    logits `chunk_tokens` rows at a time."""
    head = model.get_output_embeddings()
    hidden = final_hidden(model, ids)  # (1, T, H)
    hidden, targets = hidden[0, :-1], ids[0, 1:]  # position t predicts token t+1
    n = targets.shape[0]
    chunk = chunk_tokens or default_chunk_tokens(head.weight.shape[0])
    cap = _softcap(model)
    parts = [token_nll(_logits(model, head, hidden[s:s + chunk], cap), targets[s:s + chunk]) for s in range(0, n, chunk)]
    return torch.cat(parts).cpu().numpy()  # one transfer at the end: no chunk waits on the host (a GPU runs ahead)


# --- the measures on logits: shared by every backend (transformers and llama.cpp: ropecli.backends) ---

def chunk_nll(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Sum of -log p(target) over rows of fp32 logits (c, V) and their next tokens (c,), in nats."""
    return float(F.cross_entropy(logits, targets, reduction="sum").double())


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log p(target) of each row of fp32 logits (c, V), in float64 (c,)."""
    return F.cross_entropy(logits, targets, reduction="none").double()


def answer_scores(logits: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
    """(1.0 if every answer token is the argmax else 0.0, answer NLL) from the logits (A, V) that predict them."""
    return float(torch.equal(logits.argmax(-1), target)), chunk_nll(logits, target)


def chunk_kl(ref_logits: torch.Tensor, new_logits: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(KL(p_ref || p_new) per row in float64, rows whose argmaxes agree) from two (c, V) fp32 logits."""
    lp_ref = F.log_softmax(ref_logits, dim=-1)
    lp_new = F.log_softmax(new_logits, dim=-1)
    kl = (lp_ref.exp() * (lp_ref - lp_new)).sum(-1).double()  # exactly 0 where the two are identical
    return kl.clamp_min(0.0), int((lp_ref.argmax(-1) == lp_new.argmax(-1)).sum())  # float rounding can give -1e-9


def _logits(model, head, hidden: torch.Tensor, cap: float | None) -> torch.Tensor:
    logits = head(hidden).float()
    return torch.tanh(logits / cap) * cap if cap else logits


@inference_mode
def passkey_scores(model, ids: torch.Tensor, answer_start: int) -> tuple[float, float]:
    """(1.0 if every answer token is the argmax given its prefix else 0.0, answer NLL in nats) for one
    prompt `ids` (1, T) whose answer is ids[0, answer_start:]. Logits only at the answer positions. Under a map
    its prompt fixes (`fixed_by_prompt`: LaMPE's three regions) the prompt runs alone and the answer through its
    cache (`answer_hidden_after_prompt`), as the source decodes and `greedy_tokens` generates: one pass over both
    would set U and both biases from the answer's tokens too."""
    head = model.get_output_embeddings()
    if fixed_by_prompt(model):
        hidden = answer_hidden_after_prompt(model, ids, answer_start)
    else:
        hidden = final_hidden(model, ids)[0, answer_start - 1:-1]  # (A, H): position t predicts t+1
    logits = _logits(model, head, hidden, _softcap(model))  # (A, V)
    return answer_scores(logits, ids[0, answer_start:])


def fixed_by_prompt(model) -> bool:
    """Whether `model` runs under a position map whose regions its prompt fixes and decoding keeps
    (`PositionMap.per_prompt`: LaMPE's three regions): the MapRun `maps.mapped_attention.mapped` runs its decoder's
    passes under, which it names on the decoder while it runs (the maps import this module, not it them)."""
    return bool(getattr(getattr(decoder(model), "ropecli_map_run", None), "per_prompt", False))


def answer_hidden_after_prompt(model, ids: torch.Tensor, answer_start: int) -> torch.Tensor:
    """The final hidden states (A, H) that predict the answer ids[0, answer_start:], teacher-forced as generation
    runs: the prompt ids[:, :answer_start] in one pass into a KV cache (its last position predicts the answer's first
    token), then the answer's tokens but its last in one more pass through that cache."""
    body = decoder(model)
    cache = transformers.DynamicCache(config=model.config)  # filled in place by both passes
    # the cache's keyword as the decoder's class names it (transformers renamed past_key_values to cache in 5.x;
    # under a map the instance's forward is mapped's wrapper, which names none)
    keyword = "cache" if "cache" in inspect.signature(type(body).forward).parameters else "past_key_values"
    parts = []
    for lo, hi in ((0, answer_start), (answer_start, ids.shape[1] - 1)):
        if hi > lo:
            out = body(input_ids=ids[:, lo:hi], position_ids=torch.arange(lo, hi, device=ids.device)[None],
                       use_cache=True, **{keyword: cache})
            parts.append(out.last_hidden_state[0])
    return torch.cat([parts[0][-1:], *parts[1:]])


@inference_mode
def greedy_tokens(model, ids: torch.Tensor, max_new: int, eos: int | None) -> list[int]:
    """Greedy decoding through the KV cache from the prompt `ids` (1, T): up to `max_new` new token ids,
    stopping after EOS (RULER's HF runner: do_sample=False, no repetition penalty)."""
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new, do_sample=False,
                         num_beams=1, pad_token_id=eos, eos_token_id=eos)
    return [int(t) for t in out[0, ids.shape[1]:]]


@inference_mode
def window_kl(model, ids: torch.Tensor, reference, scaled, chunk_tokens: int | None = None) -> tuple[float, int, int, list[float]]:
    """KL(p_reference || p_scaled) at every position of one window `ids` (1, T), nats:
    (sum of KL, positions, positions where both argmaxes agree, per-position KL).
    `reference()` and `scaled()` are context managers that put the model in either state; both final
    hidden states (T x H each) are kept, the logits of both are computed `chunk` rows at a time (half
    ppl's chunk, so the two chunks together use ppl's logit memory)."""
    head = model.get_output_embeddings()
    with reference():
        h_ref = final_hidden(model, ids)[0]  # (T, H)
    with scaled():
        h_new = final_hidden(model, ids)[0]
    cap = _softcap(model)
    chunk = max(1, (chunk_tokens or default_chunk_tokens(head.weight.shape[0])) // 2)
    per_token, agree = [], 0
    for s in range(0, h_ref.shape[0], chunk):
        kl, same = chunk_kl(_logits(model, head, h_ref[s:s + chunk], cap), _logits(model, head, h_new[s:s + chunk], cap))
        per_token.append(kl)
        agree += same
    values = torch.cat(per_token)
    return float(values.sum()), int(values.numel()), agree, values.cpu().tolist()


@inference_mode
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
