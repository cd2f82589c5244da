import json
import os

import pytest
import torch

from ropecli.backends.load import load_model
from ropecli.models.config import BUILTIN_DIR

from gguf_models import write_llama_gguf
from tiny_models import save_tiny

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# `python -m pytest -m quick` (README, Tests): these files run in about two minutes on 2 cores (timed together with
# --durations; the error-rate simulations of test_verdicts, test_agreement and test_proportions are left out)
QUICK = {"test_cli_analysis.py", "test_schedule_identities.py", "test_schedules_oracle.py", "test_rope_blocks.py",
         "test_user_errors.py", "test_writers.py", "test_design.py", "test_help_and_imports.py", "test_finite_options.py",
         "test_estimand.py", "test_model_config.py", "test_runtimes.py", "test_p_rope.py", "test_fuzz_inputs.py",
         "test_architecture.py", "test_docs_lists.py"}


# The files whose tests take longest (docs/measurements/suite.md), run first: with the suite split over two workers by
# file (pyproject.toml: -n 2 --dist loadfile), a long file started last would leave one worker idle at the end
LONGEST_FIRST = ["test_vllm_engine.py", "test_vllm_backend.py", "test_distributed.py", "test_readme.py", "test_advise_verdicts.py",
                 "test_verdicts.py", "test_racing.py", "test_map_folder_serving.py", "test_architecture_matrix.py",
                 "test_advise.py", "test_map_folder.py", "test_lm_eval_agreement.py", "test_ruler.py"]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in QUICK:
            item.add_marker(pytest.mark.quick)
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: each file's own order kept


def pytest_configure(config):
    """Under pytest-xdist each worker computes on one thread: two workers on two cores, neither oversubscribed (a
    torch op on two threads while the other worker's does too runs several times slower)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own evaluation cache, never the user's."""
    monkeypatch.setenv("ROPECLI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ROPECLI_DEBUG", raising=False)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random-weight LLaMA saved as a transformers folder (a test module may define its own)."""
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load_model(tiny_dir)


@pytest.fixture()
def text_file(tmp_path):
    p = tmp_path / "docs.txt"
    p.write_text(" ".join(f"Line {i} of a long plain text about nothing in particular." for i in range(200)))
    return str(p)


@pytest.fixture(scope="session")
def builtin():
    """The built-in model (L = 256) in fp32 on the CPU, loaded once for the session: tests read it, never change it
    (a map or a schedule is applied in a context that restores it)."""
    return load_model(None, device="cpu", dtype="fp32")


@pytest.fixture(scope="session")
def builtin_gguf(tmp_path_factory, builtin):
    """The built-in model (L = 256, d = 64) as an F32 llama GGUF with its byte-level BPE vocabulary:
    a GGUF that llama.cpp loads, written in-process (no download)."""
    path = tmp_path_factory.mktemp("gguf") / "builtin.gguf"
    write_llama_gguf(builtin.model, path, tokenizer_json=BUILTIN_DIR / "tokenizer.json")
    return path


def hamlet_jsonl(path, repeats: int, count: int) -> str:
    """`count` JSONL documents of Hamlet's line said `repeats` times (44 characters each: a char tokenizer's tokens),
    each starting one character later."""
    lines = [json.dumps({"text": ("To be, or not to be, that is the question. " * repeats)[i:] + f" doc {i}"})
             for i in range(count)]
    path.write_text("\n".join(lines))
    return str(path)


@pytest.fixture()
def jsonl_file(tmp_path):
    """Four documents of ~530 characters each, as JSONL."""
    return hamlet_jsonl(tmp_path / "docs.jsonl", 12, 4)


@pytest.fixture()
def long_text_file(tmp_path):
    """Six documents of ~1,800 characters each (a tiny model's char tokenizer: ~1,800 tokens), as JSONL."""
    return hamlet_jsonl(tmp_path / "docs.jsonl", 40, 6)
