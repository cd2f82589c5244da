"""Writers never clobber: every command that writes a file refuses an existing one without --force and writes the
manifest of what it wrote beside it; `verify` of a file rewritten since its manifest says so in one line."""

import json

import pytest

from ropecli.tuning.advise import MARKER, prepare_out

from helpers import run

SEARCH_B = ["search-b", "--len", "512", "--samples", "1", "--tol", "0.3"]



def one_error_line(r, needle):
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert lines[-1].startswith("Error: ") and needle in lines[-1], r.output
    return lines[-1]


def test_export_then_search_b_then_verify_ends_in_a_refusal_never_a_bare_exception(tmp_path, monkeypatch):
    """The sequence of export.md then choose.md: search-b refuses the exported rope.json without --force; with it, it
    writes its own manifest, which verify reads; a block rewritten behind the manifest's back is named in one line."""
    monkeypatch.chdir(tmp_path)
    r = run("export", "--method", "mixed", "--b", "0.625", "--len", "32768", "--d", "128", "--train-len", "4096",
            "--to", "transformers", "--out", "rope.json")
    assert r.exit_code == 0, r.output
    exported = (tmp_path / "rope.json").read_text()
    one_error_line(run(*SEARCH_B, "--export-config", "rope.json"), "--export-config rope.json exists; pass --force")
    assert (tmp_path / "rope.json").read_text() == exported  # nothing written, before any forward pass
    r = run(*SEARCH_B, "--export-config", "rope.json", "--force")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "rope.json.ropecli.json").read_text())
    assert manifest["rotary_dim"] == 64 and manifest["train_len"] == 256 and manifest["method"] == "mixed"
    r = run("verify", "rope.json")
    assert r.exit_code == 0 and "transformers: OK" in r.output, r.output
    r = run("schedule", "--d", "128", "--k", "8", "--method", "yarn", "--format", "hf")  # as `> rope.json` would
    (tmp_path / "rope.json").write_text(r.stdout)
    r = run("verify", "rope.json")  # the block of another model: said first, then the one line that refuses it
    assert "warning: rope.json changed after ropecli wrote rope.json.ropecli.json" in r.output, r.output
    one_error_line(r, "long_factor has 64 entries where rotary dim 64 has 32 pairs")
    r = run("schedule", "--model", "builtin", "--k", "2", "--method", "yarn", "--format", "hf")  # this model, k = 2
    (tmp_path / "rope.json").write_text(r.stdout)
    r = run("verify", "rope.json")  # checked against the manifest: the checks that differ fail, exit 1
    assert r.exit_code == 1 and "changed after ropecli wrote" in r.output and "Traceback" not in r.output, r.output


def test_verify_of_a_block_for_another_model_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.json").write_text(run("schedule", "--d", "128", "--k", "2", "--method", "yarn", "--format", "hf").stdout)
    r = run("verify", "r.json", "--model", "builtin", "--method", "yarn", "--len", "512")
    one_error_line(r, "long_factor has 64 entries where rotary dim 64 has 32 pairs")
    assert "[transformers]" not in r.output, r.output  # transformers' own warnings are said in that line


@pytest.mark.parametrize("command", [
    ["plot", "--out", "p.png"],
    ["plot", "freqs", "--out", "p.png"],
    ["plot", "schedule", "--out", "p.png"],
    ["ppl", "--len", "128", "--samples", "1", "--plot", "p.png"],
    [*SEARCH_B, "--plot", "p.png"],
])
def test_pictures_refuse_an_existing_file_without_force(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.png").write_bytes(b"mine")
    flag = "--plot" if "--plot" in command else "--out"
    one_error_line(run(*command), f"{flag} p.png exists; pass --force")
    assert (tmp_path / "p.png").read_bytes() == b"mine"
    r = run(*command, "--force")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_advise_keeps_an_earlier_advice_without_force(tmp_path, monkeypatch):
    out = tmp_path / "adv"
    prepare_out(str(out))
    (out / "advice.json").write_text("{}")
    r = run("advise", "--out", out, "--len", "512")
    one_error_line(r, "holds an earlier advise's results (advice.json); pass --force")
    assert (out / "advice.json").read_text() == "{}" and (out / MARKER).exists()
    assert prepare_out(str(out), force=True) == out
