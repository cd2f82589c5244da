"""What each harness puts before a text, checked against the harness where it runs here (docs/measurements/bos.md has
the table, each row's source line and the ropecli flag that reproduces it; `ropecli.evaluation.bos_policy`).

- lm-eval's tasks (HFLM.tok_encode, tok_batch_encode) tokenize with the tokenizer's defaults: `--bos auto`.
- lm-eval's rolling perplexity (loglikelihood_rolling: utils.get_rolling_token_windows with prefix_token_id) puts BOS
  (else EOS) before a document's first window, after what the tokenizer adds itself: `--bos always` where the tokenizer
  adds nothing (the built-in model, SmolLM2): `ppl --len N --bos always` on a text of N-1 tokens is lm-eval's rolling
  log-likelihood of it within 1e-4 nats/token (and YaRN's eval/perplexity.py layout of it); the default, auto, is not.
  No flag gives its two BOS where the tokenizer adds one, its EOS where there is no BOS, or its later windows.
- the transformers text-generation pipeline (YaRN's eval/passkey.py, RULER's HF runner) uses the tokenizer's defaults
  in the installed transformers (PR #31747): `--bos auto`; its old default, add_special_tokens=False: `--bos never`.
Skipped where lm-eval is not installed (the pipeline's row runs without it)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from helpers import smollm2_or_skip
from tokenizers import processors
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation.bos_policy import lead_ids
from ropecli.evaluation.data import load_documents, tokenize_documents
from ropecli.models.config import BUILTIN_DIR

TEXT = "What is the pass key? The pass key is"


@pytest.fixture(scope="module")
def builtin_tok():
    return AutoTokenizer.from_pretrained(str(BUILTIN_DIR))


@pytest.fixture(scope="module")
def llama_style_tok():
    """The built-in tokenizer made to add BOS before a text, as Llama's and Gemma's do."""
    tok = AutoTokenizer.from_pretrained(str(BUILTIN_DIR))
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    assert tok(TEXT)["input_ids"] == [1] + tok(TEXT, add_special_tokens=False)["input_ids"]
    return tok


@pytest.fixture(scope="module")
def no_bos_tok():
    """The built-in tokenizer without a BOS token, as Qwen's."""
    tok = AutoTokenizer.from_pretrained(str(BUILTIN_DIR))
    tok.bos_token = None
    assert tok.bos_token_id is None and tok.eos_token_id == 2
    return tok


def own(tok, text: str = TEXT) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def hflm_stand_in(tok):
    """What HFLM's tokenizing methods read, for a causal model loaded as lm-eval loads one by default (add_bos_token
    None, no custom prefix token); prefix_token_id is HFLM's own property on it."""
    from lm_eval.models.huggingface import HFLM

    lm = SimpleNamespace(tokenizer=tok, add_bos_token=None, backend="causal", custom_prefix_token_id=None)
    lm.prefix_token_id = HFLM.prefix_token_id.fget(lm)
    return lm


def test_lm_eval_tasks_tokenize_as_bos_auto(builtin_tok, llama_style_tok):
    """tok_encode (loglikelihood tasks) and tok_batch_encode (generate_until tasks): the tokenizer's own lead."""
    pytest.importorskip("lm_eval")
    from lm_eval.models.huggingface import HFLM

    for tok in (builtin_tok, llama_style_tok):
        lm = hflm_stand_in(tok)
        auto = lead_ids(tok, "auto") + own(tok)
        assert HFLM.tok_encode(lm, TEXT) == auto
        ids, _ = HFLM.tok_batch_encode(lm, [TEXT])
        assert ids[0].tolist() == auto
    assert HFLM.tok_encode(hflm_stand_in(builtin_tok), TEXT) == own(builtin_tok)  # the built-in tokenizer: nothing
    assert HFLM.tok_encode(hflm_stand_in(llama_style_tok), TEXT) == [1] + own(llama_style_tok)  # Llama-style: BOS


def rolling(tok, text: str, max_len: int) -> list[tuple[list[int], list[int]]]:
    """lm-eval's loglikelihood_rolling windows of `text` (huggingface.py: tok_encode, then get_rolling_token_windows
    with prefix_token_id and context_len 1, made disjoint): (context, scored tokens) pairs."""
    from lm_eval import utils
    from lm_eval.models.huggingface import HFLM

    lm = hflm_stand_in(tok)
    windows = utils.get_rolling_token_windows(token_list=HFLM.tok_encode(lm, text), prefix_token=lm.prefix_token_id,
                                              max_seq_len=max_len, context_len=1)
    return [utils.make_disjoint_window(w) for w in windows]


