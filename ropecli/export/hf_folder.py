"""A model folder that serves the exported block: the config.json merged with it beside the model's other files (linked,
hard-linked or copied: `place_weights`), made from a model folder, a GGUF (through transformers' own conversion) or a
hub id's config alone; and the checks that nothing a user has is overwritten unless forced. The block itself is
`ropecli.export.hf`'s."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ropecli.deferred import deferred
from ropecli.errors import RopeCliError
from ropecli.export.hf import merged_config, write_json
from ropecli.files import normal_mode
from ropecli.models.config import locate_file
from ropecli.models.packaged import PACKAGE_DIR

transformers = deferred("transformers")


def check_empty_or_forced(out_dir: Path, force: bool) -> None:
    """Refuse to write into a non-empty output folder unless --force."""
    if out_dir.exists() and any(out_dir.iterdir()) and not force:
        raise RopeCliError(f"--out {out_dir} exists and is not empty; pass --force to overwrite, or choose another folder")


def check_writable(path: str, flag: str, force: bool = True) -> None:
    """Refuse, before any work, a path whose folder is missing or not writable, or that exists (unless `force`)."""
    p = Path(path)
    if not p.resolve().parent.is_dir():
        raise RopeCliError(f"{flag} {path}: the folder does not exist; create it or write elsewhere")
    if not os.access(p.resolve().parent, os.W_OK):
        raise RopeCliError(f"{flag} {path}: the folder is not writable; write elsewhere")
    if p.exists() and not force:
        raise RopeCliError(f"{flag} {path} exists; pass --force to overwrite it, or choose another path")


def export_hf_folder(model_dir: Path, out_dir: Path, block: dict | None, force: bool) -> list[str]:
    """Write out_dir/config.json (the model's, merged; as it is for block None) and link every other file of model_dir
    beside it, so `from_pretrained(out_dir)` needs no keyword arguments. Returns the linked file names."""
    config = json.loads((model_dir / "config.json").read_text())
    check_empty_or_forced(out_dir, force)
    out_dir.mkdir(parents=True, exist_ok=True)
    linked = []
    for src in sorted(model_dir.iterdir()):
        if src.name == "config.json" or src.name.startswith("."):
            continue
        dst = out_dir / src.name
        if dst.is_symlink() or dst.exists():
            if dst.is_dir() and not dst.is_symlink():
                continue
            dst.unlink()
        dst.symlink_to(src.resolve())
        linked.append(src.name)
    write_json(str(out_dir / "config.json"), (config if block is None else merged_config(config, block)))
    return linked


WEIGHTS = ("auto", "link", "hardlink", "copy")


def place_weights(out_dir: Path, names: list[str], how: str) -> str:
    """Turn the symbolic links `export_hf_folder` made into hard links (the same file, no space; a copy where the
    filesystem refuses: another device) or copies, so the folder travels with rsync -a or tar; one line saying
    what the folder holds now."""
    own = bool(names) and all((out_dir / name).resolve().is_relative_to(PACKAGE_DIR) for name in names)
    if how == "auto":  # ropecli's own models (tens of MB) are copied: links into the installed package break with it
        how = "copy" if own else "link"
    if how == "link":
        return ("the weights are symbolic links by absolute path: a folder moved to the serving machine with rsync -a "
                "or tar arrives with dangling links; --weights hardlink (same filesystem, no extra space) or --weights "
                "copy puts the files themselves there")
    copied = 0
    for name in names:
        dst = out_dir / name
        src = dst.resolve()
        tmp = dst.with_name(f".{name}.ropecli-tmp")
        if src.is_dir():
            shutil.copytree(src, tmp, symlinks=False)
            copied += 1
        else:
            try:
                if how != "hardlink":
                    raise OSError("copy asked for")
                os.link(src, tmp)
            except OSError:
                shutil.copy2(src, tmp)
                copied += 1
        dst.unlink()
        tmp.rename(dst)
    return (f"the weights are {'hard links' if how == 'hardlink' else 'copies'}"
            + (f" ({copied} copied: another filesystem)" if how == "hardlink" and copied else "")
            + ": the folder is self-contained, rsync -a or tar carries it whole"
            + (" (ropecli's own model: links into the installed package would break when it is upgraded or removed)"
               if own and how == "copy" else ""))


def export_hf_from_gguf(gguf_path: Path, out_dir: Path, block: dict | None, force: bool) -> None:
    """A transformers folder from a GGUF: transformers dequantizes it (float32 safetensors, its
    tokenizer), then the block is merged into the saved config.json. Minutes for a large model."""
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    check_empty_or_forced(out_dir, force)
    work = Path(tempfile.mkdtemp(dir=out_dir.resolve().parent, prefix=f".{out_dir.name}."))
    try:
        kw = {"gguf_file": gguf_path.name}
        model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), **kw)
        model.hf_quantizer = None  # the weights are dequantized already; transformers refuses to save "gguf-quantized" models
        if getattr(model.config, "quantization_config", None) is not None:
            del model.config.quantization_config
        model.save_pretrained(work)
        transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), **kw).save_pretrained(work)
        config = json.loads((work / "config.json").read_text())
        write_json(str(work / "config.json"), (config if block is None else merged_config(config, block)))
        normal_mode(work, folder=True)  # mkdtemp made it 0700: a serving account could not read it
        for f in work.iterdir():  # safetensors writes model.safetensors 0600 (a temporary file renamed into place)
            normal_mode(f, folder=f.is_dir())
        if out_dir.exists():
            shutil.rmtree(out_dir)
        work.rename(out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def export_hf_config(model: str, out_dir: Path, block: dict, force: bool) -> None:
    """For a hub id: out_dir/config.json, the repo's config.json (one small cached download) with the
    block merged; the weights are the user's to place beside it."""
    config = json.loads(locate_file(model, Path(model), "config.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / "config.json").exists() and not force:
        raise RopeCliError(f"--out {out_dir}/config.json exists; pass --force to overwrite it")
    write_json(str(out_dir / "config.json"), (config if block is None else merged_config(config, block)))


