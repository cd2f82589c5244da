"""The evaluating commands' option groups (the shared ones and the decorator: `ropecli.cli.groups`); each becomes one
record when the command starts (`plan()`, `specs()`): the layers below take records, not flags."""

from __future__ import annotations

from dataclasses import dataclass

from ropecli.cli.eval_options import (
    AdviseBudgetOpt,
    AdviseMetricOpt,
    AttnOpt,
    Backend,
    BackendOpt,
    BosOpt,
    CacheDirOpt,
    CandidatesOpt,
    ChatTemplateOpt,
    ChunkOpt,
    DataOpt,
    DeltaOpt,
    DepthsOpt,
    DeviceMapOpt,
    DeviceOpt,
    DigitsOpt,
    Dtype,
    DtypeOpt,
    ExportConfigOpt,
    HeldOutOpt,
    KeyEvaluatorOpt,
    KeyShortOpt,
    KeyTokens,
    KeyTokensOpt,
    LenOpt,
    MarginOpt,
    MaxModelLenOpt,
    MaxShortKlOpt,
    MaxShortRegressionOpt,
    MaxWindowsOpt,
    MinPasskeyOpt,
    NoCacheOpt,
    ObjectiveOpt,
    PipelineParallelOpt,
    PromptsOpt,
    RaceOpt,
    SamplesOpt,
    ScoreLastOpt,
    SeedOpt,
    ServeRuntimeOpt,
    TaskGuardOpt,
    TensorParallelOpt,
    TextFieldOpt,
    TokenLossesOpt,
    TrustOpt,
    WeightsOpt,
    WithLogNOpt,
    WorkloadOpt,
)
from ropecli.cli.groups import ModelSourceOptions, ScheduleOptions
from ropecli.cli.options import (
    BaseOpt,
    ConsistentOpt,
    DOpt,
    GgufOpt,
    HeadDimAliasOpt,
    KOpt,
    LogNOpt,
    MapOpt,
    RopeLayersOpt,
    TrainLenOpt,
    advanced,
    flat_choices,
)
from ropecli.errors import RopeCliError
from ropecli.evaluation.chat_template import check_template_file, prompt_frame
from ropecli.evaluation.metrics import metric_record
from ropecli.evaluation.passkey import check_depths, check_digits
from ropecli.export.registry import SERVED_BY_DEFAULT, record
from ropecli.maps.map_spelling import one_map, under_maps
from ropecli.models.config import read_rope_config
from ropecli.rope.target import Target
from ropecli.tuning.candidates import candidate_names
from ropecli.tuning.search_run import SearchPlan
from ropecli.tuning.tournament import AdvisePlan
from ropecli.tuning.workload import parse_workload


@dataclass
class ModelOptions(ModelSourceOptions):
    """Which model the evaluating commands load, where, and in what precision."""
    gguf_file: advanced(GgufOpt) = None  # the geometry: read from the model, given by hand only to override it
    d: advanced(DOpt) = None
    head_dim: HeadDimAliasOpt = None
    base: advanced(BaseOpt) = None
    train_len: advanced(TrainLenOpt) = None
    rope_layers: advanced(RopeLayersOpt) = None
    backend: BackendOpt = Backend.transformers
    dtype: DtypeOpt = Dtype.auto
    device: DeviceOpt = "auto"
    device_map: DeviceMapOpt = None
    attn_implementation: AttnOpt = None
    trust_remote_code: TrustOpt = False
    tensor_parallel: TensorParallelOpt = 1
    pipeline_parallel: PipelineParallelOpt = 1
    max_model_len: MaxModelLenOpt = None

    def __post_init__(self):
        super().__post_init__()
        self.dtype = Dtype(self.dtype).value
        self.backend = Backend(self.backend).value
        given = [flag for flag, on in (("--tensor-parallel", self.tensor_parallel != 1),
                                       ("--pipeline-parallel", self.pipeline_parallel != 1),
                                       ("--max-model-len", self.max_model_len is not None)) if on]
        if given and self.backend != "vllm":
            raise RopeCliError(f"{given[0]} is vLLM's: add --backend vllm (with --backend {self.backend}, "
                               "--device-map auto spreads a model over GPUs)")

    def engine_flags(self) -> tuple[str, ...]:
        """The flags that chose the engine, as a command that reproduces a run spells them (none at the defaults)."""
        flags = [("--backend", self.backend, "transformers"), ("--tensor-parallel", self.tensor_parallel, 1),
                 ("--pipeline-parallel", self.pipeline_parallel, 1), ("--max-model-len", self.max_model_len, None)]
        return tuple(x for flag, value, default in flags if value != default for x in (flag, str(value)))


