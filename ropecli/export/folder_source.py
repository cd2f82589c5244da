"""The map folder's modeling file, generated from ropecli's own source (as transformers generates `modeling_<family>.py`
from its modular file): the glue `export/map_modeling.py` with each `from ropecli… import name` replaced by the
definition of `name` in ropecli and every definition it uses in turn (functions, classes, the constants and tables
they read, followed across modules), down to what torch, numpy, transformers and the standard library give, whose
imports come along (a module declared `x = deferred("m")` becomes `import m as x`). The map's region function is
appended the same way. The file is thus the code ropecli runs, copied: each of its top-level definitions other than the
glue's has the code of the definition of the same name in ropecli/ (docstrings kept; a map's registering decorator
left in ropecli), which `glue_lines` and tests/test_map_folder.py hold it to.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import textwrap
from pathlib import Path
from types import ModuleType

from ropecli.deferred import Deferred
from ropecli.errors import RopeCliError

GLUE = Path(__file__).with_name("map_modeling.py")
_DEFINITIONS: dict[str, list[ast.AST]] = {}  # `ropecli_definitions`, once per process
_TREES: dict[str, tuple] = {}  # a module's (source lines, tree), read once per process (a test map's module too)
_NORMAL: dict[int, str] = {}  # a definition of _DEFINITIONS (kept alive there) -> its code as compared (`_normal`)
DROPPED_DECORATORS = ("register_map",)  # a map's registration stays in ropecli's registry
OPTIONAL = ("torch.nn.attention",)  # newer than some torch a folder may meet: deferred, as ropecli defers it


def folder_source(region_fn, base_class: str) -> str:
    """The modeling file for a map whose region function is `region_fn` on a model of class `base_class`."""
    glue = GLUE.read_text()
    tree = ast.parse(glue)
    gen = _Generator({(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0] for n in tree.body
                      if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names})
    doc, future, imports, body = [], [], [], []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ropecli":
            for alias in node.names:
                gen.need_from(sys.modules.get(node.module) or _import(node.module), alias.name, alias.asname)
            continue
        text = ast.get_source_segment(glue, node, padded=True)
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future.append(text)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(text)
        elif _is_docstring(node):
            doc.append(text)
        else:
            body.append(_with_comments(glue.split("\n"), node))
    gen.need_function(region_fn)
    imports += [line for line in gen.imports if line not in imports]
    source = "\n\n".join(["\n".join(doc), "\n".join(future), "\n".join(imports)]) + "\n\n\n" + \
        "\n\n\n".join(gen.definitions + body) + "\n"
    source = source.replace('BASE_CLASS = "LlamaForCausalLM"', f'BASE_CLASS = "{base_class}"', 1)
    source = source.replace('REGION_FUNCTION = ""', f"REGION_FUNCTION = {region_fn.__name__!r}", 1)
    return _tidy(source)


def glue_lines(source: str) -> int:
    """The code lines of a generated file that are its glue's: every line of the file that is not blank, a comment, a
    docstring, an import (a `deferred` declaration too), or inside a top-level definition whose name ropecli defines with the same code."""
    tree = ast.parse(source)
    own = ropecli_definitions()
    docs = {n for node in ast.walk(tree) if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and _has_docstring(node) for n in range(node.body[0].lineno, node.body[0].end_lineno + 1)}
    lines = source.split("\n")
    count = 0
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or _is_docstring(node) or _is_deferred(node):
            continue
        names = _bound(node)
        if names and all(n in own and same_code(node, own[n]) for n in names):
            continue
        counted = [i for i in range(node.lineno, node.end_lineno + 1)
                   if i not in docs and lines[i - 1].strip() and not lines[i - 1].strip().startswith("#")]
        count += len(counted)
    return count


def same_code(a: ast.AST, definitions: list) -> bool:
    """Whether node a has the code of one of `definitions` (docstrings and registering decorators aside)."""
    mine = _normal(a)
    return any(mine == _NORMAL.setdefault(id(b), _normal(b)) for b in definitions)


def ropecli_definitions() -> dict[str, list[ast.AST]]:
    """{name: [every top-level definition of that name in ropecli/'s modules]} (the glue template aside), read once
    per process."""
    if _DEFINITIONS:
        return _DEFINITIONS
    out = _DEFINITIONS
    for path in sorted(Path(__file__).resolve().parent.parent.rglob("*.py")):
        if path == GLUE.resolve():
            continue
        for node in ast.parse(path.read_text()).body:
            for name in _bound(node):
                out.setdefault(name, []).append(node)
    return out


class _Generator:
    """The definitions reached from the glue's imports, each once, every one after those it uses at import time."""

    def __init__(self, present: set[str]):
        self.present = present  # the packages the glue imports at its top: where it loads, they are (torch …)
        self.imports: list[str] = []
        self.definitions: list[str] = []
        self._done: dict[str, str] = {}  # name -> "module:name" of its definition (two with one name: refused)

    def need_from(self, module: ModuleType, name: str, asname: str | None = None) -> None:
        if asname not in (None, name):
            raise RopeCliError(f"folder_source: 'from {module.__name__} import {name} as {asname}' renames a "
                               "definition; the generated file keeps each name")
        self._define(module, name)

    def need_function(self, fn) -> None:
        """A function that may be defined inside another (a map registered by a test): its own source, its names read
        in its module."""
        module = sys.modules[fn.__module__]
        source = textwrap.dedent(inspect.getsource(fn))
        self._emit(module, fn.__name__, ast.parse(source).body[0], source.split("\n"))

    def _tree(self, module: ModuleType) -> tuple[list[str], ast.Module]:
        if module.__name__ not in _TREES:
            source = inspect.getsource(module)
            _TREES[module.__name__] = (source.split("\n"), ast.parse(source))
        return _TREES[module.__name__]

    def _define(self, module: ModuleType, name: str) -> None:
        lines, tree = self._tree(module)
        node = next((n for n in tree.body if name in _bound(n) and not isinstance(n, (ast.Import, ast.ImportFrom))),
                    None)
        if node is None:  # imported there: followed to where it is defined, or imported here as there
            self._name(module, name)
            return
        self._emit(module, name, node, lines)

    def _emit(self, module, name, node, lines: list[str]) -> None:
        where = f"{module.__name__}:{name}"
        if name in self._done:
            if self._done[name] != where:
                raise RopeCliError(f"folder_source: two definitions named {name} ({self._done[name]}, {where}); "
                                   "rename one")
            return
        self._done[name] = where
        for used in sorted(_reads(_unregistered(node)) - _bound(node)):  # those it uses first (a class's base, a table's functions)
            self._name(module, used)
        self.definitions.append(_without_decorators(node, _with_comments(lines, node)))

    def _name(self, module: ModuleType, name: str) -> None:
        """`name` as `module` reads it: defined there, imported from ropecli (followed), imported from elsewhere or
        declared deferred (its import added), a builtin (nothing)."""
        lines, tree = self._tree(module)
        if any(name in _bound(n) for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))):
            self._define(module, name)
            return
        value = vars(module).get(name, getattr(builtins, name, None))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                alias = next(a for a in node.names if (a.asname or a.name) == name)
                if (node.module or "").split(".")[0] == "ropecli":
                    self.need_from(sys.modules.get(node.module) or _import(node.module), alias.name, alias.asname)
                else:
                    self._import(f"from {node.module} import {alias.name}" +
                                 (f" as {alias.asname}" if alias.asname else ""))
                return
            if isinstance(node, ast.Import) and any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                alias = next(a for a in node.names if (a.asname or a.name.split(".")[0]) == name)
                self._import(f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else ""))
                return
        if isinstance(value, (Deferred, ModuleType)) and name in vars(module):
            target = object.__getattribute__(value, "_name") if isinstance(value, Deferred) else value.__name__
            if target.split(".")[0] in self.present and not target.startswith(OPTIONAL):
                self._import(f"import {target}" if target == name else f"import {target} as {name}")
                return
            declared = next(n for n in tree.body if isinstance(n, ast.Assign) and name in
                            {t.id for t in n.targets if isinstance(t, ast.Name)})  # `name = deferred("…")`
            self._emit_declaration(module, name, declared, "\n".join(lines[declared.lineno - 1:declared.end_lineno]))

    def _emit_declaration(self, module, name, node, text) -> None:
        """A deferred module the folder may lack (flex attention in an older torch): declared as ropecli declares it,
        imported on first use, with `deferred` itself copied."""
        if name in self._done:
            return
        self._done[name] = f"{module.__name__}:{name}"
        self._name(module, "deferred")
        self.definitions.append(text)

    def _import(self, line: str) -> None:
        if line not in self.imports:
            self.imports.append(line)


