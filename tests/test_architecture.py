"""The layers of docs/ARCHITECTURE.md, checked by import-linter (the contracts in pyproject.toml):
each layer imports only from the layers below it, and the numpy core never imports torch. The
second test shows the check can fail: a copy of the package with one upward import breaks it."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint(where: Path) -> subprocess.CompletedProcess:
    """import-linter on the `ropecli` package found first from `where` (its contracts: where/pyproject.toml)."""
    return subprocess.run([sys.executable, "-c", LINT, "--config", "pyproject.toml", "--no-cache"], cwd=where,
                          env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)


def test_the_layer_contracts_hold():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 2 kept, 0 broken" in r.stdout


def test_an_upward_import_breaks_the_layer_contract(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "ropecli", tmp_path / "ropecli", ignore=shutil.ignore_patterns("builtin_model", "__pycache__"))
    geometry = tmp_path / "ropecli" / "rope" / "geometry.py"
    geometry.write_text(geometry.read_text() + "\n\ndef _upward():\n    from ropecli.tuning.search import run_search  # noqa\n")
    r = lint(tmp_path)
    assert r.returncode != 0
    assert "BROKEN" in r.stdout and "ropecli.rope is not allowed to import ropecli.tuning" in r.stdout.replace("\n", " ")
