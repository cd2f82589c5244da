"""The one way ropecli defers a heavy import (torch, transformers, matplotlib, scipy, vLLM, llama.cpp, gguf …): a module
declares it at its top, below its imports, and uses the name as the module itself:

    torch = deferred("torch")
    modeling_utils = deferred("transformers.modeling_utils")

The first attribute read (`torch.tensor`, `modeling_utils.ALL_ATTENTION_FUNCTIONS`) imports the module; until then
nothing is loaded, so every import a module makes stands at its top, and a command that never runs a model never
loads torch (`ropecli freqs` starts without it: benchmarks/bench_startup.py). A missing optional package raises its
ImportError at that first use; a command that needs one asks `installed(name)` first and says what to install."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType


class Deferred:
    """A module by its dotted name, imported on the first attribute read. Then the name that declared it in its module
    (`torch = deferred("torch")`) is the module itself, so every later read there costs what a plain import's does."""
    __slots__ = ("_name", "_module", "_home")

    def __init__(self, name: str, home: dict):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_module", None)
        object.__setattr__(self, "_home", home)  # the declaring module's globals

    def _load(self) -> ModuleType:
        module = object.__getattribute__(self, "_module")
        if module is None:
            module = importlib.import_module(object.__getattribute__(self, "_name"))
            object.__setattr__(self, "_module", module)
            home = object.__getattribute__(self, "_home")
            for key, value in list(home.items()):
                if value is self:
                    home[key] = module
        return module

    def __getattr__(self, attr: str):
        return getattr(self._load(), attr)

    def __setattr__(self, attr: str, value) -> None:
        setattr(self._load(), attr, value)

    def __repr__(self) -> str:
        return f"<deferred module {object.__getattribute__(self, '_name')!r}>"


def deferred(name: str) -> Deferred:
    """`name` (a dotted module path), imported when first used; declare it at a module's top."""
    return Deferred(name, sys._getframe(1).f_globals)


def installed(name: str) -> bool:
    """Whether the module `name` can be imported (found on the path; its parent packages are imported to look)."""
    if name in sys.modules:  # imported already, put there (a stand-in) or blocked (None: its import raises)
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
