"""The README's commands work: every `ropecli …` line in its bash blocks runs and exits 0.
Lines that name a hub model or a GGUF path (`--model …`) need the network or a download and are
checked for their flags only (`--help` of the same command parses)."""

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropecli.cli import app

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    lines = [ln.split("  #")[0].strip() for block in blocks for ln in block.splitlines()]
    return [ln for ln in lines if ln.startswith("ropecli ")]


COMMANDS = readme_commands()


def test_readme_has_commands():
    assert len(COMMANDS) >= 15
    assert "ropecli search-b" in COMMANDS  # the quick start's main job


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One evaluation cache for all README commands, as a user running them in turn would have."""
    return str(tmp_path_factory.mktemp("readme-cache"))


@pytest.mark.parametrize("line", COMMANDS)
def test_readme_command(line, tmp_path, monkeypatch, shared_cache):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROPECLI_CACHE_DIR", shared_cache)
    args = shlex.split(line)[1:]
    runner = CliRunner()
    if "--model" in args:
        sub = [a for a in args if not a.startswith("-")][:1]
        r = runner.invoke(app, [*sub, "--help"])
        assert r.exit_code == 0, r.output
        flags = {a.split("=")[0] for a in args if a.startswith("--")}
        assert all(f in r.output for f in flags), [f for f in flags if f not in r.output]
        return
    r = runner.invoke(app, args)
    assert r.exit_code == 0, f"{line}\n{r.output}"
