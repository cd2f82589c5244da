"""One record per runtime (`ropecli.export.runtimes`): one spelling in flags, JSON and tables; a runtime is one module;
each one's artefact written, read back by `verify` and, where the runtime is installed, run."""

import ast
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import ropecli.export.runtimes as runtimes
from ropecli.backends.load import load_model
from ropecli.errors import RopeCliError
from ropecli.export import registry
from ropecli.export.installed import too_old
from ropecli.export.plan import runtime_behaviour
from ropecli.export.registry import names, record, records, runtimes_markdown
from ropecli.export.runtimes.vllm import dynamic_factors
from ropecli.export.served import decode_segments, served
from ropecli.models.config import BUILTIN_DIR, read_rope_config
from ropecli.spec import make_spec

from gguf_models import write_llama_gguf
from helpers import run

ROOT = Path(__file__).resolve().parent.parent
NAMES = ["transformers", "vllm", "llamacpp", "sglang", "ollama"]



def test_the_records_and_one_spelling_everywhere(tmp_path):
    """`ropecli runtimes --json` lists the five by their one name; every alias is accepted by --to and --runtime and
    comes back as the name in JSON and tables; an unknown word is one line naming the choices."""
    out = json.loads(run("runtimes", "--json").stdout)
    assert [r["name"] for r in out] == NAMES
    assert all(r["versions"] and all(v["source"] for v in r["versions"]) for r in out)  # cited
    for alias, name in (("hf", "transformers"), ("transformers", "transformers"), ("vllm", "vllm"), ("sglang", "sglang")):
        r = run("export", "--model", "builtin", "--method", "yarn", "--len", "1024", "--to", alias, "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["runtime"] == name, r.output
    r = run("export", "--method", "yarn", "--len", "1024", "--to", "vlm")
    assert r.exit_code == 2 and "--to vlm: choose from " + ", ".join(NAMES) in " ".join(r.output.split())
    r = run("compare", "--method", "yarn", "--len", "512", "--samples", "2", "--workload", "256:0.5,512:0.5",
            "--runtime", "hf,gguf,llama.cpp", "--json")
    assert list(json.loads(r.stdout)["serving"]["runtimes"]) == ["transformers", "llamacpp"]
    table = run("compare", "--method", "yarn", "--len", "512", "--samples", "2", "--workload", "256:0.5,512:0.5").output
    assert re.findall(r"served by (\S+)", table) == ["transformers", "vllm", "llamacpp"]
    assert re.findall(r"^(\S+): best", table, flags=re.M) == ["transformers", "vllm", "llamacpp"]


def code_words(path: Path) -> str:
    """A module's code: its names and string literals, without docstrings and comments (which may name anything)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    words = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
             and id(n) not in docstrings]
    words += [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)] + [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    return " ".join(words)


def test_sglang_and_ollama_live_in_one_module_each():
    """Adding a runtime is one module and one record: no other source file's code names these two."""
    named = [p.relative_to(ROOT) for p in (ROOT / "ropecli").rglob("*.py")
             if re.search(r"sglang|ollama", code_words(p), flags=re.I) and p.parent.name != "runtimes"]
    assert named == [], named
    assert {p.stem for p in (ROOT / "ropecli" / "export" / "runtimes").glob("*.py")} >= {"sglang", "ollama"}


def test_a_new_runtime_is_one_module(tmp_path, monkeypatch):
    """A module with a RECORD, `write`, `read_back` and `claims`, dropped into the package, is a runtime: exported
    to, listed, read back by verify (the served rule follows its record)."""
    pkg = tmp_path / "extra"
    pkg.mkdir()
    (pkg / "toyrt.py").write_text('''
from ropecli.export.runtimes.record import AT_START_UP, Runtime, Version
RECORD = Runtime(name="toyrt", label="Toy", artefact="the vLLM block", reads="it", at_length="fixed",
                 decoding="fixed", rule=AT_START_UP, serves_dynamic=False, aliases=("toy",),
                 versions=(Version("", "everything", "toyrt.py: write"),))

def write(spec, geom, target, out, **kw):
    from ropecli.export.runtimes import vllm
    return vllm.write(spec, geom, target, out, **kw)

def read_back(target, exp):
    from ropecli.export.runtimes.vllm import read_back as vllm_read_back
    return vllm_read_back(target, exp)

def claims(path):
    return False
''')
    monkeypatch.setattr(runtimes, "__path__", [*runtimes.__path__, str(pkg)])
    monkeypatch.setitem(sys.modules, "ropecli.export.runtimes.toyrt", None)
    del sys.modules["ropecli.export.runtimes.toyrt"]
    registry.records.cache_clear()
    try:
        assert "toyrt" in registry.names() and registry.canonical("toy") == "toyrt"
        out = tmp_path / "toy.json"
        r = run("export", "--model", "builtin", "--method", "yarn", "--len", "1024", "--to", "toy", "--out", out)
        assert r.exit_code == 0, r.output
        r = run("verify", out, "--json")
        assert r.exit_code == 0 and json.loads(r.stdout)["runtime"] == "toyrt", r.output
        assert served(registry.record("toy"), make_spec("dynamic"), 512, read_rope_config("builtin"), 4.0).spec is None
    finally:
        registry.records.cache_clear()
        sys.modules.pop("ropecli.export.runtimes.toyrt", None)


def test_versions_say_when_the_installed_runtime_is_too_old():
    vllm, transformers = record("vllm"), record("transformers")
    lines = too_old(vllm, "0.11.0")
    assert any(">=0.11.1" in line and "per batch" in line for line in lines)  # PR #27431's rule, and what came before
    assert any(">=0.22.0" in line and "max_trained_positions" in line for line in lines)
    assert too_old(vllm, "0.22.0") == []
    assert too_old(transformers, "4.40.0") and too_old(transformers, "5.24.0") == []


def test_export_and_verify_name_the_versions(tmp_path):
    out = tmp_path / "o.json"
    r = run("export", "--model", "builtin", "--method", "yarn", "--len", "1024", "--to", "vllm", "--out", out, "--json")
    assert "works with vLLM >=0.11.1, >=0.22.0" in " ".join(json.loads(r.stdout)["lines"])
    assert json.loads(out.with_name("o.json.ropecli.json").read_text())["works_with"][0]["source"].startswith("vLLM PR #28542")
    notes = json.loads(run("verify", out, "--json").stdout)["notes"]
    assert any(n.startswith("works with vLLM >=0.11.1") for n in notes)


def test_vllm_dynamic_ntk_is_the_same_base_before_and_after_its_fix(tmp_path):
    """vLLM PR #41277 changed the dynamic NTK formula; the block ropecli writes gives transformers' dynamic at k*L
    in both (k' = k^2 - k + 1), and verify reads it back."""
    out = tmp_path / "dyn.json"
    assert run("export", "--model", "builtin", "--method", "dynamic", "--len", "1024", "--to", "vllm", "--out", out).exit_code == 0
    block = json.loads(out.read_text())
    p = block["rope_parameters"]
    assert block["max_position_embeddings"] == 1024 and p["max_trained_positions"] == 256
    new = dynamic_factors(64, p["factor"], block["max_position_embeddings"], p["max_trained_positions"])
    old = dynamic_factors(64, p["factor"], block["max_position_embeddings"], before_41277=True)
    assert np.allclose(new, old) and np.allclose(new, 13.0 ** (np.arange(32) * 2 / 62))  # k = 4: k' = 13
    assert np.allclose(dynamic_factors(64, 4.0, 1024), 1.0)  # without max_trained_positions: unscaled in vLLM >= 0.22
    assert run("verify", out).exit_code == 0


def test_transformers_4_keys_beside_rope_parameters(tmp_path):
    """A single-RoPE export carries rope_scaling (the same block) and rope_theta for transformers-4 readers;
    transformers 5 loads it to the same schedule (verify's reload: PPL parity)."""
    out = tmp_path / "hf"
    assert run("export", "--model", "builtin", "--method", "yarn", "--len", "1024", "--out", out).exit_code == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["rope_scaling"] == cfg["rope_parameters"] and cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"]
    r = run("verify", out, "--json")
    assert r.exit_code == 0 and any(c["what"].startswith("PPL") and c["ok"] for c in json.loads(r.stdout)["checks"])


def test_sglang_overrides_and_launch_line(tmp_path):
    out = tmp_path / "sglang.json"
    r = run("export", "--model", "builtin", "--method", "yarn", "--len", "1024", "--to", "sglang", "--out", out, "--json")
    result = json.loads(r.stdout)
    assert "--json-model-override-args" in result["command"] and "--context-length 1024" in result["command"]
    block = json.loads(out.read_text())
    assert block["rope_scaling"] == block["rope_parameters"] and block["rope_parameters"]["rope_theta"] == 10000
    r = run("verify", out, "--json")  # the manifest names the runtime
    assert r.exit_code == 0 and json.loads(r.stdout)["runtime"] == "sglang", r.output


@pytest.fixture(scope="module")
def qwen_gguf(tmp_path_factory):
    """The built-in model as a qwen2-architecture GGUF (llama.cpp's qwen2 loader never reads rope_freqs)."""
    pytest.importorskip("gguf")


    path = tmp_path_factory.mktemp("qwen") / "qwen.gguf"
    write_llama_gguf(load_model(None, device="cpu", dtype="fp32").model, path, arch="qwen2",
                     tokenizer_json=BUILTIN_DIR / "tokenizer.json")
    return path


def test_ollama_folder_is_the_gguf_and_its_modelfile(qwen_gguf, tmp_path):
    out = tmp_path / "ollama-model"
    r = run("export", "--model", qwen_gguf, "--method", "yarn", "--len", "1024", "--to", "ollama", "--out", out)
    assert r.exit_code == 0, r.output
    modelfile = (out / "Modelfile").read_text()
    assert "FROM ./qwen-1024.gguf" in modelfile and "PARAMETER num_ctx 1024" in modelfile
    assert "rope_frequency" not in modelfile  # Ollama refuses rope parameters in a Modelfile since 0.1.35
    assert "ollama create ollama-model -f" in r.output
    r = run("verify", out, "--no-run", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["runtime"] == "ollama", r.output
    (out / "Modelfile").write_text(modelfile.replace("num_ctx 1024", "num_ctx 2048"))
    r = run("verify", out, "--no-run")
    assert r.exit_code == 1 and "declared length: expected 1024, found 2048" in r.output


def test_a_qwen_gguf_exported_with_yarn_runs_in_llamacpp_with_ropecli_ppl(qwen_gguf, tmp_path):
    """qwen2 GGUFs get llama.cpp's own yarn keys (rope_freqs would be ignored); llama.cpp runs the export and its
    effect on PPL equals ropecli's yarn in transformers within 2e-3 nats (the verify run)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install 'ropecli[llamacpp]')")
    out = tmp_path / "qwen-yarn.gguf"
    assert run("export", "--model", qwen_gguf, "--method", "yarn", "--len", "1024", "--to", "llamacpp", "--out", out).exit_code == 0
    r = run("verify", out, "--json")
    checks = json.loads(r.stdout)["checks"]
    ran = [c for c in checks if c["what"].startswith("effect")]
    assert r.exit_code == 0 and len(ran) == 1 and ran[0]["ok"], r.output


def test_the_docs_table_is_the_records():
    text = (ROOT / "docs" / "runtimes.md").read_text()
    block = text.split("<!-- runtimes-table:")[1].split("-->", 1)[1].split("<!-- /runtimes-table -->")[0]
    assert block.strip().splitlines() == runtimes_markdown()


def test_sglang_switches_longrope_per_forward_but_fixes_dynamic_ntk_at_start_up():
    rope, sglang = read_rope_config("builtin"), record("sglang")
    dyn = make_spec("dynamic")
    assert repr(served(sglang, dyn, 300, rope, 4.0).spec) == repr(served(record("vllm"), dyn, 300, rope, 4.0).spec)
    assert len(decode_segments(sglang, dyn, rope, 4.0, True, 200, 320)) == 2  # prefill, then one fixed schedule
    yarn = make_spec("yarn")
    assert [s.how for _, s in decode_segments(sglang, yarn, rope, 4.0, False, 200, 320)] == [
        "longrope short_factor", "longrope short_factor", "longrope long_factor"]
    assert len({repr(s.spec) for _, s in decode_segments(sglang, yarn, rope, 4.0, True, 200, 320)}) == 1


def test_a_runtime_module_without_its_interface_is_refused(tmp_path, monkeypatch):
    """The registry checks the RuntimeModule interface (record.py): a module with a RECORD but no read_back is one
    line naming what it lacks, not a crash in verify much later."""
    pkg = tmp_path / "broken"
    pkg.mkdir()
    (pkg / "halfrt.py").write_text('''
from ropecli.export.runtimes.record import AT_START_UP, Runtime
RECORD = Runtime(name="halfrt", label="Half", artefact="-", reads="-", at_length="-", decoding="-", rule=AT_START_UP,
                 serves_dynamic=False)

def write(spec, geom, target, out, **kw):
    return {}
''')
    monkeypatch.setattr(runtimes, "__path__", [*runtimes.__path__, str(pkg)])
    registry.records.cache_clear()
    try:
        with pytest.raises(RopeCliError, match="halfrt lacks read_back, claims"):
            registry.names()
    finally:
        registry.records.cache_clear()
        sys.modules.pop("ropecli.export.runtimes.halfrt", None)


def test_nothing_in_export_or_memory_spells_a_runtime_name():
    """Below the command layer a runtime is its record and hooks: no module of ropecli/export outside the
    runtimes' own package, nor models/memory.py, holds a runtime's name as a string (a branch, a label or a default)."""
    root = Path(__file__).resolve().parent.parent / "ropecli"
    files = [p for p in (root / "export").glob("*.py")] + [root / "models" / "memory.py"]
    def strings(tree):  # every string constant but a module's name in `deferred("transformers")` (an import)
        imported = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "deferred"
                    for a in n.args}
        return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in imported]

    found = [(p.name, node.lineno, node.value) for p in files for node in strings(ast.parse(p.read_text()))
             if node.value in names()]
    assert not found, found
    assert strings(ast.parse('x = "vllm"\ntransformers = deferred("transformers")'))[0].value == "vllm"  # it reads strings


def test_a_switching_export_of_a_shipped_schedule_is_described_by_the_records():
    """`Runtime.at_length_shipped` (transformers') describes a switching export of a model that ships a schedule; the
    others keep their `at_length`; a consistent export is the schedule at every length for all."""
    rope = SimpleNamespace(shipped=SimpleNamespace(label="longrope (shipped)"), shipped_len=4096)
    said = runtime_behaviour(rope, consistent=False)
    assert said["transformers"].startswith("per forward pass: long_factor once the sequence is longer than Ls = 4096, "
                                           "the shipped longrope (shipped) (short_factor) up to Ls; decoding: ")
    assert all(said[n] == f"{r.at_length}; decoding: {r.decoding}" for n, r in records().items() if not r.at_length_shipped)
    assert all(v.startswith("the schedule at every length") for v in runtime_behaviour(rope, consistent=True).values())
