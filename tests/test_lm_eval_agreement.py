"""lm-evaluation-harness beside ropecli (issue 70): `benchmarks/lm_eval_agreement.py` runs lm-eval's own offline RULER
task (niah_single_1, the noise haystack) through an exported folder and ropecli's builder of the same task on the same
folder, and pairs them. On the built-in model at 2L: both score, the paired interval holds the observed difference, and
what differs in the prompts is stated and checked: ropecli's BOS (lm-eval tokenizes with the tokenizer's defaults, which
add none here) and the haystack's size (lm-eval grows it in steps of 5 lines, so its prompts stop short of the length;
ropecli bisects to the longest that fits). Skipped only where lm-eval or its RULER extras are not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

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
    # what differs, explained: ropecli's BOS is the only difference of the token ids of lm-eval's prompts ...
    assert row["same_token_ids"] + row["differ_by_bos_only"] == row["prompts"]
    # ... and lm-eval's haystack stops short of the length where ropecli's fills it, both leaving the answer's room
    assert max(row["lm_eval_prompt_tokens"]) + 128 <= 512 and max(row["ropecli_prompt_tokens"]) + 128 <= 512
    assert max(row["lm_eval_prompt_tokens"]) < min(row["ropecli_prompt_tokens"])
