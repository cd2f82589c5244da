"""`ropecli export`: a chosen schedule, ready for transformers, vLLM or llama.cpp / Ollama.
The work is `ropecli.export.plan.export_schedule` (advise calls it too); this parses and prints."""

from __future__ import annotations

from ropecli.cli.common import emit_json, geometry_of, handle_errors
from ropecli.cli.console import show
from ropecli.cli.eval_options import ExportOutOpt, ReplaceOpt, ToOpt, WeightsOpt
from ropecli.cli.groups import ScheduleOptions, TargetGeometryOptions, with_option_groups
from ropecli.cli.options import DEFAULT_METHOD, ConsistentOpt, ForceOpt, JsonOpt, LogNOpt, MapOpt
from ropecli.errors import RopeCliError
from ropecli.export.plan import check_export_paths, export_schedule, export_target
from ropecli.maps.map_spelling import one_map
from ropecli.report.tables import export_lines


@handle_errors
@with_option_groups
def export(geometry: TargetGeometryOptions, schedule: ScheduleOptions, log_n: LogNOpt = False, to: ToOpt = "transformers", out: ExportOutOpt = None, consistent: ConsistentOpt = True, force: ForceOpt = False,
           replace: ReplaceOpt = False, weights: WeightsOpt = "auto", position_map: MapOpt = None, as_json: JsonOpt = False):
    """Write a schedule where a runtime reads it: transformers, vLLM, llama.cpp, SGLang or Ollama.

    Examples: ropecli export --model path/to/llama --method mixed --b 0.75 --len 32768 --to transformers --out llama-32k
              ropecli export --model meta-llama/Llama-2-7b-hf --method yarn --len 32768 --to vllm --out overrides.json
              ropecli export --model model.gguf --method mixed --b 0.75 --len 32768 --to llamacpp --out model-32k.gguf
    """
    if geometry.k is None and geometry.target_len is None:
        raise RopeCliError("export needs the target: pass --len N (or --k); at k = 1 every schedule is the unscaled model")
    specs = [s.but(position_map=one_map(position_map)) for s in schedule.specs(DEFAULT_METHOD, log_n_modes=(log_n,))]
    if len(specs) != 1:
        raise RopeCliError("export writes one schedule: one --method, at most one --b")
    check_export_paths(to, out, geometry.model, geometry.gguf_file, force, mapped=bool(specs[0].position_map))
    geom, rope = geometry_of(geometry)
    result = export_schedule(specs[0], geom, export_target(geom, rope, base_given=geometry.base is not None), to, out,
                             model=geometry.model, gguf_file=geometry.gguf_file, force=force, consistent=consistent,
                             replace=replace, weights=weights)
    if as_json:
        return emit_json({k: v for k, v in result.items() if k != "stdout"})
    if "stdout" in result:  # the block alone on stdout, what it means on stderr
        print(result["stdout"])
        return show(export_lines(result, consistent), wrap=False, err=True)
    return show(export_lines(result, consistent), wrap=False)
