"""llama.cpp: a GGUF copy carrying the schedule, run with `llama-server`; Self-Extend's flags for the builds that serve it.

Two ways in, by architecture (`ropecli.models.gguf_rope`): `rope_freqs.weight` (d/2 divisors of the
frequencies, applied at every length and context size: `llama_model::get_rope_factors`, src/llama-model.cpp)
for the architectures whose loaders create LLM_TENSOR_ROPE_FREQS (llama and its kin); for the others
(qwen2, qwen3, gemma, …, whose loaders never read it) the native `{arch}.rope.scaling.*` keys: yarn or
linear, which llama.cpp computes itself (`ggml_rope_yarn_corr_dims`, `rope_yarn` in ggml). Either way one
rotation at every step: a KV cache never goes stale. It has no dynamic NTK (scaling types none, linear,
yarn, longrope).

Self-Extend's builds: which llama.cpp builds serve Self-Extend, under which program and flags, and the line ropecli prints for each.

llama.cpp runs Self-Extend (`-gan G -gaw W`) in its completion tool only, by moving the positions of the cells in its KV
cache before each batch (`ropecli.models.llamacpp_selfextend_run` runs that loop). From build b5486 on, `seq_div`
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
from pathlib import Path

import numpy as np

from ropecli.deferred import deferred, installed
from ropecli.errors import RopeCliError
from ropecli.export.readback import Applied
from ropecli.export.runs import run_llamacpp
from ropecli.export.runtimes.record import ROPE_FREQS, Runtime, Version
from ropecli.export.writers import to_gguf
from ropecli.maps.position_maps import BoundMap
from ropecli.models.config import gguf_metadata, locate_file
from ropecli.models.gguf_rope import GGUF_ROPE_FREQS_ARCHS, llamacpp_yarn
from ropecli.models.packaged import resolve_model

gguf = deferred("gguf")

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


def selfextend_command(build: Builds, model: str, target_len: int, G: int, W: int, chat_template: bool) -> str:
    """The completion tool's line on `build`: the prompt from a file, -b W (the batches ropecli's twin and measurement
    assume: a longer batch is decoded at true positions past Self-Extend's reach), -no-cnv where the tool would wrap a
    chat model's prompt in its template."""
    return (f"{build.program} -m {model} -c {target_len} -gan {G} -gaw {W} -b {W}"
            + (" -no-cnv" if build.no_cnv and chat_template else "") + " -f PROMPT.txt")


def selfextend_lines(model: str, target_len: int, G: int, W: int, chat_template: bool) -> list[str]:
    """What `export --to llamacpp` prints for Self-Extend: no -gan/-gaw for the builds that break it, the reason and the
    fix in one line, then the line for the last builds that serve it and for a current build carrying the fix."""
    return [f"Self-Extend (G = {G}, W = {W}) is not recommended on current llama.cpp: {BROKEN} "
            "(docs/runtimes.md#self-extend-in-llamacpp: a reproduction to report upstream)",
            f"  on llama.cpp {LAST_SERVING.name} (unpatched, serves it): {selfextend_command(LAST_SERVING, model, target_len, G, W, chat_template)}",
            f"  on a current llama.cpp with the fix: {selfextend_command(CURRENT, model, target_len, G, W, chat_template)}"]


def builds_markdown() -> list[str]:
    """The builds as a markdown table (docs/runtimes.md carries it; tests keep the two equal)."""
    rows = ["| llama.cpp builds | completion tool | -no-cnv for a chat model | Self-Extend | from |", "|---|---|---|---|---|"]
    for b in BUILDS:
        rows.append(f"| {b.name} | `{b.program}` | {'yes' if b.no_cnv else 'no (conversation is opt-in)'} | "
                    f"{'served' if b.serves else 'broken (pos_div sign)'} | {b.source} |")
    return rows


AS_SERVED = "selfextend-llamacpp"  # the map of what llama.cpp's -gan G -gaw W loop does, batch by batch
SE_MAPS = ("selfextend", AS_SERVED)  # llama.cpp serves both as -gan G -gaw W

