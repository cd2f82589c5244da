"""One check of `ropecli verify` (and of a --switching export's decode measurement): what a runtime applies
against what was measured, per layer type. Its own module so that export's writers and verify share it
without importing each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Check:
    runtime: str
    layer_type: str | None
    what: str
    expected: str
    found: str
    ok: bool
