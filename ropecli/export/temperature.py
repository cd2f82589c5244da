"""What each runtime does with a model's position temperature when ropecli exports a schedule for it: one line per
export. ropecli changes frequencies only; the temperature stays the model's, and whether the runtime applies it is
the runtime's: its record's `temperatures` (read in each one's source through the search index, late 2026;
docs/architectures.md has the table).
"""

from __future__ import annotations

from ropecli.export.runtimes import record
from ropecli.models.config import ModelRope


def temperature_line(target: ModelRope, runtime: str) -> str | None:
    """`position temperature llama4(…): vllm applies it …`; None for a model without one."""
    t = target.temperature
    if t is None:
        return None
    said = dict(record(runtime).temperatures).get(t.kind, "ropecli has not read whether it applies it")
    return f"position temperature {t.label} on {t.layers} (the model's own; ropecli changes frequencies only): {runtime} {said}"
