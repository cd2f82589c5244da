"""`ropecli export` says beside what it wrote what it exported (method, parameters, k, L, target, the
geometry), and `ropecli verify PATH` reads it: no other flag is needed, for every runtime's export."""

import json

import gguf
import pytest

from ropecli.cli.app import app
from ropecli.export.writers import gguf_origin
from ropecli.models.config import BUILTIN_DIR

from helpers import runner


@pytest.mark.parametrize("to, out, schedule", [
    ("hf", "hf", ["--method", "yarn"]),  # a model folder: the manifest inside it
    ("hf", "block.json", ["--method", "llama3"]),  # a transformers block: the manifest beside it
    ("vllm", "overrides.json", ["--method", "mixed", "--b", "0.7"]),  # vLLM's native ntk
    ("vllm", "longrope.json", ["--method", "yarn"]),  # vLLM's longrope with its mscales
])
def test_export_then_verify_with_no_flags(tmp_path, to, out, schedule):
    target = tmp_path / out
    r = runner.invoke(app, ["export", "--model", str(BUILTIN_DIR), *schedule, "--len", "2048", "--to", to,
                            "--out", str(target)])
    assert r.exit_code == 0, r.output
    manifest = target / "ropecli-export.json" if target.is_dir() else tmp_path / f"{out}.ropecli.json"
    made = json.loads(manifest.read_text())
    assert made["method"] == schedule[1] and made["factor"] == 8 and made["train_len"] == 256 and made["target_len"] == 2048
    ran = to == "hf" and not out.endswith(".json")
    r = runner.invoke(app, ["verify", str(target)] if ran else ["verify", str(target), "--no-run"])
    assert r.exit_code == 0, r.output
    last = r.stdout.strip().splitlines()[-1]
    assert ": OK (" in last if ran else (": OK" not in last and last.endswith("checks pass; not run: "
                                         f"{ {'hf': 'transformers', 'vllm': 'vLLM'}[to]} itself (--no-run)")), r.output
    assert "ropecli-export.json" in r.output or ".ropecli.json" in r.output  # it says what it checked against


def test_export_gguf_then_verify_with_no_flags(builtin_gguf, tmp_path):
    out = tmp_path / "extended.gguf"
    r = runner.invoke(app, ["export", "--model", str(builtin_gguf), "--method", "yarn", "--len", "1024", "--to", "gguf",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "extended.gguf.ropecli.json").is_file()
    r = runner.invoke(app, ["verify", str(out), "--no-run"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == "llamacpp: 5 checks pass; not run: llama.cpp itself (--no-run)"


def test_a_changed_manifest_is_caught_and_a_broken_one_is_one_line(tmp_path):
    target = tmp_path / "o.json"
    assert runner.invoke(app, ["export", "--model", str(BUILTIN_DIR), "--method", "yarn", "--len", "2048", "--to", "hf",
                               "--out", str(target)]).exit_code == 0
    manifest = tmp_path / "o.json.ropecli.json"
    made = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**made, "target_len": 4096, "factor": 16}))  # says another target than the file holds
    r = runner.invoke(app, ["verify", str(target), "--no-run"])
    assert r.exit_code == 1 and "MISMATCH" in r.output
    manifest.write_text(json.dumps({**made, "factor": "two"}))
    r = runner.invoke(app, ["verify", str(target), "--no-run"])
    assert r.exit_code == 1
    line = r.output.strip().splitlines()[-1]
    assert "is not a manifest written by `ropecli export`" in line and "ValueError" not in r.output


def test_vllm_overrides_from_a_gguf_name_the_checkpoint_to_serve(builtin_gguf, tmp_path):
    out = tmp_path / "overrides.json"
    r = runner.invoke(app, ["export", "--model", str(builtin_gguf), "--method", "yarn", "--len", "1024", "--to", "vllm",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "vLLM serves the transformers checkpoint this GGUF was made from" in r.output
    assert "api_server --model HF-CHECKPOINT-OF-" in r.output  # the test GGUF names no source repository
    assert json.loads(out.read_text())["rope_parameters"]["original_max_position_embeddings"] == 256
    r = runner.invoke(app, ["verify", str(out), "--no-run"])
    assert r.exit_code == 0 and r.stdout.strip().splitlines()[-1].startswith("vllm: 6 checks pass; not run:"), r.output


def test_a_gguf_names_its_source_checkpoint(tmp_path):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("general.source.huggingface.repository", "HuggingFaceTB/SmolLM2-135M-Instruct")
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
    w.close()
    assert gguf_origin(path) == "HuggingFaceTB/SmolLM2-135M-Instruct"
