"""The route of one command from its option to the first forward pass: every ropecli file a call enters, in order,
until the backend's first forward (`window_nll`,
`passkey_scores`, `window_kl`, a task's `score_prompt`), with the number of distinct files and of returns to a
file already left. Run it on two versions of ropecli (a git worktree on PYTHONPATH) to compare.

    python benchmarks/trace_path.py                         # advise --len 512 on the built-in model
    python benchmarks/trace_path.py compare --len 512 --method pi --samples 2
"""

from __future__ import annotations

import os
import sys
import tempfile

FORWARD = {"window_nll", "passkey_scores", "window_kl", "score_prompt"}


class Found(Exception):
    pass


def route(argv: list[str]) -> list[str]:
    """Every module is imported first (a lazily imported command's module-level code is not the route), then only
    function calls are followed (CO_NEWLOCALS: not class bodies, not module code)."""
    import importlib
    import inspect
    import pkgutil

    import ropecli
    from ropecli.cli.app import app

    for info in pkgutil.walk_packages(ropecli.__path__, "ropecli."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)

    root = os.path.dirname(ropecli.__file__)
    files: list[str] = []

    def tracer(frame, event, arg):
        if event != "call":
            return None
        path = frame.f_code.co_filename
        if path.startswith(root) and frame.f_code.co_flags & inspect.CO_NEWLOCALS:  # function calls, not imports
            name = os.path.relpath(path, root)
            if not files or files[-1] != name:
                files.append(name)
            if frame.f_code.co_name in FORWARD and name.startswith("models"):
                raise Found
        return None

    sys.setprofile(None)
    sys.settrace(tracer)
    try:
        app(argv, standalone_mode=False)
    except Found:
        pass
    finally:
        sys.settrace(None)
    return files


def main() -> None:
    os.environ.setdefault("ROPECLI_CACHE_DIR", tempfile.mkdtemp(prefix="ropecli-trace-"))
    argv = sys.argv[1:] or ["advise", "--len", "512", "--candidates", "pi,yarn", "--samples", "2", "--budget", "4",
                            "--out", tempfile.mkdtemp(prefix="ropecli-trace-out-") + "/out"]
    files = route(argv)
    seen, returns = set(), 0
    for f in files:
        returns += f in seen
        seen.add(f)
    entered = {f: files.count(f) for f in dict.fromkeys(files)}
    print(f"ropecli {' '.join(argv[:3])} …: {len(files)} file entries, {len(seen)} distinct files, {returns} returns "
          "to a file already left, before the first forward pass")
    for f, n in sorted(entered.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {f:40s} entered {n}x")


if __name__ == "__main__":
    main()
