"""`ropecli runtimes [NAME]`: the runtimes ropecli exports to, each one's record (`ropecli.export.runtimes`): what it
reads, how it applies a schedule at a request and while decoding, the versions that holds for, what is installed."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import show
from ropecli.cli.options import CommaChoices, JsonOpt
from ropecli.export.installed import installed_version, too_old
from ropecli.export.registry import names, records, spellings
from ropecli.report import plain

RuntimeArg = Annotated[Optional[str], typer.Argument(
    click_type=CommaChoices(names, "NAME", "NAME", many=False, spellings=spellings), help="One runtime (default: all).",
    show_default=False)]


@handle_errors
def runtimes(name: RuntimeArg = None, as_json: JsonOpt = False):
    """What each runtime reads, how it applies an export at a request and during decoding, and which versions.

    Examples: ropecli runtimes
              ropecli runtimes vllm --json
    """
    chosen = [records()[name]] if name else list(records().values())
    out = [{**rec.describe(), "installed": installed_version(rec), "too_old": too_old(rec)} for rec in chosen]
    if as_json:
        return emit_json(out if name is None else out[0])
    lines = []
    for r in out:
        lines += [f"{r['name']} ({r['label']}{', aliases ' + ', '.join(r['aliases']) if r['aliases'] else ''}): "
                  f"installed here: {r['installed'] or 'no'}",
                  f"  writes:   {r['artefact']}", f"  reads:    {r['reads']}", f"  at n:     {r['at_length']}",
                  f"  decoding: {r['decoding']}",
                  *[f"  {v['requirement']}: {v['what']} [{v['source']}]" + (f"; older: {v['older']}" if v.get("older") else "")
                    for v in r["versions"]], *[f"  note: {line}" for line in r["too_old"]], ""]
    show([plain(line) for line in lines], wrap=False)
