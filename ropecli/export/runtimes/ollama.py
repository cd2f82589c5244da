"""Ollama: a folder with the GGUF (as `ropecli export --to llamacpp` writes it) and its Modelfile.

Ollama truncates every request to num_ctx unless the Modelfile (or the request) sets it, so the Modelfile says
FROM ./<gguf> and PARAMETER num_ctx = k*L. It accepts no rope parameters (rope_frequency_base/scale were made
no-ops in 0.1.32 and removed in 0.1.35, ollama PR #1983: `api.Runner` in api/types.go); the schedule travels in
the GGUF. From 0.30.0 Ollama runs GGML models with llama-server alone (ollama PR #16031,
llm/llama_server.go: startLlamaServer passes -c num_ctx only), so the GGUF is read as llama.cpp reads it:
rope_freqs for the architectures whose loaders create it, the scaling keys for the others.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ropecli.errors import RopeCliError
from ropecli.export.runs import run_llamacpp
from ropecli.export.runtimes import llamacpp
from ropecli.export.runtimes.llamacpp import gguf_applied
from ropecli.export.runtimes.record import ROPE_FREQS, Runtime, Version
from ropecli.export.writers import source_path, to_gguf
from ropecli.files import atomic_write_text

RECORD = Runtime(
    name="ollama", label="Ollama", command="ollama", output="folder", needs_gguf=True,
    artefact="a folder: the GGUF with the schedule and a Modelfile (FROM, PARAMETER num_ctx = k*L); `ollama create`",
    reads="the GGUF (as llama.cpp reads it: rope_freqs or the scaling keys) and the Modelfile's num_ctx",
    at_length="the GGUF's schedule at every length, requests truncated to num_ctx",
    decoding="one rotation for every step: the KV cache stays consistent",
    rule=ROPE_FREQS, serves_dynamic=False,
    versions=(
        Version(">=0.30.0", "GGUFs run by llama-server (-c num_ctx): rope_freqs and the scaling keys as llama.cpp reads them",
                "ollama PR #16031, llm/llama_server.go: startLlamaServer",
                older="0.1.35 to 0.29 ran a Go engine for some architectures: llama reads rope_freqs "
                      "(model/models/llama/model.go), qwen2 and gemma2 only rope.scaling.factor as linear (no YaRN ramp)"),
        Version(">=0.1.35", "a Modelfile takes num_ctx and no rope parameters", "ollama PR #1983, api/types.go: Runner"),
    ),
)


def write(spec, geom, rope, out, *, model=None, gguf_file=None, force=False, consistent=True, replace=False) -> dict:
    """--out DIR: DIR/<name>-<T>.gguf (llama.cpp's writer) and DIR/Modelfile."""
    folder = Path(out)
    if folder.exists() and any(folder.iterdir()) and not force:
        raise RopeCliError(f"--out {out} exists and is not empty; pass --force to overwrite, or choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{source_path(model, gguf_file).stem}-{geom.target_len}.gguf"
    result = to_gguf(RECORD.name, spec, geom, str(folder / name), model, gguf_file, True, replace)
    modelfile = folder / "Modelfile"
    atomic_write_text(modelfile, f"# ropecli export: {spec.label} at k = {geom.factor:g}; the schedule is in the GGUF "
                                 f"(Ollama reads no rope parameters from a Modelfile)\nFROM ./{name}\n"
                                 f"PARAMETER num_ctx {geom.target_len}\n")
    tag = folder.name.lower().replace("_", "-")
    result["lines"] = [result["lines"][0], f"wrote {modelfile}: FROM ./{name}, PARAMETER num_ctx {geom.target_len}",
                       f"ollama create {tag} -f {modelfile} && ollama run {tag}"]
    result.update(path=str(folder), modelfile=str(modelfile), command=f"ollama create {tag} -f {modelfile}")
    return result


def modelfile_gguf(folder: Path) -> Path:
    """The GGUF a Modelfile's FROM line names (relative to its folder)."""
    text = (folder / "Modelfile").read_text()
    src = next((line.split(None, 1)[1].strip() for line in text.splitlines() if line.upper().startswith("FROM ")), None)
    if not src:
        raise RopeCliError(f"{folder}/Modelfile has no FROM line; export again")
    path = (folder / src).resolve()
    if not path.is_file():
        raise RopeCliError(f"{folder}/Modelfile: FROM {src} is not a file here; export again")
    return path


def num_ctx(folder: Path) -> int | None:
    for line in (folder / "Modelfile").read_text().splitlines():
        words = line.split()
        if len(words) == 3 and words[0].upper() == "PARAMETER" and words[1] == "num_ctx":
            return int(words[2])
    return None


def read_back(artefact, exp):
    """The GGUF as llama.cpp reads it; the declared length is the Modelfile's num_ctx (Ollama truncates to it)."""
    applied = gguf_applied(modelfile_gguf(Path(artefact)), exp.target_len)
    return [replace(a, runtime=RECORD.name, max_len=num_ctx(Path(artefact))) for a in applied], None


def claims(path) -> bool:
    return path.is_dir() and (path / "Modelfile").is_file()


def run(artefact, block, model, exp, run_len, cache_dir, gguf_file):
    """Ollama runs the GGUF with llama-server: llama.cpp runs it here (`ropecli.export.runs.run_llamacpp`), its check
    named for llama.cpp."""
    return run_llamacpp(llamacpp.RECORD.name, modelfile_gguf(Path(artefact)), model, exp, run_len, cache_dir, gguf_file)


def unavailable() -> str | None:
    return llamacpp.unavailable()
