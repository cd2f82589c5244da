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

from ropecli.cli.options import (AdviseBudgetOpt, AdviseMetric, AdviseMetricOpt, AttnOpt, Backend, BackendOpt, BaseOpt, BOpt,
                                 CacheDirOpt, CandidatesOpt, ChunkOpt, DataOpt, DepthsOpt, DeviceMapOpt, DeviceOpt, DigitsOpt,
                                 DOpt, Dtype, DtypeOpt, ExportConfigOpt, FactorsOpt, GgufOpt, HeadDimAliasOpt, HeldOutOpt,
                                 JsonOpt, KeyEvaluatorOpt, KeyShortOpt, KeyTokens, KeyTokensOpt, KOpt, LenOpt, LogNOpt,
                                 MarginOpt, MaxShortKlOpt, MaxShortRegressionOpt, MaxWindowsOpt, MethodOpt, MethodsAliasOpt,
                                 MinPasskeyOpt, ModelOpt, TaskGuardOpt, NoCacheOpt, NoRaceOpt, ObjectiveOpt, ParamOpt, PlotOpt, PromptsOpt,
                                 RopeLayersOpt,
                                 SamplesOpt, ScoreLastOpt, SeedOpt, ServeRuntimeOpt, TargetLenOpt, TextFieldOpt,
                                 TokenLossesOpt, TrainLenOpt, TrustOpt, WithLogNOpt, WorkloadOpt, flat_choices)
from ropecli.errors import RopeCliError
from ropecli.tuning.objective import Objective


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
class ModelOptions(ModelSourceOptions):
    """Which model the evaluating commands load, where, and in what precision."""
    backend: BackendOpt = Backend.transformers
    dtype: DtypeOpt = Dtype.auto
    device: DeviceOpt = "auto"
    device_map: DeviceMapOpt = None
    attn_implementation: AttnOpt = None
    trust_remote_code: TrustOpt = False

    def __post_init__(self):
        super().__post_init__()
        self.dtype = Dtype(self.dtype).value
        self.backend = Backend(self.backend).value


@dataclass
class ScheduleOptions:
    """Which schedules: methods, b values, method parameters, a factor file."""
    method: MethodOpt = None  # repeatable, comma lists; None: the command's default methods
    methods: MethodsAliasOpt = None  # the old name of --method
    b: BOpt = None  # mixed exponents, one Spec each
    param: ParamOpt = None  # KEY=VALUE method parameters
    factors: FactorsOpt = None  # a longrope factor file

    def __post_init__(self):
        self.method = [*(self.method or []), *(self.methods or [])] or None

    def specs(self, default: str, factor: float | None = None, log_n_modes: tuple[bool, ...] = (False,)) -> list:
        """One Spec per method, per b, per log-n mode (`ropecli.rope.spec.parse_specs`); `default`: the
        command's methods when no --method is given."""
        from ropecli.rope.spec import parse_specs

        return parse_specs(self.method, self.b, self.param, self.factors, default=default, factor=factor, log_n_modes=log_n_modes)


@dataclass
class DataOptions:
    """The text the evaluating commands score, and how windows are drawn from it."""
    data: DataOpt = None
    text_field: TextFieldOpt = "text"
    samples: SamplesOpt = 4
    seed: SeedOpt = 0


@dataclass
class EvalOptions:
    """Lengths, factor, log-n, and how each evaluation runs and is cached."""
    length: LenOpt = None
    k: KOpt = None
    log_n: LogNOpt = False
    chunk_size: ChunkOpt = None
    score_last: ScoreLastOpt = None
    no_cache: NoCacheOpt = False
    cache_dir: CacheDirOpt = None
    keep_token_losses: TokenLossesOpt = False
    key_tokens: KeyTokensOpt = KeyTokens.far_repeat
    key_evaluator: KeyEvaluatorOpt = None
    key_short: KeyShortOpt = None


@dataclass
class ServingOptions:
    """--workload and --runtime: a candidate's expected loss over the request lengths served, per runtime."""
    workload: WorkloadOpt = None
    runtime: ServeRuntimeOpt = None

    def runtimes(self) -> list[str]:
        from ropecli.export.runtimes import SERVED_BY_DEFAULT

        return flat_choices(self.runtime, SERVED_BY_DEFAULT)

    def plan(self, lengths: list[int] | None) -> tuple[tuple | None, list[int]]:
        """((workload, runtimes) or None, the target lengths: --len, or with --workload alone its longest request)."""
        if not self.workload:
            if self.runtime:
                raise RopeCliError("--runtime ranks the candidates over a --workload; add one, e.g. --workload 2048:0.6,8192:0.4")
            return None, lengths or []
        from ropecli.tuning.workload import parse_workload

        w = parse_workload(self.workload, max(lengths) if lengths else None)
        return (w, self.runtimes()), lengths or [w.longest]


