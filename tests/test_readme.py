"""The documentation's commands work: every `ropecli …` line in the bash blocks of README.md and of
every page under docs/ runs and exits 0, from a folder outside the checkout (one folder per page, so a page's
`verify DIR` finds the `export --out DIR` before it), with `--model builtin` or no `--model` (```text blocks that
start with `$ ropecli` are checked against a run by tests/test_documented_commands.py; other ```text blocks are
illustrations). Lines that name a hub model, a GGUF path or SmolLM2 need the network or a download and are checked
for their flags only (`--help` of the same command parses). Every picture the pages show is a file in the
repository."""

import re
import shlex
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropecli.cli.app import COMMANDS as ALL_COMMANDS
from ropecli.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted(p for p in (ROOT / "docs").rglob("*.md") if "figures" not in p.parts)
BUILTIN_MODELS = {"builtin", "builtin-llama3"}  # shipped inside the package: run from any folder
PAGES = [README, *DOCS]

FIRST_COMMANDS = [  # CI runs the README's install and test lines as they are written
    'pip install -e ".[test]" -c constraints/cpu.txt',
    "ropecli search-b",
    "python -m pytest -q",
]


def bash_lines(page: Path) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S)
    return [ln.split("  #")[0].strip() for block in blocks for ln in block.splitlines()]


def page_commands(page: Path) -> list[str]:
    return [ln for ln in bash_lines(page) if ln.startswith("ropecli ")]


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


COMMANDS = [(name(page), line) for page in PAGES for line in page_commands(page)]


def test_readme_has_commands():
    assert bash_lines(README)[: len(FIRST_COMMANDS)] == FIRST_COMMANDS  # the first commands, first
    docs_commands = [line for page, line in COMMANDS if page != "README.md"]
    assert len(docs_commands) >= 15
    for page in ("docs/guide/analyse.md", "docs/guide/measure.md", "docs/guide/choose.md", "docs/guide/export.md"):
        assert any(p == page for p, _ in COMMANDS), f"{page} has no tested command"


def test_readme_is_a_front_page():
    """The README lists every command, one line each, links every guide page and the measurements, and every docs
    page is reachable from it by links; the results live in docs."""
    text = README.read_text()
    table = text[text.index("## Commands"):text.index("## Where to read next")]
    rows = [line.split("`")[1] for line in table.splitlines() if line.startswith("| `ropecli ")]
    assert rows == [f"ropecli {name}" for name in ALL_COMMANDS], rows
    for page in sorted((ROOT / "docs" / "guide").glob("*.md")) + [ROOT / "docs" / "measurements" / "README.md"]:
        assert f"({name(page)})" in text, f"README does not link {name(page)}"
    seen, todo = {README}, [README]
    while todo:  # every docs page is reachable from the README, following relative links
        page = todo.pop()
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)", page.read_text()):
            path = (page.parent / target).resolve()
            if path.suffix == ".md" and path.is_file() and path not in seen:
                seen.add(path)
                todo.append(path)
    unreachable = [name(p) for p in DOCS if p.resolve() not in seen]
    assert not unreachable, f"no link from the README leads to {unreachable}"


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_pictures_exist(page):
    targets = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text())
    missing = [t for t in targets if not (page.parent / t).is_file()]
    assert not missing, f"{name(page)} shows missing pictures: {missing}"


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One evaluation cache for all documented commands, as a user running them in turn would have."""
    return str(tmp_path_factory.mktemp("readme-cache"))


@pytest.fixture(scope="module")
def page_dirs(tmp_path_factory):
    """One working folder per page, outside the checkout: a page's commands run in it in the page's order."""
    made = {}

    def folder(page):
        if page not in made:
            made[page] = tmp_path_factory.mktemp("docs-cwd")
        return made[page]
    return folder


def needs_download(args: list[str]) -> bool:
    """`--model X` names something outside the package (a hub id, a file, SmolLM2's wheel)."""
    return "--model" in args and args[args.index("--model") + 1] not in BUILTIN_MODELS


@pytest.mark.parametrize(("page", "line"), COMMANDS, ids=[f"{p}: {ln}" for p, ln in COMMANDS])
def test_readme_command(page, line, monkeypatch, shared_cache, page_dirs):
    monkeypatch.chdir(page_dirs(page))
    monkeypatch.setenv("ROPECLI_CACHE_DIR", shared_cache)
    monkeypatch.setenv("COLUMNS", "250")  # --help prints long option names whole
    args = shlex.split(line)[1:]
    runner = CliRunner()
    if needs_download(args) or page.startswith("docs/measurements/"):
        sub = [a for a in args if not a.startswith("-")][:1]
        r = runner.invoke(app, [*sub, "--help"])
        assert r.exit_code == 0, r.output
        flags = {a.split("=")[0] for a in args if a.startswith("--")}
        assert all(f in r.output for f in flags), [f for f in flags if f not in r.output]
        return
    r = runner.invoke(app, args)
    assert r.exit_code == 0, f"{page}: {line}\n{r.output}"


def test_the_first_hour_is_planned():
    """What a new user needs before the first long command: the real models' lengths, the suite's time and
    a quick subset that exists, what -m slow selects, a CPU torch pin that cannot resolve to a CUDA build, and test
    extras without lm-eval's stack."""
    text = README.read_text()
    assert "SmolLM2\n8,192" in text or "SmolLM2 8,192" in text.replace("\n", " ")
    assert "Gemma 3 270M 32,768" in text.replace("\n", " ")
    assert "python -m pytest -m quick" in text and "about 20 minutes" in text
    assert "-m slow` runs only the slow tests" in text.replace("\n", " ")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    markers = project["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("quick:") for m in markers)
    assert not any("lm-eval" in dep for dep in project["project"]["optional-dependencies"]["test"])
    pins = [ln for ln in (ROOT / "constraints" / "cpu.txt").read_text().splitlines() if ln.startswith("torch")]
    assert pins[0] == 'torch==2.13.0+cpu; sys_platform == "linux"'  # PyPI's plain 2.13.0 is the CUDA build on Linux
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