def test_lm_eval_rolling_windows_start_with_bos_after_the_tokenizers_own(builtin_tok, llama_style_tok, no_bos_tok):
    pytest.importorskip("lm_eval")
    text = " ".join([TEXT] * 20)
    n = 64
    ids = own(builtin_tok, text)
    assert len(ids) > 2 * n
    (ctx, scored), (ctx2, scored2), *_ = rolling(builtin_tok, text, n)
    # the first window: BOS, then the text, every text token scored: what --bos always feeds and scores
    assert ctx == lead_ids(builtin_tok, "always") == [builtin_tok.bos_token_id] and scored == ids[:n]
    assert (ctx + scored)[:n] == lead_ids(builtin_tok, "always") + ids[:n - 1]  # the model's input: a --len n window
    assert lead_ids(builtin_tok, "auto") == []  # the default feeds the text alone, and cannot score its first token
    # later windows: conditioned on the one token before them, no BOS (no ropecli flag: each window has its lead)
    assert ctx2 == [ids[n - 1]] and scored2 == ids[n:2 * n]
    # a tokenizer that adds BOS itself: lm-eval's prefix, then the tokenizer's BOS, scored (no ropecli flag)
    (ctx, scored), *_ = rolling(llama_style_tok, text, n)
    assert ctx == [1] and scored[:2] == [1, ids[0]]
    assert lead_ids(llama_style_tok, "always") == lead_ids(llama_style_tok, "auto") == [1]  # ropecli: one BOS
    # no BOS token: lm-eval puts EOS first; --bos always refuses
    (ctx, _), *_ = rolling(no_bos_tok, text, n)
    assert ctx == [no_bos_tok.eos_token_id]
    with pytest.raises(RopeCliError, match="has no BOS token"):
        lead_ids(no_bos_tok, "always")


def test_the_text_generation_pipeline_uses_the_tokenizers_defaults(builtin_tok, llama_style_tok):
    """YaRN's eval/passkey.py:92-93/40 and RULER's model_wrappers.py:69: `pipe(prompt, ...)`. In the installed
    transformers (PR #31747) the prompt is the tokenizer's default encoding, --bos auto; before it the pipeline passed
    add_special_tokens=False, --bos never (what YaRN's 2023 passkey tables ran)."""
    model = AutoModelForCausalLM.from_pretrained(str(BUILTIN_DIR), dtype=torch.float32)
    seen = []
    model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs["input_ids"][0].tolist()),
                                    with_kwargs=True)
    for tok in (builtin_tok, llama_style_tok):
        pipe = pipeline("text-generation", model=model, tokenizer=tok, pad_token_id=tok.eos_token_id)
        for kwargs, bos in (({}, "auto"), ({"add_special_tokens": False}, "never")):
            seen.clear()
            pipe(TEXT, num_return_sequences=1, max_new_tokens=1, do_sample=False, **kwargs)
            assert seen[0] == lead_ids(tok, bos) + own(tok), (tok.backend_tokenizer.post_processor, kwargs)
    assert lead_ids(llama_style_tok, "auto") == [1] and lead_ids(builtin_tok, "auto") == []
    # RULER's HF fallback (model_wrappers.py:62) and LongBench's pred.py:71: `tokenizer(prompt)`, --bos auto
    for tok in (builtin_tok, llama_style_tok):
        assert tok(TEXT)["input_ids"] == lead_ids(tok, "auto") + own(tok)


# --- the numbers: ropecli's ppl beside lm-eval's rolling perplexity of the same text ---

MODELS = {"builtin": 256, "smollm2": 512}  # --len: the built-in model's L; SmolLM2 at 512 keeps a CPU run to minutes


def text_of(tok, n: int, start: int = 1000) -> str:
    """A text of the first held-out play whose own tokens are exactly n tokens (the first that decodes and encodes
    back to the same ids, from token `start` on)."""
    docs, _ = load_documents(None)
    ids = tokenize_documents(docs, tok)[0]
    for s in range(start, start + 200):
        text = tok.decode(ids[s:s + n])
        if own(tok, text) == ids[s:s + n]:
            return text
    raise AssertionError("no text of the play encodes back to its ids")


def ropecli_window_nll(model: str, text: str, length: int, bos: str | None, tmp_path) -> tuple[float, dict]:
    """ropecli's ppl of `text` as its one window of `length` tokens: (mean NLL per scored token, the JSON head)."""
    path = tmp_path / f"doc-{bos}.txt"
    path.write_text(text)
    args = ["ppl", "--model", model, "--data", str(path), "--len", str(length), "--samples", "1", "--method", "none",
            "--json"] + (["--bos", bos] if bos else [])
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["results"][0]["tokens"] == length - 1
    return out["results"][0]["window_nll"][0], out


