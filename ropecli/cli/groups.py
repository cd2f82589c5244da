"""The option groups the commands share, and the decorator that lets a command take a group.

An option group is a dataclass whose fields are Typer options (`ropecli.cli.options`);
`rich_help_panel` puts them under a named panel in `--help`. A command takes a whole group as one
parameter,

    @handle_errors
    @with_option_groups
    def ppl(model: ModelOptions, data: DataOptions, evaluation: EvalOptions, output: OutputOptions, ...): ...

and `with_option_groups` shows Typer the group's fields as the command's own flags, then hands the
command the dataclass built from the parsed values.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass

from ropecli.cli.options import (
    BaseOpt,
    BOpt,
    DOpt,
    FactorsOpt,
    ForceOpt,
    GgufOpt,
    HeadDimAliasOpt,
    JsonOpt,
    KOpt,
    MethodOpt,
    MethodsAliasOpt,
    ModelOpt,
    OneTargetOpt,
    ParamOpt,
    PlotOpt,
    RopeLayersOpt,
    TargetLenOpt,
    TrainLenOpt,
    advanced,
)
from ropecli.errors import RopeCliError
from ropecli.spec import parse_specs


@dataclass
class ModelSourceOptions:
    """Which model, and its RoPE geometry as read from it or given by hand."""
    model: ModelOpt = None  # hub id, folder or .gguf; None: the built-in model
    gguf_file: GgufOpt = None  # a GGUF inside --model's folder or repo
    d: DOpt = None  # rotary dim; None: from the model (analysis without a model: 128)
    head_dim: HeadDimAliasOpt = None  # the old name of --d
    base: BaseOpt = None  # rope_theta; None: from the model
    train_len: TrainLenOpt = None  # L; None: from the model
    rope_layers: RopeLayersOpt = None  # Gemma 3 style models: which RoPE layer types to scale

    def __post_init__(self):
        self.d = _alias(self.d, self.head_dim, "--d", "--head-dim")


@dataclass
class GeometryOptions(ModelSourceOptions):
    """The analysis commands' geometry: from --model's config, or the flags, or LLaMA-2-7B's
    defaults; and the factor k."""
    k: KOpt = None
    target_len: TargetLenOpt = None


@dataclass
class TargetGeometryOptions(ModelSourceOptions):
    """export's and verify's geometry: one target, --len N (or --target-len N, or --k)."""
    k: KOpt = None
    target_len: OneTargetOpt = None


@dataclass
class ScheduleOptions:
    """Which schedules: methods, b values, method parameters, a factor file."""
    method: MethodOpt = None  # repeatable, comma lists; None: the command's default methods
    methods: MethodsAliasOpt = None  # the old name of --method
    b: advanced(BOpt) = None  # --param b=V that repeats: one Spec per value
    param: ParamOpt = None  # KEY=VALUE method parameters
    factors: advanced(FactorsOpt) = None  # a longrope factor file

    def __post_init__(self):
        self.method = [*(self.method or []), *(self.methods or [])] or None
        if self.b and any(p.replace(" ", "").startswith("b=") for p in self.param or []):
            raise RopeCliError("--b and --param b=… both give b; pass one (--b repeats: one schedule per value)")

    def specs(self, default: str, factor: float | None = None, log_n_modes: tuple[bool, ...] = (False,)) -> list:
        """One Spec per method, per b, per log-n mode (`ropecli.spec.parse_specs`); `default`: the
        command's methods when no --method is given."""
        return parse_specs(self.method, self.b, self.param, self.factors, default=default, factor=factor, log_n_modes=log_n_modes)


@dataclass
class OutputOptions:
    """Tables for people, JSON for programs, and a picture."""
    as_json: JsonOpt = False
    plot: PlotOpt = None
    force: advanced(ForceOpt) = False  # --plot (and search's --export-config) may replace an existing file


def _alias(value, old, new_name: str, old_name: str):
    if old is not None and value is not None and old != value:
        raise RopeCliError(f"{new_name} {value} and {old_name} {old} disagree; pass only {new_name}")
    return value if value is not None else old


# --- the decorator --------------------------------------------------------------------------

def with_option_groups(fn):
    """Let a command take option groups: Typer sees every group's fields as keyword options of the
    command (in the command's parameter order); the command receives the dataclass instances."""
    hints = typing.get_type_hints(fn, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for p in inspect.signature(fn).parameters.values():
        ann = hints.get(p.name, p.annotation)
        if dataclasses.is_dataclass(ann):
            field_hints = typing.get_type_hints(ann, include_extras=True)
            fields = dataclasses.fields(ann)
            groups[p.name] = (ann, [f.name for f in fields])
            params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                         annotation=field_hints[f.name]) for f in fields]
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=ann))
    names = [p.name for p in params]
    clash = {n for n in names if names.count(n) > 1}
    if clash:
        raise TypeError(f"{fn.__name__}: option names defined twice: {sorted(clash)}")
    own = [p.name for p in inspect.signature(fn).parameters.values() if p.name not in groups]

    @functools.wraps(fn)
    def wrapper(**parsed):
        call = {name: parsed[name] for name in own}
        for pname, (cls, fields) in groups.items():
            call[pname] = cls(**{f: parsed[f] for f in fields})
        return fn(**call)

    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper
