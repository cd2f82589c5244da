"""Opening an evaluation session from the evaluating commands' option groups: the model backend loaded
(spinner, described on stderr), its Evaluator over the text, and a rich progress bar
(`ropecli.evaluation.session` has the session itself). Commands import this module; no command
module imports another.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as ProgressBar

from ropecli.backends.llamacpp_open import open_gguf
from ropecli.backends.load import load_model, resolve_device, resolve_dtype
from ropecli.cli.console import stderr_console
from ropecli.cli.eval_groups import (
    DataOptions,
    EvalOptions,
    ModelOptions,
    PasskeyOptions,
)
from ropecli.errors import RopeCliError
from ropecli.evaluation.bos_policy import describe_bos
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.distributed import quiet_unless_main, setup
from ropecli.evaluation.evaluator import Evaluator
from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.key_tokens import FarRepeat, short_default
from ropecli.evaluation.longppl import LongShort
from ropecli.evaluation.session import Progress, Session
from ropecli.export.vllm_backend import open_vllm
from ropecli.models.memory import (
    available_memory,
    human,
    memory_before_loading,
    reset_peak,
    resident_bytes,
)
from ropecli.report.plots import check_out


class RichProgress(Progress):
    """One rich progress bar on stderr over everything a command evaluates; a task opened inside another shares
    the outer bar and marks its own passes as running. The bar's total is a bound, the most forward passes the
    command can take: a command that decides as it goes (advise's race) reserves its most before its first pass, so
    the total said before that pass ("up to N planned") only shrinks as the command gives back what it no longer
    needs (every command's races do: compare's, advise's). The time left is a range, never one
    number below what remains: from the passes of the block running now (the least left) at the mean seconds a pass
    took, to every pass of the bound at the SLOW_SHARE quantile of them. A log file or a pipe gets no bar frames but
    a line every LINE_EVERY seconds (forward passes done, elapsed, time left)."""

    LINE_EVERY = 30.0  # seconds between progress lines where stderr is not a terminal
    LONG = 10.0  # seconds: an estimate is said once the rest may take longer than this
    SHOW_EVERY = 1.0  # seconds between updates of the time left on a terminal's bar (each sorts the passes' seconds)
    # the high end prices every pass left at this quantile of the measured passes' seconds: a slower kind of pass
    # (a longer length, a map's attention) counts once it is a tenth of them, one stall (a first compile) does not
    SLOW_SHARE = 0.9
    CACHED_S = 0.05  # a tick sooner than this after the last one is a cached window: it computed nothing

    def __init__(self):
        self.bar, self.id = None, None
        self.label, self.total, self.done = "", 0, 0
        self.pass_s: list[tuple[float, int]] = []  # (seconds a pass took, passes) of every tick that computed
        self.started = self.last_tick = self.last_line = self.last_shown = 0.0
        self.said_plan = self.estimated = False
        self.running_until: int | None = None  # `done` once the inner block running now has ticked every pass

    @contextmanager
    def task(self, total: int, label: str):
        if self.bar is not None:  # an inner block: its passes are the least the command still runs
            outer, self.running_until = self.running_until, self.done + total
            try:
                yield
            finally:
                self.running_until = outer
            return

        err = stderr_console()
        self.err, self.label, self.total, self.done = err, label, total, 0
        self.pass_s, self.estimated, self.said_plan, self.running_until = [], False, False, None
        self.started = self.last_tick = self.last_line = self.last_shown = time.monotonic()
        with ProgressBar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                         TextColumn("{task.fields[left]}"), console=err, disable=not err.is_terminal) as bar:
            self.bar, self.id = bar, bar.add_task(label, total=total, left="")
            try:
                yield
            finally:
                self.bar = None

    def say_plan(self) -> None:
        """The bound, said once before the first forward pass: by then the command has reserved what it may take at
        most (a race's rounds), so no later total exceeds it."""
        if not self.said_plan:
            self.said_plan = True
            self.err.print(f"{self.label}: up to {self.total} forward pass{'' if self.total == 1 else 'es'} planned "
                           "(cached ones are reused at once; fewer where a race or a screened search stops early); the "
                           "time they take is said after the first one", highlight=False)

    def grow(self, count: int) -> None:
        if self.bar is not None:
            self.total += count
            self.bar.update(self.id, total=self.total)

    def show(self, label: str) -> None:
        if self.bar is not None:
            self.say_plan()
            self.bar.update(self.id, description=label)

    def advance(self, count: int) -> None:
        if self.bar is None:
            return
        self.say_plan()
        if self.done + count > self.total:  # more than the bound (a guard's passes): the bar grows, never runs over
            self.grow(self.done + count - self.total)
        self.bar.advance(self.id, count)
        now = time.monotonic()
        if now - self.last_tick > self.CACHED_S:
            self.pass_s.append(((now - self.last_tick) / count, count))
        self.done, self.last_tick = self.done + count, now
        line = not self.err.is_terminal and now - self.last_line >= self.LINE_EVERY
        shown = self.err.is_terminal and now - self.last_shown >= self.SHOW_EVERY
        if not (line or shown or (self.pass_s and not self.estimated)):
            return
        left = self.time_left()
        if shown:
            self.last_shown = now
            self.bar.update(self.id, left=self.left_words(left))
        if not self.estimated and left is not None and self.done < self.total:
            self.estimated = True
            if left[1] > self.LONG:
                self.err.print(f"{self.label}: a forward pass takes about {self.mean_pass_s():.1f} s here; at most "
                               f"{self.total - self.done} are left: "
                               f"{said(left)} (the longest lengths take longest; cached windows and a race that stops "
                               "early take less)", highlight=False)
        if line:
            self.last_line = now
            self.err.print(f"{self.label}: {self.done}/{self.total} forward passes, {clock(now - self.started)} elapsed"
                           + (f", {self.left_words(left)}" if left is not None else ""), highlight=False)

    def left_words(self, left: tuple[float, float] | None) -> str:
        if left is None:
            return ""
        return f"{said(left)} left"

    def mean_pass_s(self) -> float:
        return sum(s * n for s, n in self.pass_s) / sum(n for _, n in self.pass_s)

    def slow_pass_s(self) -> float:
        """The SLOW_SHARE quantile of the measured passes' seconds, each tick weighed by its passes."""
        ranked, reach = sorted(self.pass_s), self.SLOW_SHARE * sum(n for _, n in self.pass_s)
        seen = 0
        for s, n in ranked:
            seen += n
            if seen >= reach:
                return s
        return ranked[-1][0]

    def time_left(self) -> tuple[float, float] | None:
        """(least, most) seconds the passes not yet done should take (None before one computed): the least, the
        block running now at the mean seconds a pass took (outside any block, every pass of the bound: nothing
        else decides); the most, every pass of the bound at the SLOW_SHARE quantile, never below the least."""
        if not self.pass_s:
            return None
        bound = max(self.total - self.done, 0)
        running = bound if self.running_until is None else min(max(self.running_until - self.done, 0), bound)
        least = running * self.mean_pass_s()
        return least, max(bound * self.slow_pass_s(), least)


def said(left: tuple[float, float]) -> str:
    """'about 3 s to 2 min 10 s'; 'about 42 s' where both ends read the same, 'up to about 42 s' where the least
    reads 0 s (the block running now has ticked its last pass)."""
    least, most = clock(left[0]), clock(left[1])
    if least == most:
        return f"about {most}"
    return f"up to about {most}" if least == clock(0) else f"about {least} to {most}"


def clock(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 12 min'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def open_session(model: ModelOptions, data: DataOptions, evaluation: EvalOptions, quiet: bool,
                 passkey: PasskeyOptions | None = None, generate: bool = False) -> Session:
    """Load the model (spinner unless `quiet`) and its evaluator; both described on stderr."""
    if evaluation.key_evaluator and evaluation.key_tokens.value != "long-short":
        raise RopeCliError(f"--key-evaluator is the long-short rule's evaluator; add --key-tokens long-short "
                           f"(now --key-tokens {evaluation.key_tokens.value})")
    cache = EvalCache(evaluation.cache_dir, enabled=not evaluation.no_cache)
    cache.check_writable()  # an impossible --cache-dir fails before the model loads
    dist, device = setup(model.device, model.device_map)
    quiet_unless_main(dist)
    err = stderr_console()
    if dist.world > 1:
        err.print(f"torchrun: {dist.world} ranks ({dist.backend}); the windows of every evaluation are split across them",
                  highlight=False)
        if dist.world > data.samples:
            err.print(f"note: {dist.world} ranks but {data.samples} window(s) per length: ranks {data.samples}..{dist.world - 1} "
                      f"stay idle; pass --samples {dist.world} or more to use them all", highlight=False)
    if passkey:
        passkey.check_chat_template()  # a missing template file fails before the model loads
    # before loading: a model that cannot fit is refused here (vLLM sizes its own memory)
    memory = _memory(model, device, evaluation.length) if model.backend != "vllm" else None
    with err.status(f"loading {model.model or 'the built-in model'} …", spinner="dots") if not quiet else nullcontext():
        lm = _load(model, device, dist, evaluation.length)
    err.print(f"model {lm.describe()}", highlight=False)
    loaded_peak = loading_peak()
    prompts = {"depths": tuple(passkey.parsed_depths()), "digits": passkey.checked_digits(),
               "prompt_count": passkey.prompts, "frame": passkey.frame(lm.tokenizer)} if passkey else {}
    inputs = Inputs.load(lm.tokenizer, data.data, data.text_field, samples=data.samples, seed=data.seed, bos=data.bos,
                         **prompts)
    ev = Evaluator(lm, inputs, cache=cache, dist=dist, chunk_tokens=evaluation.chunk_size, score_last=evaluation.score_last,
                   keep_tokens=evaluation.keep_token_losses, generate=generate, key_rule=_key_rule(evaluation, lm, cache, device, dist.is_main))
    per_depth = f", {inputs.prompt_count} prompt(s) per depth" if inputs.prompt_count is not None else ""
    per_depth += f"; task prompts {inputs.frame.describe()}" if inputs.frame.chat else ""
    err.print(f"data {inputs.data_label}; {data.samples} window(s) per length{per_depth}, seed {data.seed}; "
              f"{describe_bos(inputs.bos, lm.tokenizer.convert_ids_to_tokens(inputs.lead))}", highlight=False)
    # the model, the text and its tokens: what every forward pass starts from (host memory: a CPU run's whole story)
    held = resident_bytes("VmRSS") if lm.device == "cpu" and not model.device_map else None
    if memory is not None:
        err.print(memory[0].describe(memory[1], loaded_peak, held), highlight=False)
    plan = {**memory[0].to_json(), "load_peak_bytes": loaded_peak, "held_after_loading_bytes": held,
            "run_peak_bytes": memory[0].run_peak(loaded_peak, held)} if memory else None
    return Session(lm, ev, RichProgress(), memory=plan)


def loading_peak() -> int | None:
    """The process's peak resident memory while the model loaded (a GGUF is dequantized through temporaries), then the
    peak started afresh: the session's JSON reports the evaluation's own peak beside the estimate (`Session.header`)."""
    peak = resident_bytes("VmHWM")
    reset_peak()
    return peak


def _memory(model: ModelOptions, device: str, lengths: list[int] | None):
    """(MemoryPlan, bytes available) of the model at the longest --len, or None where its files cannot be read before
    loading (a hub id not yet downloaded). Weights that cannot fit are refused in one line."""
    dev = resolve_device(device)
    dtype = str(resolve_dtype(model.dtype, dev)).replace("torch.", "")
    try:
        plan = memory_before_loading(model.model, model.gguf_file, dtype, max(lengths) if lengths else None,
                                     gguf_as_is=model.backend == "llamacpp")
    except (RopeCliError, OSError, ValueError):
        return None  # the loader says what is wrong with the files, in its own words
    if plan is None:
        return None
    free = available_memory(dev) if not model.device_map else None
    if free and plan.weights and plan.weights > free:
        raise RopeCliError(f"{model.model or 'the model'} needs {human(plan.weights)} for its weights in {dtype}, more than "
                           f"the {human(free)} available on {dev}; pass --dtype bf16, --device-map auto, or --backend llamacpp "
                           "with a quantized GGUF")
    return plan, free


def _key_rule(evaluation: EvalOptions, lm, cache, device: str, store: bool):
    """--key-tokens as a KeyRule (None for off); long-short loads its --key-evaluator (default: the model)."""
    short = evaluation.key_short or short_default(lm.rope.train_len)
    if evaluation.key_tokens.value == "off":
        return None
    if evaluation.key_tokens.value == "far-repeat":
        return FarRepeat(short)

    judge = lm if evaluation.key_evaluator is None else load_model(evaluation.key_evaluator, device=device)
    return LongShort(judge, lm.tokenizer, cache, trunc_len=short, chunk_tokens=evaluation.chunk_size, store=store)


def _load(model: ModelOptions, device: str, dist, lengths: list[int] | None = None):
    """The model backend of --backend: transformers (torch, RoPE patched in place), llama.cpp (a GGUF) or vLLM's engine
    (`lengths`: the command's, an engine's room)."""
    if model.backend == "vllm":
        if dist.world > 1:
            raise RopeCliError("--backend vllm under torchrun: vLLM spreads one model over devices itself; run one "
                               "process with --tensor-parallel N (or --pipeline-parallel N)")
        return open_vllm(model.model, model.gguf_file, dtype=model.dtype, device=device,
                         tensor_parallel=model.tensor_parallel, pipeline_parallel=model.pipeline_parallel,
                         max_len=max(lengths or [0]), max_model_len=model.max_model_len, train_len=model.train_len,
                         rope_layers=model.rope_layers, trust_remote_code=model.trust_remote_code,
                         refused={"--device-map": model.device_map, "--attn-implementation": model.attn_implementation,
                                  "--base": model.base is not None, "--d": model.d is not None})
    if model.backend == "llamacpp":
        return open_gguf(model.model, model.gguf_file, device=device, train_len=model.train_len,
                         refused={"--dtype": model.dtype != "auto", "--device-map": model.device_map,
                                  "--attn-implementation": model.attn_implementation, "--base": model.base is not None,
                                  "--d": model.d is not None, "--trust-remote-code": model.trust_remote_code,
                                  "--rope-layers": model.rope_layers})

    return load_model(model.model, gguf_file=model.gguf_file, dtype=model.dtype, device=device,
                      device_map=model.device_map, attn_implementation=model.attn_implementation,
                      trust_remote_code=model.trust_remote_code, rotary_dim=model.d, base=model.base,
                      train_len=model.train_len, rope_layers=model.rope_layers, gpu_group=dist.gpu_group)


def check_plot_path(path: str | None, force: bool = False) -> None:
    """Refuse a bad --plot path (or an existing file without --force) before any evaluation runs."""
    if path:
        check_out(path, force, "--plot")
