"""Which version of a runtime is installed here (its pip distribution's; an executable only as present: ropecli
runs no subprocess), and one line where it is older than an export needs."""

from __future__ import annotations

import shutil
from importlib import metadata

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ropecli.export.runtimes.record import Runtime


def installed_version(rec: Runtime) -> str | None:
    """The installed version of the runtime's package (or its executable's `--version`), None where absent."""
    if rec.package:
        try:
            return metadata.version(rec.package)
        except metadata.PackageNotFoundError:
            return None
    if rec.command and shutil.which(rec.command):  # an executable (Ollama): present; its version is not read here
        return "installed (version not read)"
    return None


def too_old(rec: Runtime, version: str | None = None) -> list[str]:
    """A line per version requirement the installed (or given) version fails: what it does instead."""
    version = version or installed_version(rec)
    if version is None:
        return []
    lines = []
    for req in rec.versions:
        if not req.requirement:
            continue
        try:
            ok = Version(version) in SpecifierSet(req.requirement)
        except (InvalidVersion, InvalidSpecifier):
            continue
        if not ok:
            lines.append(f"{rec.label} {version} is installed here, older than {req.requirement} that {req.what} needs"
                         + (f": {req.older}" if req.older else ""))
    return lines
