"""What the llama.cpp backend needs around llama-cpp-python: a weight-buffer setting it does not expose, and a cheap
fingerprint of a many-GB GGUF for the cache key."""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path

from ropecli.deferred import deferred
from ropecli.models.config import gguf_layout

api = deferred("llama_cpp.llama")


@contextmanager
def plain_weight_buffers():
    """llama.cpp's model parameter `use_extra_bufts` off while a Llama is built (llama-cpp-python does not
    expose it): the "extra" CPU buffer types repack quantized weights for AMX / AVX-512 kernels, and on this
    project's machine (a Xeon with AMX, under a sandbox) the first decode of a Q4_1 GGUF died with a general
    protection fault in libggml-cpu; F32 files were unaffected. ROPECLI_LLAMACPP_REPACK=1 keeps them on."""
    if os.environ.get("ROPECLI_LLAMACPP_REPACK") == "1":
        yield
        return

    default = api.llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    api.llama_cpp.llama_model_default_params = params
    try:
        yield
    finally:
        api.llama_cpp.llama_model_default_params = default


def file_fingerprint(path: Path, per_tensor: int = 4096) -> str:
    """sha256 over the file's length, its whole header (every key, every tensor's name, shape, type and
    offset) and the first `per_tensor` bytes of every tensor: cheap for a many-GB GGUF (a few MB read),
    and different for two exports of one model that differ only in rope_freqs or attn_factor."""
    data_start, tensors = gguf_layout(path)
    h = hashlib.sha256()
    h.update(str(path.stat().st_size).encode())
    with open(path, "rb") as fh:
        h.update(fh.read(data_start))
        for _, offset in sorted(tensors, key=lambda t: t[1]):
            fh.seek(offset)
            h.update(fh.read(per_tensor))
    return h.hexdigest()[:16]