@dataclass
class PasskeyOptions:
    """Passkey prompts: depths of the key and its length (ropecli.evaluation.passkey has the protocol)."""
    depths: DepthsOpt = "0,0.25,0.5,0.75,1"
    digits: DigitsOpt = 5
    prompts: PromptsOpt = None

    def parsed_depths(self) -> list[float]:
        from ropecli.errors import RopeCliError
        from ropecli.evaluation.passkey import check_depths

        try:
            values = [float(x) for x in self.depths.split(",") if x.strip()]
        except ValueError:
            raise RopeCliError(f"--depths {self.depths}: pass numbers in [0, 1], comma-separated, e.g. --depths 0,0.5,1") from None
        if not values:
            raise RopeCliError("--depths is empty; pass e.g. --depths 0,0.5,1")
        return check_depths(values)

    def checked_digits(self) -> int:
        from ropecli.evaluation.passkey import check_digits

        return check_digits(self.digits)


@dataclass
class AdviseOptions:
    """advise's own flags; `plan()` is the tournament's plan (`ropecli.tuning.advise.AdvisePlan`, the same fields)."""
    candidates: CandidatesOpt = None  # None: every candidate
    with_log_n: WithLogNOpt = False  # each candidate also with log-n
    budget: AdviseBudgetOpt = 12  # evaluations per searched candidate
    held_out: HeldOutOpt = None  # held-out windows of the first round; None: --samples
    max_short_kl: MaxShortKlOpt = None  # the constraints: out if broken
    max_short_regression: MaxShortRegressionOpt = None
    min_passkey: MinPasskeyOpt = None
    task_guard: TaskGuardOpt = None  # a RULER task: out if shown worse at the target than as shipped within Ls
    no_race: NoRaceOpt = False  # every candidate on every held-out window
    margin: MarginOpt = None  # None: ropecli.evaluation.inference.MARGIN
    max_windows: MaxWindowsOpt = None  # None: 4x the first round, as far as the text goes
    metric: AdviseMetricOpt = AdviseMetric.ppl  # what the searches minimize and the rule ranks by
    workload: WorkloadOpt = None  # also every candidate served per runtime over these request lengths
    runtime: ServeRuntimeOpt = None

    def plan(self):
        from ropecli.tuning.candidates import CANDIDATES
        from ropecli.tuning.advise import AdvisePlan

        serving = ServingOptions(self.workload, self.runtime)
        serving.plan(None)  # --runtime without --workload, or a bad --workload: one line before the model loads
        chosen = flat_choices(self.candidates, CANDIDATES) if self.candidates else None  # None: every one the model admits
        return AdvisePlan(**{**vars(self), "candidates": chosen,
                             "metric": AdviseMetric(self.metric).value,
                             "runtime": serving.runtimes() if self.workload else None})


@dataclass
class SearchOptions:
    """What search-b and search share: the objective, the guards, the winner's export, racing."""
    objective: ObjectiveOpt = Objective.ppl
    max_short_regression: MaxShortRegressionOpt = None
    max_short_kl: MaxShortKlOpt = None
    export_config: ExportConfigOpt = None
    no_race: NoRaceOpt = False

    def plan(self, evaluation: "EvalOptions", output: "OutputOptions", prompts: "PasskeyOptions"):
        """The search's plan (`ropecli.tuning.search_run.SearchPlan`), its paths checked before the model loads."""
        from ropecli.tuning.search_run import SearchPlan

        plan = SearchPlan(Objective(self.objective).value, self.max_short_regression, self.max_short_kl, self.export_config,
                          self.no_race, output.plot, evaluation.log_n, evaluation.k)
        if plan.prompted:
            prompts.parsed_depths(), prompts.checked_digits()
        plan.check_paths()
        return plan


@dataclass
class OutputOptions:
    """Tables for people, JSON for programs, and a picture."""
    as_json: JsonOpt = False
    plot: PlotOpt = None


def _alias(value, old, new_name: str, old_name: str):
    if old is not None and value is not None and old != value:
        from ropecli.errors import RopeCliError

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
