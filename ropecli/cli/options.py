"""Every command-line option of ropecli, defined once (the groups that bundle them: `ropecli.cli.groups`).

Ranges and choices are Typer's (`min=`, `max=`, enums, `CommaChoices`), so bad values are refused
before any work; the usage error is one line (`ropecli.cli.common.OneLineErrorsGroup`).

Renamed flags keep their old spelling as a hidden alias: `--head-dim` (now `--d` / `--rotary-dim`),
`--methods` (now repeatable `--method`, comma lists accepted).
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import click
import typer

from ropecli.evaluation.metrics import REGISTRY
from ropecli.evaluation.ruler.templates import TASKS
from ropecli.export.runtimes import SERVED_BY_DEFAULT
from ropecli.cli.runtime_name import RuntimeName
from ropecli.export import runtimes
from ropecli.tuning.candidates import Candidate
from ropecli.tuning.objective import Objective
from ropecli.tuning.optimizers import Optimizer

MODEL, GEOMETRY, SCHEDULE, DATA, EVALUATION, OUTPUT, SEARCH = "Model", "Geometry", "Schedule", "Data", "Evaluation", "Output", "Search"

# The methods each command shows when no --method is given, in one place.
DEFAULT_METHOD = "mixed"  # ppl, freqs, digits, schedule, export, plot freqs
COMPARE_METHODS = "none,pi,ntk-old,ntk-fixed,mixed"  # the article's table
PASSKEY_METHODS = "none,mixed"
KL_METHODS = "pi,ntk-aware,ntk-fixed,dynamic,yarn,llama3,mixed"
OVERVIEW_METHODS = "none,pi,ntk-fixed,mixed"  # `ropecli plot`
PLOT_SCHEDULE_METHODS = "pi,ntk-old,ntk-fixed,mixed,yarn"

# --- the options, one definition each -------------------------------------------------------

class Dtype(str, Enum):
    auto = "auto"  # fp32 on CPU, bf16 on CUDA (fp16 where bf16 is unsupported)
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


class Backend(str, Enum):
    transformers = "transformers"  # the model in torch, RoPE patched in place
    llamacpp = "llamacpp"  # a GGUF inside llama.cpp (llama-cpp-python), scaled by rope_freqs


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"
    hf = "hf"  # transformers rope_parameters block


ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", rich_help_panel=MODEL,
    help="HF hub id, local folder, or .gguf file. Evaluating commands load it (default: the built-in model); "
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
BackendOpt = Annotated[Backend, typer.Option(
    "--backend", rich_help_panel=MODEL,
    help="transformers, or llamacpp: a GGUF evaluated inside llama.cpp as it serves it (needs the llamacpp extra).")]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", rich_help_panel=MODEL, help="Weights' dtype (auto: fp32 on CPU, bf16 on CUDA).")]
DeviceOpt = Annotated[str, typer.Option("--device", rich_help_panel=MODEL, help="auto | cpu | cuda | cuda:N.")]
DeviceMapOpt = Annotated[Optional[str], typer.Option(
    "--device-map", rich_help_panel=MODEL, help="accelerate device map, e.g. auto (models larger than one GPU).")]
AttnOpt = Annotated[Optional[str], typer.Option("--attn-implementation", rich_help_panel=MODEL, help="eager | sdpa | flash_attention_2 …")]
TrustOpt = Annotated[bool, typer.Option("--trust-remote-code", rich_help_panel=MODEL, help="Allow the model repo's own code (off by default).")]

KOpt = Annotated[Optional[float], typer.Option(
    "--k", "--factor", min=1.0, rich_help_panel=SCHEDULE,
    help="Extension factor k (default: target length / L, from --target-len or each --len; 8 without either).")]
TargetLenOpt = Annotated[Optional[int], typer.Option(
    "--target-len", min=1, rich_help_panel=SCHEDULE, help="Target context length; sets k = target-len / L.")]
MethodOpt = Annotated[Optional[list[str]], typer.Option(
    "--method", "-m", rich_help_panel=SCHEDULE, help="Scaling method (see `ropecli methods`); repeat or comma-separate for several. native: the model as "
         "shipped; native+METHOD: METHOD on top of the shipped schedule (k' = N / Ls).")]
MethodsAliasOpt = Annotated[Optional[list[str]], typer.Option("--methods", hidden=True, help="Old name of --method.")]
BOpt = Annotated[Optional[list[float]], typer.Option(
    "--b", rich_help_panel=SCHEDULE, help="Exponent b of the mixed method (default 0.625; [0, 1] for the seed's family, up to 16 with --param critical=M); repeat for several.")]
ParamOpt = Annotated[Optional[list[str]], typer.Option(
    "--param", rich_help_panel=SCHEDULE, help="Method parameter KEY=VALUE, e.g. beta_fast=32 (repeatable).")]
FactorsOpt = Annotated[Optional[str], typer.Option(
    "--factors", rich_help_panel=SCHEDULE, help="JSON/CSV file of d/2 factors for the longrope method.")]
LogNOpt = Annotated[bool, typer.Option(
    "--log-n", rich_help_panel=SCHEDULE,
    help="Scale the query at position n by max(1, log_L n) (Su, 'Transformer Upgrade Road 11').")]

DataOpt = Annotated[Optional[list[str]], typer.Option(
    "--data", rich_help_panel=DATA, help="Text file, folder, .jsonl, .json, or hf:DATASET (default: held-out Shakespeare).")]
TextFieldOpt = Annotated[str, typer.Option("--text-field", rich_help_panel=DATA, help="JSONL / dataset field holding the text.")]
SamplesOpt = Annotated[int, typer.Option("--samples", min=1, rich_help_panel=DATA, help="Windows per length (documents, YaRN-style).")]
SeedOpt = Annotated[int, typer.Option("--seed", rich_help_panel=DATA, help="Seed of the document sampling.")]

DepthsOpt = Annotated[str, typer.Option(
    "--depths", rich_help_panel=EVALUATION,
    help="Passkey: where the key sits in the filler, comma list in [0, 1] (0 = right after BOS, farthest from the question).")]
PromptsOpt = Annotated[Optional[int], typer.Option(
    "--prompts", min=1, rich_help_panel=EVALUATION,
    help="Passkey and RULER tasks: prompts per depth and length (default: as many as --samples), e.g. --samples 4 "
         "--prompts 1 for PPL on 4 windows beside one prompt per depth.")]
DigitsOpt = Annotated[int, typer.Option("--digits", rich_help_panel=EVALUATION, help="Passkey: digits of a key (1..20).")]
class CommaChoices(click.ParamType):
    """Values of an Enum, repeatable and comma-separated (`--metric ppl,kl --metric passkey`), checked by
    click before any work: a wrong one is a one-line usage error naming the choices."""

    def __init__(self, enum: type[Enum] | list[str], flag: str):
        self.choices, self.flag = [e if isinstance(e, str) else e.value for e in enum], flag
        self.name = "[" + "|".join(self.choices) + "],…"

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        names = [n.strip() for n in str(value).split(",") if n.strip()]
        bad = [n for n in names if n not in self.choices] or ([] if names else [repr(value)])
        if bad:
            self.fail(f"{self.flag} {bad[0]}: choose from {', '.join(self.choices)} (a comma list is fine)", param, ctx)
        return names


def flat_choices(values: list | None, default: tuple[str, ...]) -> list[str]:
    """The chosen values of a CommaChoices option, in order, each once."""
    return list(dict.fromkeys([n for v in (values or [list(default)]) for n in (v if isinstance(v, list) else [v])]))


MetricOpt = Annotated[Optional[list[str]], typer.Option(
    "--metric", click_type=CommaChoices(list(REGISTRY), "--metric"), rich_help_panel=EVALUATION,
    help="What to measure: ppl (with key-token PPL beside it, --key-tokens), key-ppl (ranked by key-token PPL), passkey, "
         "kl, or a RULER task (--task) (repeat or comma-separate). kl runs at L with the target's k.")]
TaskOpt = Annotated[Optional[list[str]], typer.Option(
    "--task", click_type=CommaChoices(list(TASKS), "--task"), rich_help_panel=EVALUATION,
    help="RULER's synthetic tasks on your text, a column each, ranked by the answer's NLL (paired by prompt; --depths "
         "places the needle): " + ", ".join(TASKS) + ". Added to --metric.")]
GenerateOpt = Annotated[bool, typer.Option(
    "--generate", rich_help_panel=EVALUATION,
    help="Tasks: also RULER's own score, string match of a greedy answer (tokens_to_generate tokens per prompt).")]
ObjectiveOpt = Annotated[Objective, typer.Option(
    "--objective", rich_help_panel=SEARCH, help="ppl: mean log-PPL over the lengths; passkey: mean passkey answer NLL over the lengths.")]
OptimizerOpt = Annotated[Optimizer, typer.Option(
    "--optimizer", rich_help_panel=SEARCH,
    help="auto (golden-section for 1 parameter, Nelder-Mead for more), powell, nelder-mead, grid, golden.")]
CandidatesOpt = Annotated[Optional[list[str]], typer.Option(
    "--candidates", click_type=CommaChoices(Candidate, "--candidates"), rich_help_panel="Advise",
    help="Narrow the candidates (repeat or comma-separate).")]
MaxShortKlOpt = Annotated[Optional[float], typer.Option(
    "--max-short-kl", min=0.0, rich_help_panel=SEARCH,
    help="Guard: mean KL against the unscaled model at the training length (target's k) at most this, nats/token.")]
MaxShortRegressionOpt = Annotated[Optional[float], typer.Option(
    "--max-short-regression", min=0.0, rich_help_panel=SEARCH,
    help="Guard: PPL at the training length (with the target's k) may rise at most this many percent over none.")]
HeldOutOpt = Annotated[Optional[int], typer.Option(
    "--held-out", min=2, rich_help_panel=SEARCH,
    help="Held-out windows for the verdict, after the searched ones (default: as many as --samples).")]
NoRaceOpt = Annotated[bool, typer.Option(
    "--no-race", rich_help_panel=SEARCH,
    help="Score every searched point on every window (advise: every candidate on every held-out window and "
         "prompt). Default: racing, forward passes only where they change the verdict.")]
MaxWindowsOpt = Annotated[Optional[int], typer.Option(
    "--max-windows", min=2, rich_help_panel=SEARCH,
    help="Racing: most windows (passkey: prompts per depth) an undecided candidate gets (default: 4x --samples / --held-out).")]
MarginOpt = Annotated[Optional[float], typer.Option(
    "--margin", min=0.0, rich_help_panel=SEARCH,
    help="Equivalence margin, nats of mean log-PPL: a candidate whose paired 95% interval against the best lies inside "
         "±margin is shown equivalent and may win the tie-break (default 0.01: PPL within 1%).")]
WorkloadOpt = Annotated[Optional[str], typer.Option(
    "--workload", rich_help_panel="Serving",
    help="The request lengths you serve: LENGTH:SHARE pairs (2048:0.6,8192:0.3,16384:0.1) or a file of request lengths, "
         "one per line (histogrammed to powers of two). Ranks every candidate per runtime by its expected loss over "
         "them, each length under the schedule that runtime applies there. Default: the target length alone.")]
ServeRuntimeOpt = Annotated[Optional[list[str]], typer.Option(
    "--runtime", click_type=RuntimeName("--runtime", many=True), rich_help_panel="Serving",
    help=f"With --workload: {', '.join(runtimes.names())} (repeat or comma-separate; default "
         f"{', '.join(SERVED_BY_DEFAULT)}).")]


class AdviseMetric(str, Enum):
    ppl = "ppl"
    key_ppl = "key-ppl"


AdviseMetricOpt = Annotated[AdviseMetric, typer.Option(
    "--metric", rich_help_panel="Advise",
    help="What the searches minimize and the rule ranks by: ppl (log-PPL over the targets) or key-ppl (log key-token "
         "PPL: the tokens that need the long context, --key-tokens).")]
WithLogNOpt = Annotated[bool, typer.Option("--with-log-n", rich_help_panel="Advise", help="Add every candidate with log-n.")]
TaskGuardOpt = Annotated[Optional[str], typer.Option(
    "--task-guard", click_type=click.Choice(list(TASKS)), rich_help_panel="Advise",
    help="A RULER task (docs/tasks.md): out if its answer NLL at the longest target is shown worse (unpaired, one-sided "
         "97.5%, beyond --margin) than the model as shipped at its shipped length.")]
MinPasskeyOpt = Annotated[Optional[float], typer.Option(
    "--min-passkey", min=0.0, max=1.0, rich_help_panel="Advise", help="Out if passkey accuracy at the longest target is below this.")]
BothLogNOpt = Annotated[bool, typer.Option(
    "--with-and-without-log-n", rich_help_panel=SCHEDULE, help="Evaluate every method with and without log-n.")]
RaceOpt = Annotated[bool, typer.Option(
    "--race", rich_help_panel=SEARCH, help="Race the methods: from --samples windows, drop the ones shown worse than the leader, "
    "double the windows of the undecided ones up to --max-windows (per metric, over all --len).")]
# Flags that mean something else in one command: each variant defined here, beside the shared one.
TunedMethodOpt = Annotated[str, typer.Option(  # search: one method to tune (ScheduleOptions' --method: methods to run)
    "--method", "-m", rich_help_panel=SEARCH, help="The registry method to tune.")]
FixedParamOpt = Annotated[Optional[list[str]], typer.Option(  # search: held fixed while others vary
    "--param", rich_help_panel=SEARCH, help="A parameter held fixed, KEY=VALUE (repeatable).")]
SearchBudgetOpt = Annotated[int, typer.Option("--budget", rich_help_panel=SEARCH, help="Most evaluations the search may spend.")]
AdviseBudgetOpt = Annotated[int, typer.Option(
    "--budget", min=4, rich_help_panel="Advise", help="Evaluations per searched candidate.")]
ExportLenOpt = Annotated[Optional[int], typer.Option(  # export: one target (EvalOptions' --len: lengths to evaluate)
    "--len", min=2, rich_help_panel=SCHEDULE, help="Target context length (the same as --target-len).")]
ExportOutOpt = Annotated[Optional[str], typer.Option(
    "--out", "-o", rich_help_panel=OUTPUT,
    help="hf: a folder (with a local --model) or a .json file; vllm: the overrides .json; gguf: the new .gguf.")]
AdviseOutOpt = Annotated[str, typer.Option(
    "--out", "-o", rich_help_panel=OUTPUT, help="Folder for advice.json, report.md, pictures and configs.")]
ExportConfigOpt = Annotated[Optional[str], typer.Option(
    "--export-config", rich_help_panel=OUTPUT, help="Write the transformers rope_parameters block of the best schedule.")]

LenOpt = Annotated[Optional[list[int]], typer.Option("--len", min=2, rich_help_panel=EVALUATION, help="Evaluation length in tokens (repeatable).")]
ChunkOpt = Annotated[Optional[int], typer.Option(
    "--chunk-size", min=1, rich_help_panel=EVALUATION, help="Tokens per lm_head/cross-entropy chunk (default: 256 MiB of logits).")]
ScoreLastOpt = Annotated[Optional[int], typer.Option(
    "--score-last", min=1, rich_help_panel=EVALUATION, help="Score only the last N tokens of each window.")]
TokenLossesOpt = Annotated[bool, typer.Option(
    "--keep-token-losses", rich_help_panel=EVALUATION,
    help="Keep every prediction's NLL (float16, 2 bytes a token) in the cache with its window, for metrics over "
         "chosen tokens computed later without a forward pass; cached windows without them are computed again.")]
class KeyTokens(str, Enum):
    far_repeat = "far-repeat"  # no model: tokens that continue a span last seen beyond the short context
    long_short = "long-short"  # LongPPL's: an evaluator model's long-short loss contrast
    off = "off"


KeyTokensOpt = Annotated[KeyTokens, typer.Option(
    "--key-tokens", rich_help_panel=EVALUATION,
    help="Key-token PPL beside PPL: far-repeat (default; no evaluator: tokens that continue a 4-token span last seen "
         "more than --key-short tokens back), long-short (LongPPL's rule with --key-evaluator), or off.")]
KeyEvaluatorOpt = Annotated[Optional[str], typer.Option(
    "--key-evaluator", rich_help_panel=EVALUATION,
    help="long-short: the evaluator model that picks the key tokens (a hub id, folder, .gguf or smollm2; default: the "
         "model itself, which must read the whole window).")]
KeyShortOpt = Annotated[Optional[int], typer.Option(
    "--key-short", min=1, rich_help_panel=EVALUATION,
    help="The short context of the key-token rule, tokens (default: 4096, or L/2 where that is less).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", rich_help_panel=EVALUATION, help="Neither read nor write the evaluation cache.")]
CacheDirOpt = Annotated[Optional[str], typer.Option(
    "--cache-dir", rich_help_panel=EVALUATION, help="Evaluation cache folder (default ~/.cache/ropecli or $ROPECLI_CACHE_DIR).")]

JsonOpt = Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT, help="Print JSON for programs instead of tables.")]
PlotOpt = Annotated[Optional[str], typer.Option("--plot", rich_help_panel=OUTPUT, help="Write a PNG/SVG/PDF picture of the results.")]
OutOpt = Annotated[Optional[str], typer.Option("--out", "-o", rich_help_panel=OUTPUT, help="Output file (.png, .svg or .pdf).")]

# export's and verify's own
ToOpt = Annotated[str, typer.Option(
    "--to", click_type=RuntimeName("--to"), rich_help_panel=OUTPUT,
    help=f"The runtime: {', '.join(runtimes.names())} (aliases: {', '.join(a for a in runtimes.spellings() if a not in runtimes.names())}); "
         "`ropecli runtimes` shows each one's record.")]
ConsistentOpt = Annotated[bool, typer.Option(
    "--consistent/--switching", rich_help_panel=OUTPUT,
    help="--consistent (default): short_factor = long_factor, the schedule at every length, so generation through a KV "
         "cache is safe in every runtime. --switching: transformers switches to the extension only past L (Ls) per "
         "forward pass, and keys cached before the switch go stale; its measured decode damage is printed.")]
ForceOpt = Annotated[bool, typer.Option("--force", rich_help_panel=OUTPUT, help="Overwrite an existing --out.")]
ReplaceOpt = Annotated[bool, typer.Option(
    "--replace", rich_help_panel=OUTPUT, help="gguf: replace the rope_freqs / scaling the input already has.")]
ArtefactPathArg = Annotated[str, typer.Argument(
    help="What export wrote: a transformers folder, a .json block / vLLM overrides, or a .gguf.")]
AdviceOpt = Annotated[Optional[str], typer.Option(
    "--advice", rich_help_panel=SCHEDULE, help="advise's advice.json (default: the one beside PATH, if any); else give --method and --len.")]
ReadAsOpt = Annotated[Optional[str], typer.Option(
    "--runtime", click_type=RuntimeName("--runtime"), rich_help_panel=OUTPUT,
    help=f"Which runtime reads PATH: {', '.join(runtimes.names())} (default: the export's manifest, or from the file).")]
RunOpt = Annotated[bool, typer.Option(
    "--run/--no-run", rich_help_panel=EVALUATION, help="Also run the runtime where it is installed (transformers: reload and score a window).")]
RunLenOpt = Annotated[Optional[int], typer.Option(
    "--run-len", min=2, rich_help_panel=EVALUATION, help="Tokens of the window the run scores (default: the target length).")]

# search-b's and search's own
LoOpt = Annotated[float, typer.Option("--lo", min=0.0, max=1.0, rich_help_panel=SEARCH, help="Lower end of b (0 = PI).")]
HiOpt = Annotated[float, typer.Option("--hi", min=0.0, max=1.0, rich_help_panel=SEARCH, help="Upper end of b (1 = NTK-fixed).")]
TolOpt = Annotated[float, typer.Option("--tol", min=1e-6, rich_help_panel=SEARCH, help="Accuracy of the best b.")]
VaryOpt = Annotated[Optional[list[str]], typer.Option(
    "--vary", rich_help_panel=SEARCH, help="A parameter to search, NAME or NAME=LO:HI (repeatable), e.g. --vary b --vary critical=4:32.")]
ReferenceOpt = Annotated[Optional[list[str]], typer.Option(
    "--reference", rich_help_panel=SEARCH,
    help="Another schedule for the held-out verdict, METHOD[:KEY=VALUE,...] (repeatable), e.g. mixed:b=0.95.")]
