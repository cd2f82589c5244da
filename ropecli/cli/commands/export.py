"""`ropecli export`: a chosen schedule, ready for transformers, vLLM or llama.cpp / Ollama.
The work is `ropecli.export.plan.export_schedule` (advise calls it too); this parses and prints."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from ropecli.cli.common import emit_json, geometry_of, handle_errors
from ropecli.cli.console import console
from ropecli.errors import RopeCliError
from ropecli.cli.groups import GeometryOptions, ScheduleOptions, with_option_groups
from ropecli.cli.options import DEFAULT_METHOD, OUTPUT, ExportLenOpt, ExportOutOpt, JsonOpt, LogNOpt


class Runtime(str, Enum):
    hf = "hf"
    vllm = "vllm"
    gguf = "gguf"


@handle_errors
@with_option_groups
def export(
    geometry: GeometryOptions,
    schedule: ScheduleOptions,
    log_n: LogNOpt = False,
    length: ExportLenOpt = None,
    to: Annotated[Runtime, typer.Option("--to", rich_help_panel=OUTPUT, help="hf (transformers), vllm, or gguf (llama.cpp / Ollama).")] = Runtime.hf,
    out: ExportOutOpt = None,
    consistent: Annotated[bool, typer.Option("--consistent", rich_help_panel=OUTPUT,
                                             help="short_factor = long_factor: every runtime applies the schedule at every length.")] = False,
    force: Annotated[bool, typer.Option("--force", rich_help_panel=OUTPUT, help="Overwrite an existing --out.")] = False,
    replace: Annotated[bool, typer.Option("--replace", rich_help_panel=OUTPUT, help="gguf: replace the rope_freqs / scaling the input already has.")] = False,
    as_json: JsonOpt = False,
):
    """Write a schedule where a runtime reads it: transformers config, vLLM overrides, or a GGUF with rope_freqs.

    Examples: ropecli export --model path/to/llama --method mixed --b 0.75 --len 32768 --to hf --out llama-32k
              ropecli export --model meta-llama/Llama-2-7b-hf --method yarn --len 32768 --to vllm --out overrides.json
              ropecli export --model model.gguf --method mixed --b 0.75 --len 32768 --to gguf --out model-32k.gguf
    """
    from ropecli.cli.flags import specs_from_flags
    from ropecli.export.plan import check_export_paths, export_schedule, export_target

    if length is not None:
        if geometry.target_len is not None and geometry.target_len != length:
            raise RopeCliError("--len and --target-len both give the target length; pass only one")
        geometry.target_len = length
    if geometry.k is None and geometry.target_len is None:
        raise RopeCliError("export needs the target: pass --len N (or --k); at k = 1 every schedule is the unscaled model")
    specs = specs_from_flags(schedule.method, schedule.b, schedule.param, schedule.factors, default=DEFAULT_METHOD,
                             log_n_modes=(log_n,))
    if len(specs) != 1:
        raise RopeCliError("export writes one schedule: one --method, at most one --b")
    runtime = Runtime(to).value
    check_export_paths(runtime, out, geometry.model, geometry.gguf_file, force)
    geom, rope = geometry_of(geometry)
    result = export_schedule(specs[0], geom, export_target(geom, rope, base_given=geometry.base is not None), runtime, out,
                             model=geometry.model, gguf_file=geometry.gguf_file, force=force, consistent=consistent,
                             replace=replace)
    if as_json:
        return emit_json(result)
    con = console()
    for line in result["lines"]:
        con.print(line, highlight=False, soft_wrap=True)
    con.print("What each runtime does with it:", highlight=False)
    for name, what in result["runtimes"].items():
        con.print(f"  {name}: {what}", highlight=False, soft_wrap=True)
    if not consistent:
        con.print("  (--consistent writes short_factor = long_factor, so that all three apply the schedule at every length)",
                  highlight=False, soft_wrap=True)
