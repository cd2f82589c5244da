"""Issue 60: `export --to transformers --map MAP` writes a folder that plain transformers runs under the map
(`trust_remote_code=True`), with no ropecli import: its logits are ropecli's mapped model's, greedy generation through
the KV cache from below L to past it is one teacher-forced pass, `pipeline` runs it, `verify` reads the map back and
rejects a tampered one."""

import ast
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from architectures import ARCHS, L0, VOCAB, save_arch
from ropecli.cli.app import app
from ropecli.models.mapped_attention import mapped

MAPS = [("none", {}), ("selfextend", {"G": 2, "W": 8}), ("rerope", {"w": 12}), ("leaky-rerope", {"w": 12, "k": 4}),
        ("dca", {"chunk": 24, "local": 4}), ("string", {"S": 20, "W": 4})]
T = 3 * L0  # past every tiny model's L


def spelled(name, params):
    return name + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else "")


def export(model_dir, out, name, params, method="none"):
    r = CliRunner().invoke(app, ["export", "--model", str(model_dir), "--method", method, "--map", spelled(name, params),
                                 "--len", str(T), "--to", "transformers", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def load(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return save_arch(next(a for a in ARCHS if a.name == "llama"), tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize(("name", "params"), MAPS, ids=[m[0] for m in MAPS])
def test_the_folder_is_ropecli_mapped_and_decodes_across_L_as_one_pass(llama_dir, tmp_path, name, params):
    from transformers import AutoModelForCausalLM

    folder = load(export(llama_dir, tmp_path / "out", name, params))
    assert type(folder).__name__ == ("LlamaForCausalLM" if name == "none" else "RopecliMapForCausalLM")  # none: no map
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(0))
    reference = AutoModelForCausalLM.from_pretrained(str(llama_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        got = folder(ids).logits
        with mapped(reference, name, params):
            want = reference(ids).logits
        plain = reference(ids).logits
        out = folder.generate(ids[:, :L0 - 8], max_new_tokens=2 * L0, do_sample=False, min_new_tokens=2 * L0)
        logits = folder(out).logits[0, L0 - 9:-1]
        logits[:, folder.config.eos_token_id] = float("-inf")  # generate holds EOS back for min_new_tokens
        one = logits.argmax(-1)
    assert (got - want).abs().max() < 1e-4, (got - want).abs().max()
    if name != "none":
        assert (got - plain).abs().max() > 1e-2  # the map is on
    assert torch.equal(out[0, L0 - 8:], one)  # every decoded token from below L to 2L past it follows the map


@pytest.mark.parametrize("row", ["gemma3 + linear (v4)", "phi (partial)", "gpt_oss + yarn", "gemma2", "cohere"])
def test_the_folder_maps_the_families(tmp_path, row):
    """Per-layer RoPE, partial and interleaved rotary, sinks, soft-capping: the folder (the model as shipped, Gemma 3's
    linear x4 included, under the map) is ropecli's mapped model."""
    from transformers import AutoModelForCausalLM

    model_dir = save_arch(next(a for a in ARCHS if a.name == row), tmp_path / "model")
    folder = load(export(model_dir, tmp_path / "out", "selfextend", {"G": 2, "W": 8}, method="native"))
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), mapped(reference, "selfextend", {"G": 2, "W": 8}):
        want = reference(ids).logits
    with torch.no_grad():
        got = folder(ids).logits
    assert (got - want).abs().max() < 1e-4, (got - want).abs().max()


def test_pipeline_runs_the_folder_unchanged(llama_dir, tmp_path):
    from transformers import pipeline

    folder = export(llama_dir, tmp_path / "out", "selfextend", {"G": 2, "W": 8})
    generate = pipeline("text-generation", model=str(folder), trust_remote_code=True, dtype=torch.float32)
    text = generate("the quick brown fox " * 12, max_new_tokens=L0, do_sample=False)[0]["generated_text"]
    assert len(text) > len("the quick brown fox " * 12)
    assert type(generate.model).__name__ == "RopecliMapForCausalLM"


def test_verify_reads_the_map_back_and_rejects_another_G(llama_dir, tmp_path):
    folder = export(llama_dir, tmp_path / "out", "selfextend", {"G": 2, "W": 8})
    r = CliRunner().invoke(app, ["verify", str(folder)])
    assert r.exit_code == 0, r.output
    assert "ropecli_map.params.G" in r.output
    cfg = json.loads((folder / "config.json").read_text())
    cfg["ropecli_map"]["params"]["G"] = 4
    (folder / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(app, ["verify", str(folder)])
    assert r.exit_code == 1 and "ropecli_map.params.G" in r.output, r.output


def test_what_cannot_be_served_is_one_line(llama_dir, tmp_path):
    r = CliRunner().invoke(app, ["export", "--model", str(llama_dir), "--method", "none", "--map", "selfextend:G=2,W=8",
                                 "--len", str(T), "--to", "transformers"])
    assert r.exit_code != 0 and "pass --out DIR" in r.output and "Traceback" not in r.output
    mla = save_arch(next(a for a in ARCHS if a.name.startswith("deepseek_v3")), tmp_path / "mla")
    r = CliRunner().invoke(app, ["export", "--model", str(mla), "--method", "none", "--map", "selfextend:G=2,W=8",
                                 "--len", str(T), "--to", "transformers", "--out", str(tmp_path / "o")])
    assert r.exit_code != 0 and "multi-head latent attention" in r.output and "Traceback" not in r.output


def test_the_modeling_file_imports_no_ropecli():
    """What the folder runs is torch and transformers alone: a user without ropecli loads it."""
    source = (Path(__file__).resolve().parent.parent / "ropecli" / "export" / "map_modeling.py").read_text()
    modules = {n.module for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.split(".")[0] == "ropecli" for m in modules), modules