def _import(name: str) -> ModuleType:
    __import__(name)
    return sys.modules[name]


def _is_deferred(node: ast.AST) -> bool:
    """`name = deferred("module")`: an import, declared ropecli's way."""
    return isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
        getattr(node.value.func, "id", None) == "deferred"


def _bound(node: ast.AST) -> set[str]:
    """The top-level names a statement defines (a `deferred` declaration is an import: none)."""
    if _is_deferred(node):
        return set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name.split(".")[0]) for a in node.names}
    return set()


def _reads(node: ast.AST) -> set[str]:
    """The names a definition reads (annotations aside: strings under `from __future__ import annotations`)."""
    out: set[str] = set()

    def visit(n):
        for field, value in ast.iter_fields(n):
            if field in ("annotation", "returns"):
                continue
            for child in (value if isinstance(value, list) else [value]):
                if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                    out.add(child.id)
                elif isinstance(child, ast.AST):
                    visit(child)

    visit(node)
    return out


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _has_docstring(node) -> bool:
    return bool(node.body) and _is_docstring(node.body[0])


def _normal(node: ast.AST) -> str:
    """A definition's code as compared: its docstrings and registering decorators removed."""
    node = ast.parse(ast.unparse(node)).body[0]
    for n in ast.walk(node):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if _has_docstring(n):
                n.body = n.body[1:] or [ast.Pass()]
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n.decorator_list = [d for d in n.decorator_list if not _registering(d)]
    return ast.dump(node)


