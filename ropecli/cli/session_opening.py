"""Opening an evaluation session from the evaluating commands' option groups: the model backend loaded
(spinner, described on stderr), its Evaluator over the text, and a rich progress bar
(`ropecli.evaluation.session` has the session itself). Commands import this module; no command
module imports another.
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext

from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as ProgressBar

from ropecli.backends.llamacpp_open import open_gguf
from ropecli.backends.load import load_model, resolve_device, resolve_dtype
from ropecli.cli.console import stderr_console
from ropecli.cli.eval_groups import DataOptions, EvalOptions, ModelOptions, PasskeyOptions
from ropecli.errors import RopeCliError
from ropecli.evaluation.bos_policy import describe_bos
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.distributed import quiet_unless_main, setup
from ropecli.evaluation.evaluator import Evaluator
from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.key_tokens import FarRepeat, short_default
from ropecli.evaluation.longppl import LongShort
from ropecli.evaluation.session import Progress, Session
from ropecli.models.memory import available_memory, human, memory_before_loading, reset_peak, resident_bytes
from ropecli.report.plots import check_out


class RichProgress(Progress):
    """One rich progress bar (ETA) on stderr over everything a command evaluates; a task opened inside
    another shares the outer bar. Before the first forward pass it says how many it plans; after the first one it
    computes, the time the rest should take. A log file or a pipe gets no bar frames but a line every
    LINE_EVERY seconds (forward passes done, elapsed, time left)."""

    LINE_EVERY = 30.0  # seconds between progress lines where stderr is not a terminal
    LONG = 10.0  # seconds: an estimate is said once the rest is expected to take longer than this

    def __init__(self):
        self.bar, self.id = None, None
        self.label, self.total, self.done = "", 0, 0
        self.computed, self.computing_s = 0, 0.0  # forward passes that ran (not cache hits) and their seconds
        self.started = self.last_tick = self.last_line = 0.0
        self.estimated = False

    @contextmanager
    def task(self, total: int, label: str):
        if self.bar is not None:
            yield
            return

        err = stderr_console()
        self.err, self.label, self.total, self.done = err, label, total, 0
        self.computed, self.computing_s, self.estimated = 0, 0.0, False
        self.started = self.last_tick = self.last_line = time.monotonic()
        if total:  # a race plans its passes round by round (a task opened at 0 grows)
            err.print(f"{label}: up to {total} forward pass{'' if total == 1 else 'es'} planned (cached ones are reused "
                      "at once); the time they take is said after the first one", highlight=False)
        with ProgressBar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("ETA"), TimeRemainingColumn(), console=err, disable=not err.is_terminal) as bar:
            self.bar, self.id = bar, bar.add_task(label, total=total)
            try:
                yield
            finally:
                self.bar = None

    def grow(self, count: int) -> None:
        if self.bar is not None:
            self.total += count
            self.bar.update(self.id, total=self.bar.tasks[0].total + count)

    def show(self, label: str) -> None:
        if self.bar is not None:
            self.bar.update(self.id, description=label)

    def advance(self, count: int) -> None:
        if self.bar is None:
            return
        if self.done + count > self.total:  # more than planned (a guard's passes): the bar grows, never runs over
            self.grow(self.done + count - self.total)
        self.bar.advance(self.id, count)
        now = time.monotonic()
        if now - self.last_tick > 0.05:  # a pass that ran (a cache hit ticks at once)
            self.computed += count
            self.computing_s += now - self.last_tick
        self.done, self.last_tick = self.done + count, now
        left = self.time_left()
        if not self.estimated and left is not None and self.done < self.total:
            self.estimated = True
            if left > self.LONG:
                self.err.print(f"{self.label}: a forward pass takes about {self.computing_s / self.computed:.1f} s here: "
                               f"about {clock(left)} for the {self.total - self.done} left (the longest lengths "
                               "take longest)", highlight=False)
        if not self.err.is_terminal and now - self.last_line >= self.LINE_EVERY:
            self.last_line = now
            self.err.print(f"{self.label}: {self.done}/{self.total} forward passes, {clock(now - self.started)} elapsed"
                           + (f", about {clock(left)} left" if left is not None else ""), highlight=False)

    def time_left(self) -> float | None:
        """Seconds the passes not yet done should take at the mean rate of those that ran (None before one ran)."""
        if not self.computed:
            return None
        return max(self.total - self.done, 0) * self.computing_s / self.computed


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
    memory = _memory(model, device, evaluation.length)  # before loading: a model that cannot fit is refused here
    with err.status(f"loading {model.model or 'the built-in model'} …", spinner="dots") if not quiet else nullcontext():
        lm = _load(model, device, dist)
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


def _load(model: ModelOptions, device: str, dist):
    """The model backend of --backend: transformers (torch, RoPE patched in place) or llama.cpp (a GGUF)."""
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
