"""--bos auto|always|never: what stands before every window and prompt. auto, the default, is what the
tokenizer itself puts before a text (lm-eval ≥ 0.4.9.2, YaRN's and RULER's scripts tokenize so): nothing for the
built-in model's and SmolLM2's tokenizers, BOS for a Llama-style one; always is ropecli's earlier BOS; never is none.
lm-eval's own tokenization of its niah prompts is checked in tests/test_lm_eval_agreement.py."""

from __future__ import annotations

import json

import pytest
from tokenizers import processors
from transformers import AutoTokenizer
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation.bos_policy import framed, lead_ids
from ropecli.evaluation.chat_template import PromptFrame
from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.passkey import ANSWER_PREFIX, published_question
from ropecli.models.config import BUILTIN_DIR

from tiny_models import char_tokenizer


@pytest.fixture(scope="module")
def builtin_tok():
    return AutoTokenizer.from_pretrained(str(BUILTIN_DIR))


@pytest.fixture(scope="module")
def llama_style_tok():
    """A tokenizer that adds BOS by default (Llama's and Gemma's do): a post-processor putting <s> first."""
    tok = char_tokenizer()
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    assert tok("ab")["input_ids"][0] == 0 and tok("ab", add_special_tokens=False)["input_ids"][0] != 0
    return tok


def test_auto_is_what_the_tokenizer_puts_before_a_text(builtin_tok, llama_style_tok):
    assert builtin_tok.bos_token_id is not None and builtin_tok("x")["input_ids"] == builtin_tok("x", add_special_tokens=False)["input_ids"]
    assert lead_ids(builtin_tok, "auto") == [] and lead_ids(builtin_tok, "always") == [builtin_tok.bos_token_id]
    assert lead_ids(llama_style_tok, "auto") == [0] == lead_ids(llama_style_tok, "always")
    assert lead_ids(builtin_tok, "never") == [] == lead_ids(llama_style_tok, "never")


def test_windows_and_prompts_start_as_the_choice_says(builtin_tok):
    by = {bos: Inputs.load(builtin_tok, None, samples=2, bos=bos) for bos in ("auto", "always", "never")}
    bos_id = builtin_tok.bos_token_id
    auto, always = by["auto"].windows(256).ids, by["always"].windows(256).ids
    assert auto.shape == always.shape == (2, 256)
    assert (always[:, 0] == bos_id).all() and (auto[:, 0] != bos_id).all()
    assert (by["never"].windows(256).ids == auto).all()  # this tokenizer adds nothing: auto is never
    # the published passkey prompt under auto is the tokenizer's own encoding of the script's text (YaRN's tokenizer(prompt))
    for bos, lead in (("auto", []), ("always", [bos_id])):
        p = by[bos].prompts(512, "passkey")[0]
        text = PromptFrame().text(published_question(200, 100, int(p.key)), ANSWER_PREFIX)
        assert PromptFrame(bos=bos).ids(builtin_tok, published_question(200, 100, int(p.key)), ANSWER_PREFIX) == \
            lead + builtin_tok(text)["input_ids"]
        assert list(p.ids[:len(lead)]) == lead and (bos == "always" or p.ids[0] != bos_id)


def test_a_chat_rendering_keeps_its_own_bos_under_auto_and_loses_it_under_never(builtin_tok, llama_style_tok):
    ids = [builtin_tok.bos_token_id, 5, 6]
    assert framed(builtin_tok, "auto", ids) == ids == framed(builtin_tok, "always", ids)  # lm-eval's has_bos_prefix
    assert framed(builtin_tok, "never", ids) == [5, 6]
    assert framed(llama_style_tok, "auto", [5, 6]) == [0, 5, 6] and framed(builtin_tok, "auto", [5, 6]) == [5, 6]


def test_always_without_a_bos_token_is_one_line(builtin_tok, monkeypatch):
    class NoBos:
        bos_token_id = None

    with pytest.raises(RopeCliError, match="has no BOS token; pass --bos auto"):
        lead_ids(NoBos(), "always")


def test_the_choice_is_in_the_json_the_caption_and_the_cache_identity():
    runner = CliRunner()
    out = {}
    for bos in ("auto", "always"):
        r = runner.invoke(app, ["ppl", "--len", "128", "--samples", "1", "--method", "none", "--bos", bos, "--json"])
        assert r.exit_code == 0, r.output
        out[bos] = json.loads(r.stdout)
    assert out["auto"]["bos"] == "auto" and out["auto"]["bos_ids"] == [] and out["always"]["bos_ids"] == [1]
    assert out["always"]["results"][0]["nll"] != out["auto"]["results"][0]["nll"]  # a different unit, not a cache hit
    again = json.loads(runner.invoke(app, ["ppl", "--len", "128", "--samples", "1", "--method", "none", "--json"]).stdout)
    assert again["cache"]["hits"] == 1 and again["results"][0]["nll"] == out["auto"]["results"][0]["nll"]
    r = runner.invoke(app, ["ppl", "--len", "128", "--samples", "1", "--method", "none", "--bos", "always"])
    assert "BOS always (<s>)" in " ".join(r.output.split()), r.output
    r = runner.invoke(app, ["ppl", "--len", "128", "--bos", "sometimes"])
    assert r.exit_code != 0 and "Traceback" not in r.output
