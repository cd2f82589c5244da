"""`--to`, `--runtime` and `ropecli runtimes NAME`: a runtime by its name or an alias, checked by click before any work."""

from __future__ import annotations

try:  # the click that typer builds its commands with (typer >= 0.26 vendors one; a foreign ParamType shows as <function>)
    from typer._click.types import ParamType
except ImportError:  # older typer: click itself
    from click import ParamType


class RuntimeName(ParamType):
    """A runtime by its name or an alias (`ropecli.export.runtimes`: hf, gguf, llama.cpp … are accepted), given as its
    one spelling; `many`: repeatable and comma-separated. A wrong one is a one-line usage error."""

    def __init__(self, flag: str, many: bool = False):
        self.flag, self.many, self.name = flag, many, "runtime"

    @property
    def choices(self) -> list[str]:
        """Every runtime's name (read from the registry when the help is drawn; aliases are accepted too)."""
        from ropecli.export.runtimes import names

        return list(names())

    def get_metavar(self, param, ctx=None) -> str:
        return "RUNTIME" + (",…" if self.many else "")

    def convert(self, value, param, ctx):
        from ropecli.export.runtimes import names, spellings

        if isinstance(value, list):
            return value
        words = [n.strip() for n in str(value).split(",") if n.strip()] if self.many else [str(value)]
        bad = [w for w in words if w.lower() not in spellings()] or ([] if words else [repr(value)])
        if bad:
            self.fail(f"{self.flag} {bad[0]}: choose from {', '.join(names())}" + (" (a comma list is fine)" if self.many else ""),
                      param, ctx)
        got = [spellings()[w.lower()] for w in words]
        return got if self.many else got[0]
