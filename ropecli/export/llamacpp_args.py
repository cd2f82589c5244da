"""llama.cpp's own argument table, read from its source (common/arg.cpp), to check a command line ropecli prints.

Every option of llama.cpp's tools is one `add_opt(common_arg({"-gan", "--grp-attn-n"}, "N", help, handler)...)` in
`common_params_parser_init` (common/arg.cpp); `.set_examples({LLAMA_EXAMPLE_COMPLETION, ...})` names the tools that
accept it (none named: LLAMA_EXAMPLE_COMMON, which every tool but llama-download inherits) and `.set_excludes(...)`
the tools that do not. A flag list followed by a second brace list is a boolean pair (`{"-cnv", ...}, {"-no-cnv",
...}`); a string literal after the flags names the value an option takes ("N", "FNAME"). Each tool parses with its
own example (tools/completion/completion.cpp: `common_params_parse(..., LLAMA_EXAMPLE_COMPLETION, ...)`).

Pure text: no compiler, no llama.cpp build. `parse_command` returns the problems of one printed line (empty: it parses).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

# executable -> the example it parses as (tools/*/CMakeLists.txt targets; the tool's common_params_parse call)
PROGRAMS = {"llama-completion": "LLAMA_EXAMPLE_COMPLETION", "llama-cli": "LLAMA_EXAMPLE_CLI",
            "llama-server": "LLAMA_EXAMPLE_SERVER", "llama-passkey": "LLAMA_EXAMPLE_PASSKEY",
            "llama-perplexity": "LLAMA_EXAMPLE_PERPLEXITY"}  # since b7348 (PR #17824)
PROGRAMS_BEFORE_B7348 = {**PROGRAMS, "llama-cli": "LLAMA_EXAMPLE_MAIN"}  # tools/main/main.cpp, then the completion tool


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]  # every spelling, the negations included
    value: bool  # takes a value (a string literal follows the flags)
    examples: frozenset[str]
    excludes: frozenset[str]

    def accepted_by(self, example: str) -> bool:
        inherit = example != "LLAMA_EXAMPLE_DOWNLOAD"
        return ((example in self.examples or (inherit and "LLAMA_EXAMPLE_COMMON" in self.examples))
                and example not in self.excludes)


def _calls(text: str):
    """The text of each `add_opt(common_arg(...)...)` statement, up to its closing `);` at depth 0."""
    for m in re.finditer(r"add_opt\(common_arg\(", text):
        depth, i = 2, m.end()
        in_str = False
        while depth and i < len(text):
            c = text[i]
            if in_str:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        yield text[m.end():i]


def read_options(arg_cpp: str | Path) -> list[Option]:
    """Every option declared in common/arg.cpp (its text, or its path)."""
    text = Path(arg_cpp).read_text() if isinstance(arg_cpp, Path) or "\n" not in str(arg_cpp) else str(arg_cpp)
    out = []
    for call in _calls(text):
        head = re.match(r'\s*\{([^{}]*)\}\s*(?:,\s*\{([^{}]*)\})?\s*,\s*("?)', call)
        if not head:
            continue
        flags = tuple(re.findall(r'"([^"]+)"', head.group(1) + (head.group(2) or "")))
        value = head.group(2) is None and head.group(3) == '"' and bool(re.match(
            r'\s*\{[^{}]*\}\s*,\s*"[^"]*"\s*,\s*(?:"|string_format|\w)', call))
        ex = re.search(r"\.set_examples\(\{([^}]*)\}\)", call)
        exc = re.search(r"\.set_excludes\(\{([^}]*)\}\)", call)
        examples = frozenset(re.findall(r"LLAMA_EXAMPLE_\w+", ex.group(1))) if ex else frozenset({"LLAMA_EXAMPLE_COMMON"})
        out.append(Option(flags, value, examples, frozenset(re.findall(r"LLAMA_EXAMPLE_\w+", exc.group(1))) if exc
                          else frozenset()))
    return out


def parse_command(line: str, options: list[Option], programs: dict[str, str] = PROGRAMS) -> list[str]:
    """Problems of `line` (a shell command for one llama.cpp tool) against the table: an unknown program, a flag the
    program does not accept, a flag missing its value. [] where llama.cpp would parse every argument. `programs`: the
    executables of the tree the table was read from (PROGRAMS_BEFORE_B7348 for an older one)."""
    words = shlex.split(line)
    program = Path(words[0]).name
    if program not in programs:
        return [f"{program}: not a llama.cpp tool ropecli knows ({', '.join(programs)})"]
    example = programs[program]
    table = {f: o for o in options if o.accepted_by(example) for f in o.flags}
    problems, i = [], 1
    while i < len(words):
        word = words[i]
        if word not in table:
            known = any(word in o.flags for o in options)
            problems.append(f"{program} does not accept {word}" + (" (another tool's option)" if known else ""))
            i += 1
            continue
        if table[word].value:
            if i + 1 >= len(words):
                problems.append(f"{word} needs a value")
            i += 2
        else:
            i += 1
    return problems
