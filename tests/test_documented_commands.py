"""Docs a user can follow: every relative link of README.md and docs/ (anchors included) leads somewhere, no command
depends on the checkout's root, and every output the guide shows is a run.

A ```text block that starts with `$ ropecli …` shows a command and lines of its output: the test runs that command
from a folder outside the checkout and checks that every line shown stands in what it printed (whitespace aside), so
the numbers these blocks quote for the built-in model come from the run, not from a copy by hand. Rows may be left
out (a line `…`), and a line's `…` stands for any text (a cell whose last digit moves with float rounding).
Long measurements (SmolLM2, the full tournament) are in docs/measurements/, each with its command, and are
not run here; tests/test_readme.py runs every other documented command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ropecli.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "figures" not in p.parts)]
LINK = re.compile(r"\]\(([^)\s]+)\)")
SHOWN = re.compile(r"```text\n\$ (ropecli [^\n]*)\n(.*?)```", flags=re.S)


def name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen, fenced = set(), {}, False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"#{1,6} (.*)", line)
        if heading:
            s = slug(heading.group(1))
            found.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return found


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{name(page)} links to what is not there: {broken}"


def documented_lines(page: Path) -> list[str]:
    blocks = re.findall(r"```(?:bash|text)\n(.*?)```", page.read_text(), flags=re.S)
    return [ln.strip().removeprefix("$ ") for block in blocks for ln in block.splitlines()]


def test_no_command_needs_the_checkouts_root():
    """`--model ropecli/builtin_model` works only from the checkout's root; `--model builtin` works anywhere."""
    rooted = [(name(p), ln) for p in PAGES for ln in documented_lines(p)
              if ln.startswith("ropecli ") and re.search(r"--model[ =]ropecli/", ln)]
    assert not rooted, rooted


SHOWN_RUNS = [(name(page), command, body) for page in PAGES for command, body in SHOWN.findall(page.read_text())]


def test_the_guide_shows_runs():
    pages = {page for page, _, _ in SHOWN_RUNS}
    assert {"docs/guide/analyse.md", "docs/guide/measure.md", "docs/guide/choose.md",
            "docs/guide/export.md"} <= pages, pages


def flat(text: str) -> str:
    """Whitespace and the tables' box-drawing characters aside."""
    return " ".join(re.sub("[\u2500-\u257f]", " ", text).split())


def stands_in(line: str, printed: str) -> bool:
    """The shown line is in the flattened output, each `…` standing for at most one line's worth of text."""
    pieces = [re.escape(flat(piece)) for piece in line.split("…")]
    return re.search(r".{0,300}?".join(pieces), printed) is not None


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("shown-cache"))


@pytest.mark.parametrize(("page", "command", "body"), SHOWN_RUNS,
                         ids=[f"{page}: {command}" for page, command, _ in SHOWN_RUNS])
def test_shown_output_is_the_commands(page, command, body, tmp_path, monkeypatch, shared_cache):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROPECLI_CACHE_DIR", shared_cache)
    monkeypatch.setenv("COLUMNS", "300")  # wide enough that the tables' rows print unwrapped
    r = CliRunner().invoke(app, shlex.split(command)[1:])
    assert r.exit_code == 0, f"{page}: {command}\n{r.output}"
    printed = flat(r.output)
    shown = [line for line in body.splitlines() if line.strip() and line.strip() not in ("…", "...")]
    assert shown, f"{page}: {command} shows no output"
    missing = [line for line in shown if not stands_in(line, printed)]
    assert not missing, f"{page}: `{command}` no longer prints:\n" + "\n".join(missing) + f"\n--- it printed:\n{r.output}"