RECORD = Runtime(
    output="gguf", needs_gguf=True,
    name="llamacpp", label="llama.cpp", aliases=("gguf", "llama.cpp", "llama-cpp", "llama_cpp"), package="llama-cpp-python",
    artefact="a GGUF copy with rope_freqs.weight, or the native {arch}.rope.scaling.* keys (yarn, linear) for "
             "architectures whose loaders ignore rope_freqs; the llama-server line",
    reads="rope_freqs.weight (architectures that create it), {arch}.rope.scaling.type/factor/original_context_length/"
          "attn_factor, {arch}.context_length; llama-server flags override the keys",
    at_length="rope_freqs and the scaling keys at every length and context size",
    decoding="one rotation for every step: the KV cache stays consistent",
    rule=ROPE_FREQS, serves_dynamic=False, maps=SE_MAPS,
    maps_broken=tuple((name, BROKEN) for name in SE_MAPS),
    versions=(
        Version("", "Self-Extend as -gan G -gaw W (W a multiple of G) in the completion tool, by shifting and dividing "
                "KV-cache positions before each batch (ropecli's selfextend-llamacpp map; --backend llamacpp runs the loop "
                f"itself): served by llama.cpp b1789–b5484; {BROKEN}; {PYTHON}",
                "llama.cpp tools/completion/completion.cpp: main loop (\"context extension via Self-Extend\", "
                "GGML_ASSERT(ga_w % ga_n == 0)); src/llama-kv-cells.h: llama_kv_cells::pos_div; common/arg.cpp: "
                "-gan/--grp-attn-n, -gaw/--grp-attn-w",
                older="llama-server served it until PR #9860 removed it; it serves no position map now"),
        Version(">=0.2.0", "rope_freqs.weight applied at every length (llama_model::get_rope_factors)",
                "llama.cpp src/llama-model.cpp: llama_model::get_rope_factors; llama-cpp-python 0.2 bundles it"),
        Version(">=0.2.0", "{arch}.rope.scaling.type yarn|linear with factor and original_context_length",
                "llama.cpp src/llama-model.cpp: llama_model::load_hparams (LLM_KV_ROPE_SCALING_*)"),
    ),
    p_rope="llama.cpp carries Gemma 4's p-RoPE in the global layers' rope_freqs (1e30 past the rotating pairs, "
           "conversion/gemma.py; src/models/gemma4.cpp reads it where !is_swa(il)): any per-pair schedule rides on it, "
           "an attention factor would reach the sliding layers too",
    p_rope_schedules="per-pair",
    temperatures=(("llama4", "applies 0.1 and 8192 hard-coded (src/models/llama4.cpp): other values in the config are "
                               "not served"),
                  ("mistral4", "applies attention.temperature_scale and attention.temperature_length from the GGUF "
                               "(src/models/deepseek2.cpp), kept in the export")),
    temperature_changes=(("mistral4", "reads it from the GGUF key attention.temperature_scale: serve with llama-server "
                                      "--override-kv {arch}.attention.temperature_scale=float:{beta} (common/arg.cpp, "
                                      "--override-kv)"),),
)


def write(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, replace=False) -> dict:
    """A GGUF copy with the schedule (rope_freqs, or the native scaling keys) and the llama-server line."""
    return to_gguf(RECORD.name, spec, geom, out, model, gguf_file, force, replace)


def claims(path) -> bool:
    return path.suffix == ".gguf"


def read_back(artefact, exp):
    """What llama.cpp applies: rope_freqs, or its own yarn/linear from the scaling keys (`gguf_applied`)."""
    return gguf_applied(artefact, exp.target_len), None


