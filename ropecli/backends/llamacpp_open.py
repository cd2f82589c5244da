"""A GGUF opened for the llama.cpp backend (`--backend llamacpp`): the file located, its tokenizer through
transformers (the same token windows as the transformers backend), its RoPE geometry from the header, and whether
it carries a scaling of its own (then only `native` runs)."""

from __future__ import annotations

import os
from pathlib import Path

from ropecli.backends.llamacpp_backend import LlamaCppBackend
from ropecli.deferred import deferred, installed
from ropecli.errors import RopeCliError
from ropecli.models.config import gguf_layout, gguf_metadata, locate_file, read_rope_config
from ropecli.models.llamacpp_files import file_fingerprint
from ropecli.models.llamacpp_selfextend_run import DIVIDES
from ropecli.models.model_rope import ModelRope
from ropecli.models.packaged import resolve_model

transformers = deferred("transformers")
gguf = deferred("gguf")


def open_gguf(name: str | None, gguf_file: str | None, *, device: str = "cpu", train_len: int | None = None,
              refused: dict | None = None) -> LlamaCppBackend:
    """`--model` (a .gguf, a folder or repo with --gguf-file, or a packaged name) for llama.cpp: its
    tokenizer through transformers (the same token windows as the transformers backend), its RoPE
    geometry from the header (--train-len may override L). `refused`: flags llama.cpp cannot honour, set."""
    for flag, given in (refused or {}).items():
        if given:
            raise RopeCliError(f"{flag} does not apply to --backend llamacpp (llama.cpp runs the GGUF's own weights, "
                               f"base and dimensions); leave it out or use --backend transformers")
    source = resolve_model(name)
    if source is None or (gguf_file is None and not source.endswith(".gguf")):
        raise RopeCliError("--backend llamacpp needs a GGUF: --model FILE.gguf, --model DIR --gguf-file NAME, or --model smollm2")
    path = Path(source) if gguf_file is None else locate_file(source, Path(source), gguf_file)
    if not path.is_file():
        raise RopeCliError(f"--model {name}: no such GGUF file")
    rope = read_rope_config(name, gguf_file).overridden(train_len=train_len)

    meta = gguf_metadata(path)
    scaling = meta.get(f"{meta.get('general.architecture', '')}.rope.scaling.type")
    carries = scaling not in (None, "none") or any(name == "rope_freqs.weight" for name, _ in gguf_layout(path)[1])
    backend = load_llamacpp(path, rope, device)
    backend.native_only = carries  # a GGUF with its own scaling runs as shipped; other schedules are refused per run
    return backend


def load_llamacpp(path: Path, rope: ModelRope, device: str = "cpu") -> LlamaCppBackend:
    """A GGUF for llama.cpp, with its geometry `rope` already read."""
    if not installed("llama_cpp"):
        raise RopeCliError("--backend llamacpp needs llama-cpp-python: pip install 'ropecli[llamacpp]' "
                           "(builds llama.cpp from source, ~11 min on 2 cores)") from None

    meta = gguf_metadata(path)

    transformers.utils.logging.set_verbosity_error()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except (KeyError, ValueError, TypeError, OverflowError, IndexError, AttributeError) as exc:  # a truncated or corrupt file
        raise RopeCliError(f"cannot read the tokenizer of '{path}': {exc}; is it a complete GGUF file?") from None
    file_type = meta.get("general.file_type")
    try:
        kind = gguf.LlamaFileType(file_type).name if file_type is not None and installed("gguf") else "unknown"
    except ValueError:
        kind = str(file_type)
    gpu = device.startswith("cuda")  # offloads every layer; needs a llama-cpp-python built with CUDA
    divide = os.environ.get("ROPECLI_LLAMACPP_DIVIDE", "seq_div")  # seq_add: what llama.cpp with the fix would serve
    if divide not in DIVIDES:
        raise RopeCliError(f"ROPECLI_LLAMACPP_DIVIDE={divide}: choose {' or '.join(DIVIDES)} (seq_add: Self-Extend as "
                           "a llama.cpp with the pos_div fix serves it)")
    return LlamaCppBackend(path, tokenizer, rope, file_fingerprint(path), f"gguf {kind}",
                           device=device if gpu else "cpu", gpu_layers=-1 if gpu else 0, divide=divide)
