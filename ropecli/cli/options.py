"""The options every command shares, defined once: geometry, schedule, output (the evaluating commands' own, which
name the registries: `ropecli.cli.eval_options`). Ranges and choices are click's, checked before any work (a one-line
usage error); the engine's knobs go under one "Advanced" panel (`advanced()`). Renamed flags keep their old spelling
as a hidden alias (`--head-dim`, `--methods`); `--b` is `--param b=…` that repeats."""

from __future__ import annotations

import copy
import typing
from enum import Enum
from typing import Annotated, Callable, Optional

try:  # the click that typer builds its commands with (typer >= 0.26 vendors one; a foreign ParamType shows as <function>)
    from typer._click.types import ParamType
except ImportError:  # older typer: click itself
    from click import ParamType
import typer

from ropecli.tuning.candidates import map_names

MODEL, GEOMETRY, SCHEDULE, DATA, EVALUATION, OUTPUT, SEARCH = "Model", "Geometry", "Schedule", "Data", "Evaluation", "Output", "Search"
ADVANCED = "Advanced"  # the engine's knobs: one panel, last


def advanced(option):
    """The same Annotated option shown under the Advanced panel (an evaluating command's geometry flags: the
    model gives them, where `ropecli freqs` needs them first)."""
    kind, info = typing.get_args(option)
    info = copy.copy(info)
    info.rich_help_panel = ADVANCED
    return Annotated[kind, info]


# The methods each command shows when no --method is given, in one place.
DEFAULT_METHOD = "mixed"  # ppl, freqs, digits, schedule, export, plot freqs
COMPARE_METHODS = "none,pi,ntk-old,ntk-fixed,mixed"  # the article's table
PASSKEY_METHODS = "none,mixed"
KL_METHODS = "pi,ntk-aware,ntk-fixed,dynamic,yarn,llama3,mixed"
OVERVIEW_METHODS = "none,pi,ntk-fixed,mixed"  # `ropecli plot`
PLOT_SCHEDULE_METHODS = "pi,ntk-old,ntk-fixed,mixed,yarn"

# --- the options, one definition each -------------------------------------------------------

class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    hf = "hf"  # transformers rope_parameters block



ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", rich_help_panel=MODEL,
    help="HF hub id, local folder, .gguf file, or builtin / builtin-llama3 (the models ropecli ships). Evaluating "
         "commands load it (default: builtin); "
         "analysis commands read only its config (d, base, L).")]
GgufOpt = Annotated[Optional[str], typer.Option("--gguf-file", rich_help_panel=MODEL, help="GGUF file name inside --model's folder or repo.")]
RopeLayersOpt = Annotated[Optional[str], typer.Option(
    "--rope-layers", rich_help_panel=MODEL,
    help="Models with RoPE per layer type (Gemma 3): which to scale (default full_attention; 'all'; a comma list).")]
DOpt = Annotated[Optional[int], typer.Option(
    "--d", "--rotary-dim", min=1, rich_help_panel=MODEL,
    help="Rotary dimension d of one head (head_dim x partial_rotary_factor). Read from --model (a loaded model's "
         "must match); analysis commands without --model: 128.")]
HeadDimAliasOpt = Annotated[Optional[int], typer.Option("--head-dim", min=1, hidden=True, help="Old name of --d.")]
BaseOpt = Annotated[Optional[float], typer.Option(
    "--base", rich_help_panel=MODEL,
    help="RoPE base (rope_theta); overrides --model's. Analysis commands without --model: 10000.")]
TrainLenOpt = Annotated[Optional[int], typer.Option(
    "--train-len", "-L", min=1, rich_help_panel=MODEL,
    help="Training length L0 (a model that ships a scaled RoPE: the length its schedule was built from, "
         "original_max_position_embeddings); overrides --model's. Analysis commands without --model: 4096.")]
KOpt = Annotated[Optional[float], typer.Option(
    "--k", "--factor", min=1.0, rich_help_panel=SCHEDULE,
    help="Extension factor k (default: target length / L, from --target-len or each --len; 8 without either).")]
TargetLenOpt = Annotated[Optional[int], typer.Option(
    "--target-len", min=1, rich_help_panel=SCHEDULE, help="Target context length; sets k = target-len / L.")]
OneTargetOpt = Annotated[Optional[int], typer.Option(  # export, verify: one target (EvalOptions' --len: lengths to evaluate)
    "--len", "--target-len", min=2, rich_help_panel=SCHEDULE, help="Target context length (sets k = len / L).")]
MethodOpt = Annotated[Optional[list[str]], typer.Option(
    "--method", "-m", rich_help_panel=SCHEDULE, help="Scaling method (see `ropecli methods`); repeat or comma-separate for several. native: the model as "
         "shipped; native+METHOD: METHOD on top of the shipped schedule (k' = N / Ls).")]
