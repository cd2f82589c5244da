"""`ropecli verify PATH`: check what `ropecli export` (or `advise`) wrote against what ropecli measured.
The work is `ropecli.export.readback` (what the runtime applies) and `ropecli.export.verify` (the checks)."""

from __future__ import annotations

from pathlib import Path

import typer

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import show, stderr_console
from ropecli.cli.eval_options import AdviceOpt, ArtefactPathArg, CacheDirOpt, ReadAsOpt, RunLenOpt, RunOpt
from ropecli.cli.groups import ScheduleOptions, TargetGeometryOptions, with_option_groups
from ropecli.cli.options import JsonOpt, LogNOpt
from ropecli.errors import RopeCliError
from ropecli.export.expected import Measured, what_was_measured
from ropecli.export.verify import kind_of, verify_artefact
from ropecli.report.tables import verify_table


@handle_errors
@with_option_groups
def verify(path: ArtefactPathArg, geometry: TargetGeometryOptions, schedule: ScheduleOptions, log_n: LogNOpt = False,
           advice: AdviceOpt = None, runtime: ReadAsOpt = None, run: RunOpt = True,
           run_len: RunLenOpt = None, cache_dir: CacheDirOpt = None, as_json: JsonOpt = False):
    """Read an exported artefact back, rebuild what its runtime applies at the target length, and compare.

    Examples: ropecli verify advise-out/hf          (advice.json beside it says what was measured)
              ropecli verify overrides.json --model meta-llama/Llama-2-7b-hf --method yarn --len 32768
              ropecli verify model-32k.gguf --model model.gguf --method mixed --b 0.75 --len 32768
    """
    target = Path(path)
    if not target.exists():
        raise RopeCliError(f"{path}: no such file or folder; pass what `ropecli export` wrote")
    kind = kind_of(target, runtime)
    g, s = geometry, schedule
    exp, model, gguf_file = what_was_measured(target, kind, Measured(
        g.model, g.gguf_file, g.d, g.base, g.train_len, g.rope_layers, g.k, g.target_len, s.method, s.b, s.param,
        s.factors, log_n, advice))
    if exp.warning:
        stderr_console().print(f"[yellow]warning:[/] {exp.warning}", highlight=False)
    verdict = verify_artefact(target, kind, exp, model, gguf_file, run=run, run_len=run_len, cache_dir=cache_dir,
                              runtime_given=runtime is not None, status=stderr_console().status)
    result = {"path": str(target), "runtime": verdict.runtime, "expected": exp.source, "ok": verdict.ok,
              **({"warning": exp.warning} if exp.warning else {}),
              "verdict": verdict.line(), "checks": [vars(c) for c in verdict.checks], "notes": verdict.notes,
              "not_run": verdict.not_run}
    emit_json(result) if as_json else show(verify_table(verdict, exp, target), wrap=False)
    if not verdict.ok:
        raise typer.Exit(1)