@dataclass
class MappedScheduleOptions(ScheduleOptions):  # the evaluating commands' schedules: each under each --map
    position_map: MapOpt = None

    def specs(self, default: str, factor: float | None = None, log_n_modes: tuple[bool, ...] = (False,)) -> list:
        return under_maps(super().specs(default, factor, log_n_modes), self.position_map)


@dataclass
class DataOptions:
    """The text the evaluating commands score, and how windows are drawn from it."""
    data: DataOpt = None
    text_field: TextFieldOpt = "text"
    samples: SamplesOpt = 4
    seed: SeedOpt = 0
    bos: BosOpt = "auto"

    def __post_init__(self):
        self.bos = getattr(self.bos, "value", self.bos)


@dataclass
class EvalOptions:
    """Lengths, factor, log-n, and how each evaluation runs and is cached."""
    length: LenOpt = None
    k: KOpt = None
    log_n: advanced(LogNOpt) = False
    chunk_size: ChunkOpt = None
    score_last: ScoreLastOpt = None
    no_cache: NoCacheOpt = False
    cache_dir: CacheDirOpt = None
    keep_token_losses: TokenLossesOpt = False
    key_tokens: KeyTokensOpt = KeyTokens.far_repeat
    key_evaluator: KeyEvaluatorOpt = None
    key_short: KeyShortOpt = None

    def target(self, rope, lengths: list[int] | None = None, default: bool = True):
        """The Target record (`ropecli.rope.target`) of the loaded model: --len (or `lengths`), --k; 8 L by default."""
        return Target.of(rope, lengths or self.length, self.k, default)

    def target_before_loading(self, model: "ModelOptions", lengths: list[int] | None = None, default: bool = True):
        """(the model's RoPE as its config states it, `target` of it) before the weights load, so that what needs no
        model fails in a second, not after loading (20 s on SmolLM2): a --len within L, a --k and --len that disagree.
        None where the config cannot be read without the weights' download (the loader then says what is wrong, in its
        words), or where --train-len overrides the model's L."""
        if model.train_len is not None:
            return None
        try:
            rope = read_rope_config(model.model, model.gguf_file, model.rope_layers)
        except (RopeCliError, OSError, ValueError):
            return None
        return rope, self.target(rope, lengths, default)


@dataclass
class ServingOptions:
    """--workload and --runtime: a candidate's expected loss over the request lengths served, per runtime."""
    workload: WorkloadOpt = None
    runtime: ServeRuntimeOpt = None

    def runtimes(self) -> list:
        """The runtimes of --runtime (default: transformers, vLLM, llama.cpp), each resolved once into its record."""
        return [record(name) for name in flat_choices(self.runtime, SERVED_BY_DEFAULT)]

    def plan(self, lengths: list[int] | None) -> tuple[tuple | None, list[int]]:
        """((workload, runtimes) or None, the target lengths: --len, or with --workload alone its longest request)."""
        if not self.workload:
            if self.runtime:
                raise RopeCliError("--runtime ranks the candidates over a --workload; add one, e.g. --workload 2048:0.6,8192:0.4")
            return None, lengths or []

        w = parse_workload(self.workload, max(lengths) if lengths else None)
        return (w, self.runtimes()), lengths or [w.longest]


