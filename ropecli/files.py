"""Files written so that nothing half-written is ever left behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` so that a reader (or an interrupt) never sees half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.resolve().parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def normal_mode(path: str | Path, folder: bool = False) -> None:
    """Give `path` the mode open() or mkdir() would have given it under the umask (mkstemp and mkdtemp
    make 0600 / 0700: an export must stay readable by another user, e.g. a serving account)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if folder else 0o666) & ~umask)


def publish(tmp: str | Path, path: str | Path) -> None:
    """Rename a finished temporary file into place with the mode open() would have given it (mkstemp
    makes 0600: an exported GGUF must stay readable by another user, e.g. Ollama's service)."""
    normal_mode(tmp)
    os.replace(tmp, path)
