"""The evaluating commands' own options, defined once (model loading, text, metrics and tasks, maps, searches, advise,
serving, export, verify); choices and help texts read from the registries, so `ropecli freqs` never imports this."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from ropecli.cli.options import ADVANCED, DATA, EVALUATION, OUTPUT, SCHEDULE, SEARCH, CommaChoices
from ropecli.export import registry
from ropecli.evaluation.metrics import REGISTRY, objective_names, ranking_names
from ropecli.evaluation.ruler.templates import TASKS
from ropecli.export.registry import SERVED_BY_DEFAULT
from ropecli.tuning.candidates import candidate_names
from ropecli.tuning.optimizers import Optimizer


# --- the options, one definition each -------------------------------------------------------

class Dtype(str, Enum):
    auto = "auto"  # fp32 on CPU, bf16 on CUDA (fp16 where bf16 is unsupported)
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


class Bos(str, Enum):  # --bos (`ropecli.evaluation.bos_policy.BOS_CHOICES`)
    auto = "auto"  # the tokenizer's own: what it puts before a text by default
    always = "always"  # its BOS token
    never = "never"


class PasskeyScore(str, Enum):  # passkey --score (`ropecli.evaluation.passkey`)
    teacher = "teacher"  # every key token the argmax, teacher-forced
    generate = "generate"  # also the published scripts' rule: 10 greedy tokens, the first integer is the key


class Backend(str, Enum):
    transformers = "transformers"  # the model in torch, RoPE patched in place
    llamacpp = "llamacpp"  # a GGUF inside llama.cpp (llama-cpp-python), scaled by rope_freqs
    vllm = "vllm"  # vLLM's engine: schedules as hf_overrides, maps through ropecli's plugin (`export.vllm_backend`)

BackendOpt = Annotated[Backend, typer.Option("--backend", rich_help_panel=ADVANCED,
    help="transformers; llamacpp: a GGUF evaluated inside llama.cpp as it serves it (needs the llamacpp extra); "
         "vllm: every window and prompt scored in vLLM's engine, as it serves (vLLM here, or ROPECLI_VLLM_PYTHON).")]
TensorParallelOpt = Annotated[int, typer.Option("--tensor-parallel", min=1, rich_help_panel=ADVANCED,
    help="--backend vllm: tensor-parallel ranks vLLM splits each layer over (GPUs; on a CPU, core groups).")]
PipelineParallelOpt = Annotated[int, typer.Option("--pipeline-parallel", min=1, rich_help_panel=ADVANCED,
    help="--backend vllm: pipeline stages vLLM splits the layers over.")]
MaxModelLenOpt = Annotated[Optional[int], typer.Option("--max-model-len", min=2, rich_help_panel=ADVANCED,
    help="--backend vllm: the longest sequence an engine is started for (default: the longest --len plus room "
         "for an answer); a longer one is refused.")]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", rich_help_panel=ADVANCED, help="Weights' dtype (auto: fp32 on CPU, bf16 on CUDA).")]
DeviceOpt = Annotated[str, typer.Option("--device", rich_help_panel=ADVANCED, help="auto | cpu | cuda | cuda:N.")]
DeviceMapOpt = Annotated[Optional[str], typer.Option(
    "--device-map", rich_help_panel=ADVANCED, help="accelerate device map, e.g. auto (models larger than one GPU).")]
AttnOpt = Annotated[Optional[str], typer.Option("--attn-implementation", rich_help_panel=ADVANCED, help="eager | sdpa | flash_attention_2 …")]
TrustOpt = Annotated[bool, typer.Option("--trust-remote-code", rich_help_panel=ADVANCED, help="Allow the model repo's own code (off by default).")]

DataOpt = Annotated[Optional[list[str]], typer.Option(
    "--data", rich_help_panel=DATA, help="Text file, folder, .jsonl, .json, or hf:DATASET (default: held-out Shakespeare).")]
TextFieldOpt = Annotated[str, typer.Option("--text-field", rich_help_panel=ADVANCED, help="JSONL / dataset field holding the text.")]
SamplesOpt = Annotated[int, typer.Option("--samples", min=1, rich_help_panel=DATA, help="Windows per length (documents, YaRN-style).")]
SeedOpt = Annotated[int, typer.Option("--seed", rich_help_panel=ADVANCED, help="Seed of the document sampling.")]
BosOpt = Annotated[Bos, typer.Option("--bos", rich_help_panel=ADVANCED,
    help="What stands before every window and prompt: auto (the tokenizer's own, as lm-eval and RULER tokenize), "
         "always (its BOS token) or never.")]

DepthsOpt = Annotated[str, typer.Option("--depths", rich_help_panel=EVALUATION,
    help="Passkey: where the key sits in the filler, comma list in [0, 1] (0 = right after BOS, farthest from the question).")]
PromptsOpt = Annotated[Optional[int], typer.Option("--prompts", min=1, rich_help_panel=ADVANCED,
    help="Passkey and RULER tasks: prompts per depth and length (default: as many as --samples), e.g. --samples 4 "
         "--prompts 1 for PPL on 4 windows beside one prompt per depth.")]
ChatTemplateOpt = Annotated[str, typer.Option("--chat-template", rich_help_panel=ADVANCED,
    help="Passkey and RULER tasks: none (the raw prompt, as the tasks' authors publish it), auto (the model's own chat "
         "template: the question as the user's turn, the answer prefix opening the assistant's) or a Jinja template FILE.")]
DigitsOpt = Annotated[int, typer.Option("--digits", rich_help_panel=ADVANCED, help="passkey-text: digits of a key (1..20); "
                                         "the published passkey draws its key from 1..50,000 as its source does.")]
TextVariantOpt = Annotated[bool, typer.Option("--text", help="ropecli's real-text passkey (passkey-text: the key once inside "
                                              "the text, no instruction; harder) instead of the published prompt.")]
MetricOpt = Annotated[Optional[list[str]], typer.Option(
    "--metric", click_type=CommaChoices(REGISTRY, "--metric", "METRIC"), rich_help_panel=EVALUATION,
    help="What to measure (repeat or comma-separate): {choices}. ppl shows key-token PPL beside it (--key-tokens); kl runs "
         "at L with the target's k; a RULER task also with --task.")]
TaskOpt = Annotated[Optional[list[str]], typer.Option(
    "--task", click_type=CommaChoices(TASKS, "--task", "TASK"), rich_help_panel=EVALUATION,
    help="RULER's synthetic tasks on your text, a column each, ranked by the answer's NLL (paired by prompt; --depths "
         "places the needle): {choices}. Added to --metric.")]
PasskeyScoreOpt = Annotated[PasskeyScore, typer.Option("--score", rich_help_panel=EVALUATION,
    help="teacher: a key is retrieved when its every token is the argmax (teacher-forced); generate: also as the published "
         "scripts score it (10 greedy tokens, the first integer compared with the key): both in the table and --json.")]
GenerateOpt = Annotated[bool, typer.Option("--generate", rich_help_panel=ADVANCED,
    help="Tasks: also RULER's own score, string match of a greedy answer (tokens_to_generate tokens per prompt); passkey "
         "columns: also the published scripts' score (as passkey --score generate).")]
ObjectiveOpt = Annotated[str, typer.Option(
    "--objective", click_type=CommaChoices(objective_names, "--objective", "METRIC", many=False), rich_help_panel=SEARCH,
    help="What the search minimizes, the mean over the lengths of a metric's estimand: {choices} (ppl: log-PPL; "
         "passkey or a task: the answer's NLL).")]
OptimizerOpt = Annotated[Optimizer, typer.Option("--optimizer", rich_help_panel=ADVANCED,
    help="auto (golden-section for 1 parameter, Nelder-Mead for more), powell, nelder-mead, grid, golden, one-at-a-time "
         "(DPE's detection: each parameter alone over an even grid from the start, then the bests together).")]
CandidatesOpt = Annotated[Optional[list[str]], typer.Option(
    "--candidates", click_type=CommaChoices(candidate_names, "--candidates", "CANDIDATE"), rich_help_panel="Advise",
    help="Narrow the candidates (repeat or comma-separate): {choices}.")]
MaxShortKlOpt = Annotated[Optional[float], typer.Option("--max-short-kl", min=0.0, rich_help_panel=ADVANCED,
    help="Guard: mean KL against the unscaled model at the training length (target's k) at most this, nats/token.")]
MaxShortRegressionOpt = Annotated[Optional[float], typer.Option(
    "--max-short-regression", min=0.0, rich_help_panel=ADVANCED,
    help="Guard: PPL at the training length (with the target's k) may rise at most this many percent over none.")]
HeldOutOpt = Annotated[Optional[int], typer.Option("--held-out", min=2, rich_help_panel=ADVANCED,
    help="Held-out windows for the verdict, after the searched ones (default: as many as --samples).")]
MaxWindowsOpt = Annotated[Optional[int], typer.Option("--max-windows", min=2, rich_help_panel=ADVANCED,
    help="Racing: most windows (passkey: prompts per depth) an undecided candidate gets (default: 4x --samples / --held-out).")]
MarginOpt = Annotated[Optional[float], typer.Option("--margin", min=0.0, rich_help_panel=ADVANCED, help=(
    "Equivalence margin, nats of mean log-PPL: paired 95% interval vs the best inside ±margin = shown equivalent (0.01)."))]
DeltaOpt = Annotated[Optional[float], typer.Option("--delta", min=0.0, rich_help_panel=ADVANCED, help=(
    "Racing's indifference zone, nats: stop once the leader is shown within it of the best at 95% (default --margin; 0: off)."))]
WorkloadOpt = Annotated[Optional[str], typer.Option(
    "--workload", rich_help_panel="Serving",
    help="The request lengths you serve: LENGTH:SHARE pairs (2048:0.6,8192:0.3,16384:0.1) or a file of request lengths, "
         "one per line (histogrammed to powers of two). Ranks every candidate per runtime by its expected loss over "
         "them, each length under the schedule that runtime applies there. Default: the target length alone.")]
ServeRuntimeOpt = Annotated[Optional[list[str]], typer.Option(
    "--runtime", click_type=CommaChoices(registry.names, "--runtime", "RUNTIME", spellings=registry.spellings), rich_help_panel=ADVANCED,
    help="With --workload: {choices} (repeat or comma-separate; default " + ", ".join(SERVED_BY_DEFAULT) + ").")]

AdviseMetricOpt = Annotated[str, typer.Option(
    "--metric", click_type=CommaChoices(ranking_names, "--metric", "METRIC", many=False), rich_help_panel="Advise",
    help="What the searches minimize and the rule ranks by: {choices} (ppl: log-PPL over the targets; key-ppl: log "
         "key-token PPL, the tokens that need the long context, --key-tokens).")]
WithLogNOpt = Annotated[bool, typer.Option("--with-log-n", rich_help_panel=ADVANCED, help="Add every candidate with log-n.")]
TaskGuardOpt = Annotated[Optional[str], typer.Option(
    "--task-guard", click_type=CommaChoices(TASKS, "--task-guard", "TASK", many=False), rich_help_panel="Advise",
    help="A RULER task (docs/tasks.md): out if its answer NLL at the longest target is shown worse (unpaired, one-sided "
         "97.5%, beyond --margin) than the model as shipped at its shipped length.")]
MinPasskeyOpt = Annotated[Optional[float], typer.Option(
    "--min-passkey", min=0.0, max=1.0, rich_help_panel=ADVANCED, help="Out if passkey accuracy at the longest target is below this.")]
BothLogNOpt = Annotated[bool, typer.Option(
    "--with-and-without-log-n", rich_help_panel=ADVANCED, help="Evaluate every method with and without log-n.")]
RaceOpt = Annotated[bool, typer.Option(
    "--race/--no-race", rich_help_panel=SEARCH,
    help="Race: from the first windows (prompts), drop what is shown worse than the leader, double the windows of the "
         "undecided up to --max-windows; forward passes only where they change the verdict. --no-race scores every "
         "candidate (every searched point) on every window. Default: on in search and advise, off in compare.")]
# Flags that mean something else in one command: each variant defined here, beside the shared one.
TunedMethodOpt = Annotated[str, typer.Option(  # search: one method to tune (ScheduleOptions' --method: methods to run)
    "--method", "-m", rich_help_panel=SEARCH, help="The registry method to tune.")]
FixedParamOpt = Annotated[Optional[list[str]], typer.Option(  # search: held fixed while others vary
    "--param", rich_help_panel=SEARCH, help="A parameter held fixed, KEY=VALUE (repeatable).")]
SearchBudgetOpt = Annotated[int, typer.Option("--budget", rich_help_panel=SEARCH, help="Most evaluations the search may spend.")]
AdviseBudgetOpt = Annotated[int, typer.Option(
    "--budget", min=4, rich_help_panel=ADVANCED, help="Evaluations per searched candidate.")]
ExportOutOpt = Annotated[Optional[str], typer.Option(
    "--out", "-o", rich_help_panel=OUTPUT,
    help="hf: a folder (with a local --model) or a .json file; vllm: the overrides .json; gguf: the new .gguf.")]
AdviseOutOpt = Annotated[str, typer.Option(
    "--out", "-o", rich_help_panel=OUTPUT, help="Folder for advice.json, report.md, pictures and configs.")]
ExportConfigOpt = Annotated[Optional[str], typer.Option(
    "--export-config", rich_help_panel=OUTPUT, help="Write the transformers rope_parameters block of the best schedule.")]

LenOpt = Annotated[Optional[list[int]], typer.Option("--len", min=2, rich_help_panel=EVALUATION, help="Evaluation length in tokens (repeatable).")]
ChunkOpt = Annotated[Optional[int], typer.Option(
    "--chunk-size", min=1, rich_help_panel=ADVANCED, help="Tokens per lm_head/cross-entropy chunk (default: 256 MiB of logits).")]
ScoreLastOpt = Annotated[Optional[int], typer.Option(
    "--score-last", min=1, rich_help_panel=ADVANCED, help="Score only the last N tokens of each window.")]
TokenLossesOpt = Annotated[bool, typer.Option(
    "--keep-token-losses", rich_help_panel=ADVANCED,
    help="Keep every prediction's NLL (float16, 2 bytes a token) in the cache with its window, for metrics over "
         "chosen tokens computed later without a forward pass; cached windows without them are computed again.")]
class KeyTokens(str, Enum):
    far_repeat = "far-repeat"  # no model: tokens that continue a span last seen beyond the short context
    long_short = "long-short"  # LongPPL's: an evaluator model's long-short loss contrast
    off = "off"


KeyTokensOpt = Annotated[KeyTokens, typer.Option(
    "--key-tokens", rich_help_panel=ADVANCED,
    help="Key-token PPL beside PPL: far-repeat (default; no evaluator: tokens that continue a 4-token span last seen "
         "more than --key-short tokens back), long-short (LongPPL's rule with --key-evaluator), or off.")]
KeyEvaluatorOpt = Annotated[Optional[str], typer.Option(
    "--key-evaluator", rich_help_panel=ADVANCED,
    help="long-short: the evaluator model that picks the key tokens (a hub id, folder, .gguf or smollm2; default: the "
         "model itself, which must read the whole window).")]
KeyShortOpt = Annotated[Optional[int], typer.Option(
    "--key-short", min=1, rich_help_panel=ADVANCED,
    help="The short context of the key-token rule, tokens (default: 4096, or L/2 where that is less).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", rich_help_panel=ADVANCED, help="Neither read nor write the evaluation cache.")]
CacheDirOpt = Annotated[Optional[str], typer.Option(
    "--cache-dir", rich_help_panel=ADVANCED, help="Evaluation cache folder (default ~/.cache/ropecli or $ROPECLI_CACHE_DIR).")]

# export's and verify's own
ToOpt = Annotated[str, typer.Option(
    "--to", click_type=CommaChoices(registry.names, "--to", "RUNTIME", many=False, spellings=registry.spellings), rich_help_panel=OUTPUT,
    help="The runtime: {choices}; `ropecli runtimes` shows each one's record.")]
WeightsOpt = Annotated[str, typer.Option(
    "--weights", click_type=CommaChoices(("auto", "link", "hardlink", "copy"), "--weights", "HOW", many=False),
    rich_help_panel=OUTPUT,
    help="transformers, a local model folder: its weights beside the merged config.json as symbolic links by absolute "
         "path (link: a folder moved with rsync -a or tar arrives with dangling links), hard links or copies; auto "
         "(default): copies of ropecli's own models (links into the installed package break with it), links otherwise.")]
ReplaceOpt = Annotated[bool, typer.Option(
    "--replace", rich_help_panel=ADVANCED, help="gguf: replace the rope_freqs / scaling the input already has.")]
ArtefactPathArg = Annotated[str, typer.Argument(
    help="What export wrote: a transformers folder, a .json block / vLLM overrides, or a .gguf.")]
AdviceOpt = Annotated[Optional[str], typer.Option(
    "--advice", rich_help_panel=SCHEDULE, help="advise's advice.json (default: the one beside PATH, if any); else give --method and --len.")]
ReadAsOpt = Annotated[Optional[str], typer.Option(
    "--runtime", click_type=CommaChoices(registry.names, "--runtime", "RUNTIME", many=False, spellings=registry.spellings), rich_help_panel=OUTPUT,
    help="Which runtime reads PATH: {choices} (default: the export's manifest, or from the file).")]
RunOpt = Annotated[bool, typer.Option(
    "--run/--no-run", rich_help_panel=EVALUATION, help="Also run the runtime where it is installed (transformers: reload and score a window).")]
RunLenOpt = Annotated[Optional[int], typer.Option(
    "--run-len", min=2, rich_help_panel=ADVANCED, help="Tokens of the window the run scores (default: the target length).")]

# search-b's and search's own
LoOpt = Annotated[float, typer.Option("--lo", min=0.0, max=1.0, rich_help_panel=ADVANCED, help="Lower end of b (0 = PI).")]
HiOpt = Annotated[float, typer.Option("--hi", min=0.0, max=1.0, rich_help_panel=ADVANCED, help="Upper end of b (1 = NTK-fixed).")]
TolOpt = Annotated[float, typer.Option("--tol", min=1e-6, rich_help_panel=ADVANCED, help="Accuracy of the best b.")]
VaryOpt = Annotated[Optional[list[str]], typer.Option(
    "--vary", rich_help_panel=SEARCH, help="A parameter to search, NAME or NAME=LO:HI (repeatable), e.g. --vary b --vary critical=4:32.")]
ReferenceOpt = Annotated[Optional[list[str]], typer.Option(
    "--reference", rich_help_panel=ADVANCED,
    help="Another schedule for the held-out verdict, METHOD[:KEY=VALUE,...][@MAP[:KEY=VALUE,...]] (repeatable), e.g. "
         "mixed:b=0.95, none@selfextend:G=4,W=2048.")]
