"""`--bos auto|always|never`: what stands before the text of every window and prompt ropecli scores (torch-free).

    auto    (the default) what the tokenizer itself puts before a text, `tokenizer(text)` with its defaults. The
            prompt harnesses tokenize so: lm-eval's tasks (0.4.13, lm_eval/models/huggingface.py:1049-1057
            `tok_encode` and 1076-1083 `tok_batch_encode`: with add_bos_token=None, its default since 0.4.9.2, no
            add_special_tokens is passed), RULER's vLLM runner (scripts/pred/serve_vllm.py:57) and HF fallback
            (model_wrappers.py:62), LongBench's LongBench/pred.py:71, and the transformers text-generation pipeline
            since PR #31747 (July 2024: the tokenizer's defaults), which YaRN's eval/passkey.py:40/92 and RULER's
            model_wrappers.py:69 run. Llama's and Gemma's tokenizers add BOS; SmolLM2's, Qwen's and ropecli's built-in
            model's add none. Not the perplexity harnesses' rule where the tokenizer adds none: their windows start
            with BOS (always).
    always  the tokenizer's BOS token (`bos_token_id`) before every window and prompt, every text token scored; what
            ropecli did before --bos. The perplexity harnesses' rule: YaRN's eval/perplexity.py (text tokenized with
            add_special_tokens=False, 106-112; BOS put before every window, 55-59, whenever the tokenizer has one,
            153), and lm-eval's rolling perplexity (wikitext and the like: `loglikelihood_rolling`, huggingface.py
            1247-1256, puts `prefix_token_id`, BOS else EOS, 610-617, before a document's first window,
            lm_eval/utils.py:364) on a tokenizer that adds nothing itself: `ppl --len N --bos always` on a text of
            N-1 tokens is lm-eval's rolling log-likelihood of it (measured equal within 2e-7 nats/token on the
            built-in model and SmolLM2; the default, auto, differs by about 0.01).
    never   nothing before the text: the text-generation pipeline before PR #31747 (add_special_tokens=False), so
            YaRN's eval/passkey.py as its 2023 tables ran.

No choice reproduces lm-eval's rolling perplexity where the tokenizer adds its own BOS (the prefix and then the
tokenizer's BOS: two, the second scored) or has none (EOS first), nor its windows after a document's first (each
conditioned on the one token before it, not on BOS). The table, each rule's source line and the measured numbers:
docs/measurements/bos.md (sources read: lm-eval 0.4.13 as installed; YaRN 995db5b, RULER c3f5e3b, LongBench
2e00731); tests/test_bos_conventions.py checks the rows that run here.

Under a chat template (`--chat-template`, `ropecli.evaluation.chat_template`) the rendering is the text: auto adds the
tokenizer's own tokens unless the rendering starts with the BOS token (lm-eval's `has_bos_prefix` rule), always makes
sure it starts with one, never takes a leading one off.

The choice changes the scored token ids, so each unit's cache identity (the sha256 of its ids,
`Inputs.unit_fingerprints`) tells the three apart; the `--json` head says `bos` and the ids it resolved to (`bos_ids`).
"""

from __future__ import annotations

from ropecli.errors import RopeCliError

BOS_CHOICES = ("auto", "always", "never")
PROBE = "The grass is green."  # any text: what the tokenizer adds around it is what it adds around every text


def check_bos(bos: str) -> str:
    if bos not in BOS_CHOICES:
        raise RopeCliError(f"--bos {bos}: pass auto (the tokenizer's own), always or never")
    return bos


def tokenizer_lead(tokenizer) -> list[int]:
    """The tokens the tokenizer puts before a text by default (`tokenizer(text)`): those of the probe with its special
    tokens, before the probe's own tokens. Tokens it adds after a text (an EOS) are not taken: the text goes on."""
    own = list(tokenizer(PROBE, add_special_tokens=False)["input_ids"])
    added = list(tokenizer(PROBE)["input_ids"])
    for i in range(len(added) - len(own) + 1):
        if added[i:i + len(own)] == own:
            return added[:i]
    raise RopeCliError("--bos auto: this tokenizer changes a text's own tokens when it adds its special tokens, so what "
                       "it puts before a text cannot be read; pass --bos always or --bos never")


def lead_ids(tokenizer, bos: str) -> list[int]:
    """The token ids `--bos` puts before a text's own tokens (a list: a tokenizer may add more than one)."""
    if check_bos(bos) == "never":
        return []
    if bos == "auto":
        return tokenizer_lead(tokenizer)
    token = getattr(tokenizer, "bos_token_id", None)
    if token is None:
        raise RopeCliError("--bos always: this tokenizer has no BOS token; pass --bos auto (its own) or --bos never")
    return [token]


def framed(tokenizer, bos: str, ids: list[int]) -> list[int]:
    """A chat template's rendered tokens (`ids`, encoded without special tokens) under `--bos`: auto adds the
    tokenizer's own lead unless the rendering starts with BOS (lm-eval's has_bos_prefix), always makes sure it starts
    with BOS, never takes a leading BOS off."""
    token = getattr(tokenizer, "bos_token_id", None)
    starts = token is not None and bool(ids) and ids[0] == token
    if bos == "never":
        return ids[1:] if starts else ids
    return ids if starts else lead_ids(tokenizer, bos) + ids


def describe_bos(bos: str | None, tokens: list[str]) -> str:
    """The choice in words, for a caption: "BOS auto (the tokenizer's own: none)", "BOS always (<s>)". `bos` None: a
    result measured before --bos existed, when every window and prompt started with BOS."""
    if bos is None:
        return "BOS always (measured before --bos: every window and prompt started with the tokenizer's BOS)"
    if bos == "auto":
        return f"BOS auto (the tokenizer's own: {' '.join(tokens) or 'none'})"
    return f"BOS always ({' '.join(tokens)})" if bos == "always" else "BOS never (nothing before the text)"


def bos_fields(tokenizer, bos: str, ids: list[int]) -> dict:
    """The `--json` head's fields: the choice, the ids it resolved to and their tokens."""
    return {"bos": bos, "bos_ids": list(ids), "bos_tokens": [str(t) for t in tokenizer.convert_ids_to_tokens(list(ids))]}
