"""The layers of docs/ARCHITECTURE.md, checked by import-linter (the contracts in pyproject.toml): each package imports
only from the packages below it, the numpy core never imports torch, tuning and the CLI never shell out, and a map's
numpy core never imports its attention. The second test shows each check can fail: a copy of the package with one
forbidden import breaks it. A deferred module (`torch = deferred("torch")`, ropecli/deferred.py) is no import statement,
so import-linter never sees it: every declaration is held here to the same contracts, read from the same pyproject.toml,
and a planted one breaks them too."""

import ast
import importlib
import re
import shutil
import subprocess
import sys
import tomllib
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
    assert "Contracts: 4 kept, 0 broken" in r.stdout


def contracts(where: Path = ROOT) -> list[dict]:
    """import-linter's contracts, as pyproject.toml writes them (the one list every import check reads)."""
    return tomllib.loads((where / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def deferred_declarations(package: Path) -> list[tuple[str, str, int]]:
    """(declaring module, deferred module, line) for every `deferred("a.b")` call in the package."""
    out = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "deferred"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                out.append((module, node.args[0].value, node.lineno))
    return out


def within(module: str, names) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def refusals(module: str, target: str, rules: list[dict]) -> list[str]:
    """What import-linter says of `module` importing `target` under each contract that forbids it ("ropecli.rope is not
    allowed to import ropecli.tuning"): a forbidden contract's source importing a forbidden module (its ignore_imports
    honoured), or a layers contract's lower layer importing a higher one or a sibling (`a | b`: independent)."""
    out = []
    for rule in rules:
        if rule["type"] == "forbidden":
            if f"{module} -> {target}" in rule.get("ignore_imports", []):
                continue
            out += [f"{s} is not allowed to import {f}" for s in rule["source_modules"] for f in rule["forbidden_modules"]
                    if within(module, [s]) and within(target, [f])]
        elif rule["type"] == "layers":
            layers = [[n.strip() for n in layer.split("|")] for layer in rule["layers"]]
            at = {n: i for i, layer in enumerate(layers) for n in layer}
            mine = next((n for n in at if within(module, [n])), None)
            theirs = next((n for n in at if within(target, [n])), None)
            if mine and theirs and mine != theirs and at[theirs] <= at[mine]:
                out.append(f"{mine} is not allowed to import {theirs}")
        else:
            raise AssertionError(f"a contract type this check does not read: {rule['type']}")
    return out


def deferred_breaks(package: Path, rules: list[dict]) -> list[str]:
    """Every deferred declaration a contract would refuse as an import: `module:line: deferred('x'): <refusal>`."""
    return [f"{module}:{line}: deferred({target!r}): {why}" for module, target, line in deferred_declarations(package)
            for why in refusals(module, target, rules)]


def test_every_deferred_module_keeps_the_contracts():
    found = deferred_declarations(ROOT / "ropecli")
    assert len(found) > 40 and ("ropecli.backends.backend", "torch") in {(m, t) for m, t, _ in found}, found
    assert deferred_breaks(ROOT / "ropecli", contracts()) == []


PLANTED = {  # module: lines planted into it; an import inside a function (even a lazy one counts), or a deferred module
    # every upward import between packages that was once there, planted back, and a forbidden one per contract
    "rope/geometry.py": ["from ropecli.tuning.search import run_search", 'search = deferred("ropecli.tuning.search")'],
    "rope/methods.py": ["import torch", 'modeling = deferred("transformers.modeling_utils")'],
    "rope/freqs.py": ["from ropecli.maps.map_pairs import pair_reach"],
    "tuning/tournament.py": ["import subprocess"],
    "maps/position_maps.py": ["from ropecli.spec import Spec", "from ropecli.tuning.candidates import map_candidates",
                              "import torch"],
    "models/patch.py": ["from ropecli.maps.mapped_attention import mapped"],
    "maps/map_bands.py": ["from ropecli.export.hf import write_json"],
    "export/map_folder.py": ["from ropecli.tuning.search import run_search"],
    "backends/backend.py": ["from ropecli.spec import Spec"],
    # a map's numpy core never reaches its attention
    "maps/map_spelling.py": ["from ropecli.maps.map_layers import plan_layers",
                             'attention = deferred("ropecli.maps.mapped_attention")'],
    # the numpy core defers no heavy package (import-linter cannot see a declaration: deferred_breaks does)
    "models/model_geometry.py": ['torch = deferred("torch")'],
    "export/registry.py": ['tables = deferred("ropecli.report.tables")'],
}


def planted_target(line: str) -> str:
    node = ast.parse(line).body[0]
    if isinstance(node, ast.Import):
        return node.names[0].name
    return node.module if isinstance(node, ast.ImportFrom) else node.value.args[0].value


def test_every_planted_import_or_deferred_module_breaks_a_contract(tmp_path):
    """A copy of the package with every line of PLANTED in it: each line's refusal (what import-linter says, derived
    from the contracts) is said, by import-linter for an import and by deferred_breaks for a declaration, which
    import-linter does not see."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "ropecli", tmp_path / "ropecli", ignore=shutil.ignore_patterns("builtin*", "data", "__pycache__"))
    for module, lines in PLANTED.items():
        path = tmp_path / "ropecli" / module
        for i, line in enumerate(lines):
            planted = (f"\nfrom ropecli.deferred import deferred  # noqa\n{line}\n" if "deferred(" in line
                       else f"\n\ndef _injected_{i}():\n    {line}  # noqa\n")
            path.write_text(path.read_text() + planted)
    r = lint(tmp_path)
    said = r.stdout.replace("\n", " ")
    found = " ".join(deferred_breaks(tmp_path / "ropecli", contracts(tmp_path)))
    assert r.returncode != 0 and "BROKEN" in said
    rules, missed = contracts(), []
    for module, lines in PLANTED.items():
        name = "ropecli." + module.removesuffix(".py").replace("/", ".")
        for line in lines:
            expected = refusals(name, planted_target(line), rules)
            if not expected or not all(why in (found if "deferred(" in line else said) for why in expected):
                missed.append((module, line, expected))
    assert missed == [], missed
    assert "ropecli.models.model_geometry is not allowed to import torch" not in said  # import-linter is blind to it


def test_architecture_lists_every_module_once():
    """docs/ARCHITECTURE.md's file list names every module of the package by its path, and no module that is gone: a
    module added, moved or renamed without its line fails here."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    listing = text[text.index("## The files, one line each"):text.index("## The route of one")]
    listed = re.findall(r"^\s*((?:[a-z_]+/)*[a-z_]+\.py)\s", listing, flags=re.M)
    modules = {str(p.relative_to(ROOT / "ropecli")) for p in (ROOT / "ropecli").rglob("*.py") if p.name != "__init__.py"}
    assert len(modules) > 150, len(modules)  # it found the package
    assert not modules - set(listed), sorted(modules - set(listed))
    assert not set(listed) - modules, sorted(set(listed) - modules)
    assert len(listed) == len(set(listed)), sorted(m for m in listed if listed.count(m) > 1)


def pointers(text: str) -> list[str]:
    """Every `path.py:Name(.member)` a document points at (a module's path under ropecli/, or one named before it in the
    same line's package)."""
    return sorted(set(re.findall(r"((?:[a-z_]+/)*[a-z_]+\.py):([A-Za-z_][A-Za-z_0-9]*(?:\.[A-Za-z_][A-Za-z_0-9]*)*)", text)))


def resolve_pointer(path: str, name: str, modules: set[str]):
    """The object `path:name` names (imported), or a line saying why there is none."""
    matches = sorted(m for m in modules if m == path or m.endswith("/" + path))
    if len(matches) != 1:
        return f"{path}:{name}: {'no module' if not matches else 'several modules'} {path} ({matches})"
    module = importlib.import_module("ropecli." + matches[0].removesuffix(".py").replace("/", "."))
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            return f"{path}:{name}: {matches[0]} has no {part}"
        obj = getattr(obj, part)
    home = getattr(getattr(module, name.split(".")[0]), "__module__", module.__name__)
    if isinstance(home, str) and home.startswith("ropecli") and home != module.__name__:  # imported there, defined elsewhere
        return f"{path}:{name}: defined in {home}, not {matches[0]}"
    return None


def test_architecture_points_at_what_exists():
    """Every `file.py:name` docs/ARCHITECTURE.md points at is imported and found: a function moved or renamed without
    its pointer fails here (it once pointed at results.py:summarize_ppl and models/config.py:ModelRope, both gone)."""
    modules = {str(p.relative_to(ROOT / "ropecli")) for p in (ROOT / "ropecli").rglob("*.py")
               if p.name not in ("map_modeling.py", "vllm_model.py")}
    found = pointers((ROOT / "docs" / "ARCHITECTURE.md").read_text())
    assert len(found) > 40, found
    assert [why for why in (resolve_pointer(p, n, modules) for p, n in found) if why] == []
    assert resolve_pointer("evaluation/results.py", "summarize_ppl", modules)  # the red side: a pointer that is gone
    assert resolve_pointer("models/config.py", "ModelRope", modules)  # and one to a name only imported there