MethodsAliasOpt = Annotated[Optional[list[str]], typer.Option("--methods", hidden=True, help="Old name of --method.")]
BOpt = Annotated[Optional[list[float]], typer.Option(
    "--b", rich_help_panel=SCHEDULE, help="--param b=V that repeats (one schedule per value): exponent b of the mixed method (default 0.625; [0, 1] for the seed's family, up to 16 with --param critical=M); repeat for several.")]
ParamOpt = Annotated[Optional[list[str]], typer.Option(
    "--param", metavar="KEY=VALUE", rich_help_panel=SCHEDULE, help="Method parameter KEY=VALUE, e.g. beta_fast=32 (repeatable).")]
FactorsOpt = Annotated[Optional[str], typer.Option(
    "--factors", rich_help_panel=SCHEDULE, help="JSON/CSV file of d/2 factors for the longrope method.")]
LogNOpt = Annotated[bool, typer.Option(
    "--log-n", rich_help_panel=SCHEDULE,
    help="Scale the query at position n by max(1, log_L n) (Su, 'Transformer Upgrade Road 11').")]

JsonOpt = Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT, help="Print JSON for programs instead of tables.")]
PlotOpt = Annotated[Optional[str], typer.Option("--plot", rich_help_panel=OUTPUT, help="Write a PNG/SVG/PDF picture of the results.")]
ConsistentOpt = Annotated[bool, typer.Option(
    "--consistent/--switching", rich_help_panel=OUTPUT,
    help="--consistent (default): short_factor = long_factor, the schedule at every length, so generation through a KV "
         "cache equals one pass in every runtime. --switching: short_factor = 1 (or the shipped schedule), which "
         "transformers switches to the extension only past L (Ls) per forward pass, leaving keys cached before the "
         "switch stale (export measures and prints that damage).")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", rich_help_panel=OUTPUT, help="Overwrite what this command writes (--out, --plot, --export-config) where it exists.")]
OutOpt = Annotated[Optional[str], typer.Option("--out", "-o", rich_help_panel=OUTPUT, help="Output file (.png, .svg or .pdf).")]

class CommaChoices(ParamType):
    """Names from a registry, repeatable and comma-separated (`--metric ppl,kl --metric passkey`), checked by
    click before any work: a wrong one is a one-line usage error naming the choices. `source` is read when a
    value is checked or the help is drawn (a registry, an Enum, a list, or a function returning one), so a
    record registered after start-up is a choice; `{choices}` in the option's help becomes the list then."""

    def __init__(self, source: Callable[[], typing.Iterable] | typing.Iterable, flag: str, metavar: str = "NAME",
                 many: bool = True, spellings: Callable[[], dict[str, str]] | None = None, free: bool = False):
        """`spellings`: {an accepted word, lower case: the one name it stands for} (a runtime's aliases); `free`: any
        text passes, read later (`--map selfextend:G=8,W=64`), the help still lists the registry's names."""
        self.source, self.flag, self.metavar, self.many, self.spellings, self.free = source, flag, metavar, many, spellings, free
        self.name = metavar.lower()

    @property
    def choices(self) -> list[str]:
        found = self.source() if callable(self.source) and not isinstance(self.source, type) else self.source
        return [e if isinstance(e, str) else e.value for e in found]

    def get_metavar(self, param, ctx=None) -> str:
        return self.metavar + (",…" if self.many and not self.free else "")

    def convert(self, value, param, ctx):
        if isinstance(value, list) or self.free:
            return value
        names = [n.strip() for n in str(value).split(",") if n.strip()] if self.many else [str(value)]
        words = self.spellings() if self.spellings else {n: n for n in self.choices}
        bad = [n for n in names if n.lower() not in words and n not in words] or ([] if names else [repr(value)])
        if bad:
            self.fail(f"{self.flag} {bad[0]}: choose from {', '.join(self.choices)}" + (" (a comma list is fine)" if self.many
                      else ""), param, ctx)
        names = [words.get(n, words.get(n.lower())) for n in names]
        return names if self.many else names[0]


def flat_choices(values: list | None, default: tuple[str, ...]) -> list[str]:
    """The chosen values of a CommaChoices option, in order, each once."""
    return list(dict.fromkeys([n for v in (values or [list(default)]) for n in (v if isinstance(v, list) else [v])]))


MapOpt = Annotated[Optional[list[str]], typer.Option(
    "--map", click_type=CommaChoices(map_names, "--map", "MAP[:K=V,…]", free=True), rich_help_panel=SCHEDULE,
    help="A position map at the attention on top of each schedule: {choices}; its parameters after a colon, e.g. "
         "selfextend:G=8,W=64, dca:chunk=6144,local=512 (repeat: every method under every map; MAP@none: on that method "
         "only; `ropecli methods` lists each map's parameters).")]  # freqs, plot freqs and the evaluating commands
