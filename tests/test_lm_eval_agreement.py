"""lm-evaluation-harness beside ropecli: `benchmarks/lm_eval_agreement.py` runs lm-eval's own offline RULER
task (niah_single_1, the noise haystack) through an exported folder and ropecli's builder of the same task on the same
folder, and pairs them. On the built-in model at 2L: both score, the paired interval holds the observed difference, and
what differs in the prompts is stated and checked: nothing in the token ids of lm-eval's prompts (--bos auto, the
default, tokenizes as lm-eval does; --bos always would add a BOS, which the paired row allows for) and the haystack's size (lm-eval grows it in steps of 5 lines, so its prompts stop short of the length;
ropecli bisects to the longest that fits). Skipped only where lm-eval or its RULER extras are not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from ropecli.evaluation.chat_template import PromptFrame
from ropecli.models.config import BUILTIN_DIR

from helpers import smollm2_or_skip

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "lm_eval_agreement.py"


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("lm_eval")
    pytest.importorskip("wonderwords")
    pytest.importorskip("nltk")
    spec = importlib.util.spec_from_file_location("lm_eval_agreement", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["lm_eval_agreement"] = module
    spec.loader.exec_module(module)
    return module


def test_lm_eval_and_ropecli_score_the_same_task_through_one_folder(bench, tmp_path):
    folder = bench.export("builtin", 512, tmp_path, "yarn")
    row = bench.agree(folder, 512, 2, "none", "builtin", max_new=32)  # 32 greedy tokens: the mechanics, in seconds
    assert row["prompts"] == 2 and len(row["ropecli_scores"]) == 2
    for key in ("lm_eval", "ropecli_on_lm_eval_prompts", "ropecli"):
        assert 0.0 <= row[key] <= 1.0
    d, lo, hi = row["paired_difference"]
    assert d == pytest.approx(row["lm_eval"] - row["ropecli_on_lm_eval_prompts"]) and lo <= d <= hi
    du, lou, hiu = row["difference"]
    assert du == pytest.approx(row["lm_eval"] - row["ropecli"]) and lou <= du <= hiu
    # what differs, explained: the token ids of lm-eval's prompts are ropecli's own under --bos auto ...
    assert row["same_token_ids"] == row["prompts"]
    # ... and lm-eval's haystack stops short of the length where ropecli's fills it, both leaving the answer's room
    assert max(row["lm_eval_prompt_tokens"]) + 128 <= 512 and max(row["ropecli_prompt_tokens"]) + 128 <= 512
    assert max(row["lm_eval_prompt_tokens"]) < min(row["ropecli_prompt_tokens"])


def lm_eval_niah_contexts(tokenizer_dir: str, length: int, count: int) -> list:
    """lm-eval's own niah_single_1 instances at `length` (its RULER generator sized by the tokenizer in `tokenizer_dir`):
    the documents and the contexts its generate_until requests carry."""
    from lm_eval.tasks import TaskManager, get_task_dict  # optional (.[lmeval]): skips a test, not the module

    task = get_task_dict(["niah_single_1"], TaskManager(metadata={"max_seq_lengths": [length],
                                                                  "tokenizer": tokenizer_dir}))["niah_single_1"]
    task.build_all_requests(limit=count, rank=0, world_size=1)
    return [(inst.doc, inst.args[0]) for inst in task.instances]


def lm_eval_ids(tokenizer, context: str) -> list[int]:
    """HFLM.tok_encode as lm-eval runs it for a causal model loaded with add_bos_token=None (its default since 0.4.9.2),
    on a stand-in that holds only what the method reads (no model loaded)."""
    from lm_eval.models.huggingface import HFLM  # optional (.[lmeval])

    stand_in = SimpleNamespace(tokenizer=tokenizer, add_bos_token=None, prefix_token_id=tokenizer.bos_token_id)
    return HFLM.tok_encode(stand_in, context)


@pytest.mark.parametrize("model", ["builtin", "smollm2"])
def test_bos_auto_gives_lm_evals_own_token_ids_for_its_niah_prompts(bench, model, tmp_path):
    """Ropecli's framing of lm-eval's niah prompts under --bos auto (the default) is lm-eval's own token ids;
    under --bos always (ropecli before --bos) each differs by exactly the BOS in front."""
    if model == "smollm2":
        path = smollm2_or_skip()
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    else:
        tok = AutoTokenizer.from_pretrained(str(BUILTIN_DIR))
    tok.save_pretrained(tmp_path / "tokenizer")  # lm-eval's generator loads a tokenizer folder by path
    rows = lm_eval_niah_contexts(str(tmp_path / "tokenizer"), 1024, 3)
    assert len(rows) == 3
    for doc, context in rows:
        theirs = lm_eval_ids(tok, context)
        assert PromptFrame(bos="auto").ids(tok, doc["input"], doc["gen_prefix"]) == theirs
        assert PromptFrame(bos="always").ids(tok, doc["input"], doc["gen_prefix"]) == [tok.bos_token_id] + theirs