def _unregistered(node: ast.AST) -> ast.AST:
    """A definition without its registering decorators (what it reads once registered)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(_registering, node.decorator_list)):
        node = ast.parse(ast.unparse(node)).body[0]
        node.decorator_list = [d for d in node.decorator_list if not _registering(d)]
    return node


def _registering(decorator: ast.AST) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(target, ast.Name) and target.id in DROPPED_DECORATORS


def _without_decorators(node: ast.AST, text: str) -> str:
    """The definition's source without its registering decorators (the lines before its `def`)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not any(map(_registering, node.decorator_list)):
        return text
    kept = [d for d in node.decorator_list if not _registering(d)]
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("def ", "async def ")))
    return "\n".join([f"@{ast.unparse(d)}" for d in kept] + lines[start:])


def _with_comments(lines: list[str], node: ast.AST) -> str:
    """A top-level statement's source with the comment block right above it (after a blank line: a comment right
    below code is that code's) and the comment lines that continue its last line's trailing comment. `lines`: its
    module's source, split once (ast.get_source_segment splits it again for every call)."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    start = first - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    if start < first - 1 and start > 0 and lines[start - 1].strip():
        start = first - 1
    end = node.end_lineno
    if "#" in lines[end - 1]:
        while end < len(lines) and lines[end].lstrip().startswith("#"):
            end += 1
    return "\n".join(lines[start:end])


def _tidy(source: str) -> str:
    """At most two blank lines in a row (as ropecli's own files)."""
    out, blank = [], 0
    for line in source.split("\n"):
        blank = blank + 1 if not line.strip() else 0
        if blank <= 2:
            out.append(line.rstrip())
    return "\n".join(out)