def load_lm(model: str, max_length: int):
    """lm-eval's HFLM on the same weights ropecli loads (fp32, CPU)."""
    from lm_eval.models.huggingface import HFLM

    if model == "smollm2":
        path = smollm2_or_skip()
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        kw = {"pretrained": str(path.parent), "gguf_file": path.name, "tokenizer": tok}
    else:
        tok = AutoTokenizer.from_pretrained(str(BUILTIN_DIR))
        kw = {"pretrained": str(BUILTIN_DIR)}
    return HFLM(**kw, device="cpu", batch_size=1, dtype="float32", max_length=max_length), tok


def lm_eval_rolling_nll(lm, text: str) -> tuple[float, int]:
    """lm-eval's loglikelihood_rolling of `text` (wikitext's request type): (-log-likelihood in nats, tokens scored)."""
    from lm_eval.api.instance import Instance

    ll = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)], disable_tqdm=True)[0]
    return -ll, len(lm.tok_encode(text))


def yarn_perplexity_nll(model, tok, text: str, max_length: int) -> float:
    """YaRN's eval/perplexity.py (995db5b) with --truncate on one text: tokenized without special tokens (106-112),
    max_length - 1 of them (24-37), BOS before them (55-59; add_start_token since the tokenizer has one, 153), every
    text token a target (61-62), HF's mean loss (63-66)."""
    ids = own(tok, text)[:max_length - 1]
    input_ids = torch.tensor([[tok.bos_token_id] + ids])
    target_ids = input_ids.clone()
    target_ids[:, :-len(ids)] = -100
    with torch.no_grad():
        return float(model(input_ids, labels=target_ids).loss)


def token_nlls(model, ids: list[int]) -> list[float]:
    """-log p of each token of `ids` after the first, from one forward pass."""
    x = torch.tensor([ids])
    with torch.no_grad():
        logits = model(x).logits[0, :-1].float()
    return torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="none").tolist()


@pytest.mark.parametrize("model", [m if m == "builtin" else pytest.param(m, marks=pytest.mark.slow) for m in MODELS])
def test_ppl_with_bos_always_is_lm_evals_rolling_perplexity(model, tmp_path):
    """`ppl --len N --bos always` on a text of N-1 tokens: BOS and the text, every text token scored; lm-eval's
    loglikelihood_rolling puts its prefix_token_id (BOS) before the same tokens and scores the same ones: equal within
    1e-4 nats/token (measured: under 2e-7), and YaRN's perplexity.py layout too. The default (auto, nothing before
    the text) on a text of N tokens scores N-1 tokens after the first, lm-eval all N after BOS: about 0.01 apart."""
    pytest.importorskip("lm_eval")
    length = MODELS[model]
    lm, tok = load_lm(model, length)
    assert tok.bos_token_id is not None and lead_ids(tok, "auto") == []  # a tokenizer that adds nothing itself

    text = text_of(tok, length - 1)
    theirs, n = lm_eval_rolling_nll(lm, text)
    ours, head = ropecli_window_nll(model, text, length, "always", tmp_path)
    yarn = yarn_perplexity_nll(lm.model, tok, text, length)
    print(f"\n{model} --len {length} --bos always: ropecli {ours:.8f}, lm-eval {theirs / n:.8f} ({n} tokens), "
          f"YaRN perplexity.py {yarn:.8f} nats/token")
    assert head["bos_ids"] == [tok.bos_token_id] and n == length - 1
    assert ours == pytest.approx(theirs / n, abs=1e-4) and yarn == pytest.approx(theirs / n, abs=1e-4)

    text = text_of(tok, length)
    theirs, n = lm_eval_rolling_nll(lm, text)
    ours, head = ropecli_window_nll(model, text, length, None, tmp_path)
    print(f"{model} --len {length} default (--bos {head['bos']}): ropecli {ours:.8f}, lm-eval {theirs / n:.8f} "
          f"({n} tokens)")
    assert head["bos"] == "auto" and head["bos_ids"] == [] and n == length
    with_bos, alone = token_nlls(lm.model, [tok.bos_token_id] + own(tok, text)), token_nlls(lm.model, own(tok, text))
    assert sum(alone) / len(alone) == pytest.approx(ours, abs=1e-4) and sum(with_bos) == pytest.approx(theirs, abs=1e-2)
    print(f"  what differs: lm-eval scores the first token after BOS alone ({with_bos[0]:.2f} nats); the second "
          f"token: {with_bos[1]:.2f} after BOS, {alone[0]:.2f} without")
    assert abs(ours - theirs / n) > 1e-3  # the default is not lm-eval's rolling perplexity (docs/measurements/bos.md)
