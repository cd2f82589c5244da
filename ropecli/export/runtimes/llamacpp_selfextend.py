"""Which llama.cpp builds serve Self-Extend, under which program and flags, and the line ropecli prints for each.

llama.cpp runs Self-Extend (`-gan G -gaw W`) in its completion tool only, by moving the positions of the cells in its KV
cache before each batch (`ropecli.models.llamacpp_selfextend` runs that loop). From build b5486 on, `seq_div`
re-rotates every divided key the wrong way: PR #13706 ("kv-cache : rework kv_cell", commit de2ef53a4, 2025-05-25)
moved the cells into src/llama-kv-cells.h, where `llama_kv_cells::pos_div` records `shift[i] += p_old - pos[i]`
while `pos_add` records `shift[i] += d` (new - old), and the K-shift (`llama_kv_cache::build_graph_shift`) rotates each
key by its recorded shift. Up to b5484 `llama_kv_cache_unified::seq_div` (src/llama-kv-cache.cpp) had
`cells[i].delta += cells[i].pos - p_old`. Read in the mirrors of llama.cpp's history (kmbandy/llama.cpp, ngxson/llama.cpp,
tags b1789 ... b10573) and in the tree vendored by llama-cpp-python 0.3.36 (ggml-org/llama.cpp@0c1e57098, 2026-10-01),
which still carries it; measured on the installed build by `LlamaCppBackend.seq_div_check` and tests/test_llamacpp_selfextend.py.

The programs, from the same history: Self-Extend came with PR #4815 (b1789) in examples/main (`main`); PR #7809 (b3143)
renamed it `llama-cli`; PR #11214 (b4475) turned conversation mode on by itself for a model with a chat template (which
wraps the prompt in the template: `-no-cnv` turns it off); PR #17824 (b7348) made `llama-cli` a chat front-end that
rejects -gan/-gaw ("invalid argument") and the completion tool `llama-completion` (common/arg.cpp registers -gan for
LLAMA_EXAMPLE_COMPLETION and LLAMA_EXAMPLE_PASSKEY, -gaw for LLAMA_EXAMPLE_COMPLETION alone).
"""

from __future__ import annotations

from dataclasses import dataclass

FIX = ("src/llama-kv-cells.h, llama_kv_cells::pos_div: `shift[i] += p_old - pos[i];` -> `shift[i] += pos[i] - p_old;` "
       "(the shift is new - old, as pos_add records it)")
CHECKED = "llama.cpp 0c1e57098 (2026-10-01, vendored in llama-cpp-python 0.3.36)"
PYTHON = "llama-cpp-python 0.3.9 and older serve it; 0.3.10 (llama.cpp b5769) through 0.3.36 break it"


@dataclass(frozen=True)
class Builds:
    first: int  # the first llama.cpp release tag bN of the range
    last: int | None  # the last (None: every later build, checked through CHECKED)
    program: str  # the completion tool's executable there
    no_cnv: bool  # it turns conversation mode on by itself for a model with a chat template (-no-cnv turns it off)
    serves: bool  # seq_div re-rotates divided keys to their new positions: Self-Extend as llama.cpp means it
    source: str  # what starts the range

    @property
    def name(self) -> str:
        return f"b{self.first}–b{self.last}" if self.last else f"b{self.first} and later"


BUILDS = (
    Builds(1789, 3142, "main", False, True, "PR #4815 (52531fdff, 2024-01-08): -gan/-gaw in examples/main"),
    Builds(3143, 4474, "llama-cli", False, True, "PR #7809 (1c641e6aa): main renamed llama-cli"),
    Builds(4475, 5484, "llama-cli", True, True, "PR #11214 (84a44815f): conversation mode on by itself with a chat "
                                                "template; -no-cnv"),
    Builds(5486, 7347, "llama-cli", True, False, "PR #13706 (de2ef53a4, 2025-05-25): pos_div's shift has the wrong sign"),
    Builds(7348, None, "llama-completion", True, False, "PR #17824 (6c2131773): llama-cli is the chat front-end; the "
                                                         "completion tool is llama-completion"),
)
LAST_SERVING = max((b for b in BUILDS if b.serves), key=lambda b: b.first)
CURRENT = BUILDS[-1]

FIRST_BROKEN = min(b.first for b in BUILDS if not b.serves)
BROKEN = (f"llama.cpp b{FIRST_BROKEN} and later (checked through 0c1e57098, 2026-10-01; llama-cpp-python 0.3.10–0.3.36) "
          "record a divided key's shift with the wrong sign (pos_div, src/llama-kv-cells.h), so the K-shift rotates it "
          "to 2·p_old − p_new instead of p_new; the fix is one line: `shift[i] += pos[i] - p_old;`")


def command(build: Builds, model: str, target_len: int, G: int, W: int, chat_template: bool) -> str:
    """The completion tool's line on `build`: the prompt from a file, -b W (the batches ropecli's twin and measurement
    assume: a longer batch is decoded at true positions past Self-Extend's reach), -no-cnv where the tool would wrap a
    chat model's prompt in its template."""
    return (f"{build.program} -m {model} -c {target_len} -gan {G} -gaw {W} -b {W}"
            + (" -no-cnv" if build.no_cnv and chat_template else "") + " -f PROMPT.txt")


def lines(model: str, target_len: int, G: int, W: int, chat_template: bool) -> list[str]:
    """What `export --to llamacpp` prints for Self-Extend: no -gan/-gaw for the builds that break it, the reason and the
    fix in one line, then the line for the last builds that serve it and for a current build carrying the fix."""
    return [f"Self-Extend (G = {G}, W = {W}) is not recommended on current llama.cpp: {BROKEN} "
            "(docs/runtimes.md#self-extend-in-llamacpp: a reproduction to report upstream)",
            f"  on llama.cpp {LAST_SERVING.name} (unpatched, serves it): {command(LAST_SERVING, model, target_len, G, W, chat_template)}",
            f"  on a current llama.cpp with the fix: {command(CURRENT, model, target_len, G, W, chat_template)}"]


def builds_markdown() -> list[str]:
    """The builds as a markdown table (docs/runtimes.md carries it; tests keep the two equal)."""
    rows = ["| llama.cpp builds | completion tool | -no-cnv for a chat model | Self-Extend | from |", "|---|---|---|---|---|"]
    for b in BUILDS:
        rows.append(f"| {b.name} | `{b.program}` | {'yes' if b.no_cnv else 'no (conversation is opt-in)'} | "
                    f"{'served' if b.serves else 'broken (pos_div sign)'} | {b.source} |")
    return rows