def gguf_applied(path: Path, at_len: int) -> list:
    """What llama.cpp applies from a GGUF (`ropecli.export.readback.Applied`): rope_freqs, or its own yarn/linear from
    the scaling keys (Ollama's reader uses it too)."""
    meta = gguf_metadata(path)
    arch = meta.get("general.architecture", "")
    get = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731

    freqs = rope_freqs_of(path)
    d = get("rope.dimension_count") or get("attention.key_length") or \
        (get("embedding_length") and get("attention.head_count") and get("embedding_length") // get("attention.head_count"))
    if not d:
        raise RopeCliError(f"{path}: the GGUF states no rope.dimension_count or head size; is it a model file?")
    factors = np.ones(int(d) // 2) if freqs is None else freqs.astype(np.float64)
    how = "no rope_freqs" if freqs is None else "rope_freqs"
    if freqs is not None and arch not in GGUF_ROPE_FREQS_ARCHS:
        factors, how = None, f"rope_freqs in a '{arch}' GGUF, whose llama.cpp loader ignores it"
    scaling = get("rope.scaling.type", "linear")  # llama.cpp's default when the key is absent
    f = float(get("rope.scaling.factor") or get("rope.scale_linear") or 0.0)  # load_hparams' fallback key
    if factors is not None and scaling == "linear" and f:
        factors, how = factors * f, how + f" x linear factor {f:g}"
    elif scaling == "yarn" and f and freqs is None:  # llama.cpp's own yarn (models.gguf_rope.llamacpp_yarn)

        L0 = int(get("rope.scaling.original_context_length") or get("context_length"))
        factors, scale = llamacpp_yarn(int(d), float(get("rope.freq_base", 10000.0)), f, L0)
        return [Applied(RECORD.name, None, factors, scale * float(get("rope.scaling.attn_factor", 1.0)),
                        float(get("rope.freq_base", 10000.0)), L0, int(get("context_length") or 0) or None, at_len,
                        f"rope.scaling.type yarn, factor {f:g} (llama.cpp's yarn)")]
    elif scaling not in ("none", "linear"):
        factors, how = None, f"rope.scaling.type {scaling}"
    L = get("rope.scaling.original_context_length")
    ctx = get("context_length")
    return [Applied(RECORD.name, None, factors, float(get("rope.scaling.attn_factor", 1.0)), float(get("rope.freq_base", 10000.0)),
                    L and int(L), ctx and int(ctx), at_len, how)]


def rope_freqs_of(path: Path):
    """The F32 `rope_freqs.weight` tensor of a GGUF (a float64 array), or None."""
    if not installed("gguf"):
        raise RopeCliError("reading a GGUF's tensors needs the 'gguf' package; pip install 'ropecli[gguf]'") from None
    for t in gguf.GGUFReader(str(path)).tensors:
        if t.name == "rope_freqs.weight":
            return np.asarray(t.data, dtype=np.float64).reshape(-1)
    return None


def stated_geometry(artefact) -> dict:
    """d, base and L as the GGUF's header states them, as llama.cpp reads them (verify fills the flags' gaps with them)."""
    a = gguf_applied(artefact, 1)[0]
    return {"rotary_dim": a.factors is not None and 2 * len(a.factors), "base": a.rope_theta, "train_len": a.train_len}


def run(artefact, block, model, exp, run_len, cache_dir, gguf_file):
    """llama.cpp serves the GGUF; its effect against the source is compared with ropecli's (`run_llamacpp`)."""
    return run_llamacpp(RECORD.name, artefact, model, exp, run_len, cache_dir, gguf_file)


def unavailable() -> str | None:
    if not installed("llama_cpp"):
        return "llama-cpp-python is not installed (pip install 'ropecli[llamacpp]')"
    return None


def map_lines(position_map: BoundMap, out: str | None, target_len: int, model: str | None = None,
              gguf_file: str | None = None) -> list[str]:
    """How llama.cpp serves a position map written beside the export: Self-Extend's flags, for the builds that serve it
    (`selfextend_lines`; none of today's do), refused in one line where its width is not a multiple of its
    group, as llama.cpp asserts. -no-cnv where the model's GGUF carries a chat template."""
    name, params = position_map.name, position_map.values  # a BoundMap; selfextend(-llamacpp): the same flags
    G, W = int(params["G"]), int(params["W"])
    if W % G:
        raise RopeCliError(f"{name}:G={G},W={W}: llama.cpp needs W a multiple of G (GGML_ASSERT(ga_w % ga_n == 0) in "
                           f"tools/completion); pass W = {W - W % G or G} or {W + G - W % G}")
    lines = selfextend_lines(out or "MODEL.gguf", target_len, G, W, chat_template(model, gguf_file))
    if name != AS_SERVED:  # the paper's formula, per pair
        lines.append("  llama.cpp groups the positions in its KV cache batch by batch, not per pair as the paper's formula "
                     f"ropecli measured: `--map {AS_SERVED}:G={G},W={W}` measures what it serves, and "
                     "`--backend llamacpp` measures the installed build itself")
    return lines


def chat_template(model: str | None, gguf_file: str | None) -> bool:
    """Whether the source GGUF carries tokenizer.chat_template (llama.cpp's completion tool then wraps the prompt)."""
    source = resolve_model(model) if model else None
    if source is None:
        return True  # unknown: -no-cnv is harmless on a model without one
    path = Path(source) if gguf_file is None else locate_file(source, Path(source), gguf_file)
    if path.suffix != ".gguf" or not path.is_file():
        return True
    return "tokenizer.chat_template" in gguf_metadata(path)
