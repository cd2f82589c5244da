"""passkey --score generate: the published passkey scored as its scripts score it (jquesnelle/yarn
eval/passkey.py `test_model`: 10 new tokens, the first run of digits read as an integer and compared with the key) beside
ropecli's teacher-forced score; both in the JSON and the table. On SmolLM2 within L, ropecli's generated verdicts are
those of the script's own pipeline on the same prompt text."""

from __future__ import annotations

import json
import re

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
from typer.testing import CliRunner

from ropecli.backends.backend import TransformersBackend
from ropecli.cli.app import app
from ropecli.evaluation.passkey import make_published_samples
from ropecli.evaluation.ruler.answer_scoring import GENERATED_TOKENS, published_match

from helpers import smollm2_or_skip

RUN = ["passkey", "--len", "256", "--method", "none", "--depths", "0,1", "--prompts", "2", "--samples", "1", "--json"]


def test_the_published_rule_reads_the_first_integer():
    assert published_match("\n4711", "4711") and published_match(" 4711. Remember", "4711")
    assert not published_match("47110", "4711") and not published_match("no key here", "4711")
    assert published_match("04711", "4711")  # int() of the digits, as the script compares
    assert not published_match("The pass key is 12. 4711", "4711")  # only the first run of digits counts


@pytest.mark.parametrize("said, right", [("\n{key}", True), ("{key}0", False), (" {key}.", True)])
def test_generate_scores_what_the_model_said_as_the_scripts_do(monkeypatch, said, right):
    """A model whose greedy output is "\\n4711" retrieves the key by the published rule, "47110" does not, whatever the
    teacher-forced score says: the stand-in `greedy` reads the key from the prompt it is given."""
    asked = []

    def greedy(self, ids, max_new):
        key = re.search(r"The pass key is (\d+)\.", self.tokenizer.decode(list(ids))).group(1)
        asked.append((max_new, said.format(key=key)))
        return said.format(key=key)

    monkeypatch.setattr(TransformersBackend, "greedy", greedy)
    runner = CliRunner()
    plain = json.loads(runner.invoke(app, RUN).stdout)
    r = runner.invoke(app, [*RUN, "--score", "generate"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    res, before = out["results"][0], plain["results"][0]
    assert out["score"] == "generate" and [n for n, _ in asked] == [GENERATED_TOKENS] * 4  # 2 depths x 2 prompts
    assert res["prompt_generated"] == [right] * 4 and res["generated_accuracy"] == float(right)
    assert res["prompt_said"] == [text for _, text in asked]
    assert res["prompt_correct"] == before["prompt_correct"] and res["accuracy"] == before["accuracy"]  # teacher-forced kept
    assert "generated_accuracy" not in before or before["generated_accuracy"] is None
    # (`asked`: the cached teacher-forced prompts lacked the generation, so each ran again; the third run is all cached)
    shown = runner.invoke(app, [*RUN[:-1], "--score", "generate"]).output
    assert len(asked) == 4 and "generated" in shown and f"{sum(a == right for a in before['prompt_correct'])}/4" in shown


def test_on_smollm2_within_L_the_verdicts_are_the_scripts_own():
    """SmolLM2 at 1,024 tokens: each prompt through YaRN's test_model (transformers' text-generation pipeline, 10 new
    tokens, greedy) gives the text and the verdict ropecli's --score generate recorded."""
    path = smollm2_or_skip()
    r = CliRunner().invoke(app, ["passkey", "--model", "smollm2", "--len", "1024", "--method", "none", "--depths", "0.2,0.8",
                                 "--prompts", "1", "--samples", "1", "--score", "generate", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)["results"][0]
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype="float32").eval()
    pipe = pipeline("text-generation", model=model, tokenizer=tok, pad_token_id=tok.eos_token_id)
    samples = [s for row in make_published_samples(tok, 1024, [0.2, 0.8], 1, 0) for s in row]
    for i, s in enumerate(samples):
        prompt_text = tok.decode(list(s.ids[:s.answer_start]))
        assert tok(prompt_text)["input_ids"] == list(s.ids[:s.answer_start])  # the script's tokenization (BOS auto)
        response = pipe(prompt_text, num_return_sequences=1, max_new_tokens=10, do_sample=False)[0]["generated_text"][len(prompt_text):]
        try:  # test_model, as published
            answer = int(re.search(r"\d+", response).group())
        except AttributeError:
            answer = response[:20]
        assert response == res["prompt_said"][i]
        assert (answer == int(s.key)) == res["prompt_generated"][i]
