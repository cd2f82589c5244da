"""`--bos auto|always|never`: what stands before the text of every window and prompt ropecli scores (torch-free).

    auto    (the default) what the tokenizer itself puts before a text, `tokenizer(text)` with its defaults: the field's
            harnesses score so. lm-eval ≥ 0.4.9.2 (HFLM's add_bos_token=None: lm_eval/models/huggingface.py
            `HFLM.tok_encode` passes no add_special_tokens, so the tokenizer's default applies), YaRN's eval/passkey.py
            and eval/perplexity.py (`tokenizer(prompt)`), RULER's scripts (the tokenizer's encode). Llama's and Gemma's
            tokenizers add BOS; SmolLM2's, Qwen's and ropecli's built-in model's add none.
    always  the tokenizer's BOS token (`bos_token_id`) before every window and prompt: what ropecli did before --bos.
    never   nothing before the text.

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