@dataclass
class PasskeyOptions:
    """Passkey prompts: depths of the key and its length (ropecli.evaluation.passkey has the protocol)."""
    depths: DepthsOpt = "0,0.25,0.5,0.75,1"
    digits: DigitsOpt = 5
    prompts: PromptsOpt = None
    chat_template: ChatTemplateOpt = "none"

    def frame(self, tokenizer):
        """--chat-template as the PromptFrame of the loaded model's tokenizer (`ropecli.evaluation.chat_template`)."""
        return prompt_frame(self.chat_template, tokenizer)

    def check_chat_template(self) -> None:
        """A --chat-template FILE that is not there fails before the model loads."""
        if self.chat_template not in ("none", "auto"):
            check_template_file(self.chat_template)

    def parsed_depths(self) -> list[float]:
        try:
            values = [float(x) for x in self.depths.split(",") if x.strip()]
        except ValueError:
            raise RopeCliError(f"--depths {self.depths}: pass numbers in [0, 1], comma-separated, e.g. --depths 0,0.5,1") from None
        if not values:
            raise RopeCliError("--depths is empty; pass e.g. --depths 0,0.5,1")
        return check_depths(values)

    def checked_digits(self) -> int:
        return check_digits(self.digits)


@dataclass
class AdviseOptions:
    """advise's own flags; `plan()` is the tournament's plan (`ropecli.tuning.tournament.AdvisePlan`, the same fields)."""
    candidates: CandidatesOpt = None  # None: every candidate
    with_log_n: WithLogNOpt = False  # each candidate also with log-n
    budget: AdviseBudgetOpt = 12  # evaluations per searched candidate
    held_out: HeldOutOpt = None  # held-out windows of the first round; None: --samples
    max_short_kl: MaxShortKlOpt = None  # the constraints: out if broken
    max_short_regression: MaxShortRegressionOpt = None
    min_passkey: MinPasskeyOpt = None
    task_guard: TaskGuardOpt = None  # a RULER task: out if shown worse at the target than as shipped within Ls
    race: RaceOpt = True  # racing; --no-race: every candidate on every held-out window
    margin: MarginOpt = None  # None: ropecli.evaluation.inference.MARGIN
    delta: DeltaOpt = None  # racing's indifference zone; None: the margin, 0: off
    max_windows: MaxWindowsOpt = None  # None: 4x the first round, as far as the text goes
    metric: AdviseMetricOpt = "ppl"  # what the searches minimize and the rule ranks by
    workload: WorkloadOpt = None  # also every candidate served per runtime over these request lengths
    runtime: ServeRuntimeOpt = None
    weights: WeightsOpt = "auto"  # the transformers export's weights: copies of ropecli's own model, links otherwise

    def plan(self):
        serving = ServingOptions(self.workload, self.runtime)
        serving.plan(None)  # --runtime without --workload, or a bad --workload: one line before the model loads
        chosen = flat_choices(self.candidates, candidate_names()) if self.candidates else None  # None: every one the model admits
        return AdvisePlan(**{**vars(self), "candidates": chosen, "metric": metric_record(self.metric),
                             "task_guard": metric_record(self.task_guard) if self.task_guard else None,
                             "runtime": serving.runtimes() if self.workload else None})


@dataclass
class SearchOptions:
    """What search-b and search share: the objective, the guards, the winner's export, racing."""
    objective: ObjectiveOpt = "ppl"
    max_short_regression: MaxShortRegressionOpt = None
    max_short_kl: MaxShortKlOpt = None
    export_config: ExportConfigOpt = None
    consistent: ConsistentOpt = True
    race: RaceOpt = True

    def plan(self, evaluation: EvalOptions, output, prompts: PasskeyOptions, model: ModelOptions,
             position_map: list[str] | None = None):
        """The search's plan (`ropecli.tuning.search_run.SearchPlan`), its paths checked before the model loads."""
        plan = SearchPlan(metric_record(self.objective), self.max_short_regression, self.max_short_kl, self.export_config,
                          self.race, output.plot, evaluation.log_n, evaluation.k, one_map(position_map), self.consistent,
                          output.force, (model.model, model.gguf_file))
        if plan.prompted:
            prompts.parsed_depths(), prompts.checked_digits()
        plan.check_paths()
        return plan
