"""The passkey papers report: `ropecli passkey` builds the landmark-attention prompt byte for byte as YaRN's
`eval/passkey.py:generate_prompt` does (jquesnelle/yarn @995db5b, transliterated below with its two random draws
handed in), token for token on the built-in tokenizer; ropecli's real-text prompt runs as `passkey-text`, and its
results cached under the old name serve it, never the published one."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

import ropecli
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation import passkey
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.cache_migrations import respelled
from ropecli.evaluation.passkey import FINAL_QUESTION, GARBAGE_INF, answer_tokens, published_prompt, published_sample

BUILTIN = Path(ropecli.__file__).parent / "builtin_model"


def yarn_generate_prompt(n_garbage):
    """jquesnelle/yarn eval/passkey.py:generate_prompt, verbatim (the source's own comment: from
    epfml/landmark-attention llama/run_test.py)."""
    n_garbage_prefix = random.randint(0, n_garbage)
    n_garbage_suffix = n_garbage - n_garbage_prefix

    task_description = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you about the important information there."
    garbage = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
    garbage_inf = " ".join([garbage] * 10000)
    assert len(garbage_inf) >= n_garbage
    garbage_prefix = garbage_inf[:n_garbage_prefix]
    garbage_suffix = garbage_inf[:n_garbage_suffix]
    pass_key = random.randint(1, 50000)
    information_line = f"The pass key is {pass_key}. Remember it. {pass_key} is the pass key."
    final_question = "What is the pass key? The pass key is"
    lines = [
        task_description,
        garbage_prefix,
        information_line,
        garbage_suffix,
        final_question
    ]
    return "\n".join(lines), pass_key


def yarn_with(monkeypatch, n_garbage: int, n_prefix: int, key: int) -> str:
    """The source's prompt with its draws fixed: randint(0, n_garbage) -> n_prefix, then randint(1, 50000) -> key."""
    draws = iter([((0, n_garbage), n_prefix), ((1, 50000), key)])

    def randint(a, b):
        (want, value) = next(draws)
        assert (a, b) == want
        return value

    monkeypatch.setattr(random, "randint", randint)
    text, got = yarn_generate_prompt(n_garbage)
    assert got == key
    return text


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(BUILTIN))


@pytest.mark.parametrize("n_garbage, n_prefix, key", [(0, 0, 1), (500, 0, 50000), (500, 500, 7), (4321, 1234, 31337),
                                                       (899999, 450000, 12345)])
def test_the_prompt_is_yarns_byte_for_byte(monkeypatch, n_garbage, n_prefix, key):
    assert published_prompt(n_garbage, n_prefix, key) == yarn_with(monkeypatch, n_garbage, n_prefix, key)


@pytest.mark.parametrize("length, depth", [(256, 0.0), (512, 0.5), (1024, 1.0), (2048, 0.25)])
def test_a_sample_is_yarns_prompt_token_for_token_and_the_longest_that_fits(monkeypatch, tok, length, depth):
    """The source's prompt as its script tokenizes it (`tokenizer(prompt)`: --bos auto, no BOS from this tokenizer) + the
    answer " K": the ids ropecli scores, at most --len tokens, and one more character of filler would not fit."""
    key = 4242
    s = published_sample(tok, length, depth, key)
    text = tok.decode(s.ids[:s.answer_start])
    n_garbage = len(text) - len(yarn_with(monkeypatch, 0, 0, key))  # the filler's characters, both parts
    assert 0 < n_garbage < len(GARBAGE_INF)
    ids = tok(yarn_with(monkeypatch, n_garbage, round(depth * n_garbage), key))["input_ids"]
    answer = answer_tokens(tok, str(key), FINAL_QUESTION)[1]
    assert list(s.ids) == ids + answer and s.answer_start == len(ids) and len(s.ids) <= length
    assert tok.decode(answer).strip() == str(key)
    longer = tok(yarn_with(monkeypatch, n_garbage + 1, round(depth * (n_garbage + 1)), key), add_special_tokens=False)
    assert len(longer["input_ids"]) + len(answer) > length


def test_passkey_text_reads_the_cache_of_the_old_name_and_passkey_does_not(tmp_path):
    """Entries stored when the real-text prompt was called "passkey" serve passkey-text (and are stored under its
    name); the published passkey's keys carry its prompt, so they never find them."""
    cache = EvalCache(tmp_path)
    old = {"model": "m", "len": 128, "metric": "passkey", "method": "none", "unit": "abc"}
    cache.put(old, {"value": [1.0, 0.25], "seconds": 0.5})
    text = {**old, "metric": "passkey-text"}
    assert respelled(cache, [text], [0], True) == {0: ((1.0, 0.25), 0.5)}
    assert cache.get(text) is not None  # stored under today's name
    assert respelled(cache, [{**old, "prompt": "landmark"}], [0], True) == {}


def test_the_commands_name_the_variant():
    """`ropecli passkey` says it ran the published prompt, `--text` the real-text one; compare's columns and the
    JSON name the metric."""
    run = lambda *a: CliRunner().invoke(app, [str(x) for x in a])  # noqa: E731
    common = ["--model", "builtin", "--len", "256", "--method", "none", "--samples", "1", "--depths", "0.5"]
    r = run("passkey", *common)
    assert r.exit_code == 0 and "the published prompt" in " ".join(r.output.split()), r.output
    r = run("passkey", *common, "--text", "--json")
    assert r.exit_code == 0 and {x["metric"] for x in json.loads(r.stdout)["results"]} == {"passkey-text"}, r.output
    r = run("compare", *common, "--metric", "passkey,passkey-text")
    assert r.exit_code == 0 and "passkey 256" in r.output and "passkey-text 256" in r.output, r.output


def test_a_length_past_the_sources_filler_is_one_line_not_a_shorter_prompt(monkeypatch, tok):
    """The source's filler is 10,000 sentences (it asserts the prompt fits in them): a --len beyond it is refused,
    never answered with a shorter prompt recorded at that length (here the filler cut to 2,000 characters)."""
    monkeypatch.setattr(passkey, "GARBAGE_INF", passkey.GARBAGE_INF[:2000])
    assert len(passkey.published_sample(tok, 256, 0.5, 7).ids) <= 256  # within it: as before
    with pytest.raises(RopeCliError, match="longer than the published passkey prompt can be"):
        passkey.published_sample(tok, 4096, 0.5, 7)
