"""Failures a user causes name the problem and the fix in one line, before any forward pass: a
model path that does not exist, a cache folder that cannot be made; and an exported folder gets the
mode a normal folder gets (a serving account must read it)."""

import os
import stat

import huggingface_hub
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError

from ropecli.cli.app import app
from ropecli.models.packaged import looks_like_path

from helpers import runner


@pytest.mark.parametrize("path", ["/no/such/model", "./missing-folder", "missing.gguf", "~/no/such/model.gguf"])
def test_a_model_path_that_does_not_exist_says_so(path):
    r = runner.invoke(app, ["ppl", "--model", path, "--len", "64"])
    assert r.exit_code == 1
    line = r.output.strip().splitlines()[-1]
    assert f"--model {path}: no such file or folder" in line and "hub id" in line and "Repo id" not in r.output


def test_a_hub_id_is_not_taken_for_a_path():
    assert not looks_like_path("meta-llama/Llama-2-7b-hf") and not looks_like_path("gpt2")
    assert looks_like_path("/models/llama") and looks_like_path("a/b/c") and looks_like_path("model.gguf")


def test_a_cache_dir_that_cannot_be_created_fails_before_the_model_loads(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = runner.invoke(app, ["ppl", "--len", "64", "--cache-dir", str(blocker / "cache")])
    assert r.exit_code == 1
    line = r.output.strip().splitlines()[-1]
    assert line.startswith(f"Error: --cache-dir {blocker / 'cache'}: cannot write there") and "--no-cache" in line
    assert "model builtin" not in r.output  # the model never loaded


def test_an_exported_folder_from_a_gguf_has_a_normal_folder_mode(builtin_gguf, tmp_path):
    out = tmp_path / "hf"
    old = os.umask(0o022)
    try:
        r = runner.invoke(app, ["export", "--model", str(builtin_gguf), "--method", "yarn", "--len", "512", "--to", "hf",
                                "--out", str(out)])
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert stat.S_IMODE(out.stat().st_mode) == 0o755  # mkdtemp's 0700 would keep a serving account out
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in out.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes  # safetensors' own writer makes 0600


def test_a_hub_id_without_network_or_cached_copy_is_one_line_with_the_fix(monkeypatch):
    """Offline (or DNS down) and not cached: one line naming both fixes, not the hub's paragraph."""
    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub and we cannot find "
                                      "the requested files in the local cache. Please check your connection …")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    r = runner.invoke(app, ["freqs", "--model", "meta-llama/Llama-2-7b-hf", "--k", "8"])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "the hub cannot be reached and config.json is not in the local cache" in r.output
    assert "pass a local folder" in r.output
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline on purpose: the fix is to unset it
    r = runner.invoke(app, ["freqs", "--model", "meta-llama/Llama-2-7b-hf", "--k", "8"])
    assert r.exit_code == 1 and "HF_HUB_OFFLINE is set" in r.output and "unset HF_HUB_OFFLINE" in r.output, r.output
