"""`--to`, `--runtime` and `ropecli runtimes NAME`: a runtime by its name or an alias, checked by click before any work."""

from __future__ import annotations

import click


class RuntimeName(click.ParamType):
    """A runtime by its name or an alias (`ropecli.export.runtimes`: hf, gguf, llama.cpp … are accepted), given as its
    one spelling; `many`: repeatable and comma-separated. A wrong one is a one-line usage error."""

    def __init__(self, flag: str, many: bool = False):
        from ropecli.export.runtimes import names

        self.flag, self.many = flag, many
        self.name = "[" + "|".join(names()) + "]" + (",…" if many else "")

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
