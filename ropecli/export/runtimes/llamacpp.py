"""llama.cpp: a GGUF copy carrying the schedule, run with `llama-server`; Self-Extend's flags for the builds that serve it.

Two ways in, by architecture (`ropecli.models.gguf_rope`): `rope_freqs.weight` (d/2 divisors of the
frequencies, applied at every length and context size: `llama_model::get_rope_factors`, src/llama-model.cpp)
for the architectures whose loaders create LLM_TENSOR_ROPE_FREQS (llama and its kin); for the others
(qwen2, qwen3, gemma, …, whose loaders never read it) the native `{arch}.rope.scaling.*` keys: yarn or
linear, which llama.cpp computes itself (`ggml_rope_yarn_corr_dims`, `rope_yarn` in ggml). Either way one
rotation at every step: a KV cache never goes stale. It has no dynamic NTK (scaling types none, linear,
yarn, longrope).
"""

from __future__ import annotations

from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.export.runtimes import llamacpp_selfextend
from ropecli.export.runtimes.record import ROPE_FREQS, Runtime, Version
from ropecli.models.packaged import resolve_model

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
    maps_broken=tuple((name, llamacpp_selfextend.BROKEN) for name in SE_MAPS),
    versions=(
        Version("", "Self-Extend as -gan G -gaw W (W a multiple of G) in the completion tool, by shifting and dividing "
                "KV-cache positions before each batch (ropecli's selfextend-llamacpp map; --backend llamacpp runs the loop "
                f"itself): served by llama.cpp b1789–b5484; {llamacpp_selfextend.BROKEN}; {llamacpp_selfextend.PYTHON}",
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
    from ropecli.export.writers import to_gguf

    return to_gguf(spec, geom, out, model, gguf_file, force, replace)


def claims(path) -> bool:
    return path.suffix == ".gguf"


def read_back(artefact, exp):
    """What llama.cpp applies: rope_freqs, or its own yarn/linear from the scaling keys (`gguf_applied`)."""
    from ropecli.export.readback import gguf_applied

    return gguf_applied(artefact, exp.target_len), None


def run(artefact, block, model, exp, run_len, cache_dir, gguf_file):
    """llama.cpp serves the GGUF; its effect against the source is compared with ropecli's (`run_llamacpp`)."""
    from ropecli.export.runs import run_llamacpp

    return run_llamacpp(artefact, model, exp, run_len, cache_dir, gguf_file)


def unavailable() -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "not run: llama-cpp-python is not installed (pip install 'ropecli[llamacpp]')"
    return None


def map_lines(position_map: tuple, out: str | None, target_len: int, model: str | None = None,
              gguf_file: str | None = None) -> list[str]:
    """How llama.cpp serves a position map written beside the export: Self-Extend's flags, for the builds that serve it
    (`llamacpp_selfextend.lines`; none of today's do), refused in one line where its width is not a multiple of its
    group, as llama.cpp asserts. -no-cnv where the model's GGUF carries a chat template."""
    name, params = position_map.name, position_map.values  # a BoundMap; selfextend(-llamacpp): the same flags
    G, W = int(params["G"]), int(params["W"])
    if W % G:
        raise RopeCliError(f"{name}:G={G},W={W}: llama.cpp needs W a multiple of G (GGML_ASSERT(ga_w % ga_n == 0) in "
                           f"tools/completion); pass W = {W - W % G or G} or {W + G - W % G}")
    lines = llamacpp_selfextend.lines(out or "MODEL.gguf", target_len, G, W, chat_template(model, gguf_file))
    if name != AS_SERVED:  # the paper's formula, per pair
        lines.append("  llama.cpp groups the positions in its KV cache batch by batch, not per pair as the paper's formula "
                     f"ropecli measured: `--map {AS_SERVED}:G={G},W={W}` measures what it serves, and "
                     "`--backend llamacpp` measures the installed build itself")
    return lines


def chat_template(model: str | None, gguf_file: str | None) -> bool:
    """Whether the source GGUF carries tokenizer.chat_template (llama.cpp's completion tool then wraps the prompt)."""
    from ropecli.models.config import gguf_metadata, locate_file  # numpy: not for the records

    source = resolve_model(model) if model else None
    if source is None:
        return True  # unknown: -no-cnv is harmless on a model without one
    path = Path(source) if gguf_file is None else locate_file(source, Path(source), gguf_file)
    if path.suffix != ".gguf" or not path.is_file():
        return True
    return "tokenizer.chat_template" in gguf_metadata(path)
