"""An evaluation session: what every evaluating command (`ppl`, `compare`, `search-b`, …) does around
its own logic. Load the model backend of a ModelOptions, build the Evaluator of a DataOptions and
EvalOptions, run specs x lengths under one progress bar, describe the run for `--json`.
`Session.run` is the `Evaluate` the tuning layer takes (`ropecli.tuning.objective.Evaluate`).

Commands import this module; no command module imports another.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ropecli.cli.console import stderr_console
from ropecli.cli.groups import DataOptions, EvalOptions, ModelOptions, PasskeyOptions

if TYPE_CHECKING:  # numpy stays unimported until a command runs: `--help` is instant
    from ropecli.rope.spec import Spec


_OPENED: list["Session"] = []  # every session of this process, for the closing notes


@dataclass
class Session:
    model: Any  # a ropecli.models.backend.ModelBackend
    ev: Any  # ropecli.evaluation.evaluator.Evaluator
    progress: Any = None  # (rich Progress, task id) shared by a command's sessions: one bar over everything

    def __post_init__(self):
        _OPENED.append(self)

    @property
    def rope(self):
        """The model's RoPE geometry (ModelRope)."""
        return self.model.rope

    @property
    def inputs(self):
        """The windows and passkey prompts scored (ropecli.evaluation.inputs.Inputs)."""
        return self.ev.inputs

    def held_out(self, samples: int | None) -> "Session":
        """The same model on the windows after this session's (default: as many as it has)."""
        return Session(self.model, self.ev.held_out(samples or self.inputs.samples), self.progress)

    def run(self, specs: list[Spec], lengths: list[int], metric: str = "ppl", samples: int | None = None) -> list:
        """Every (spec, length) of one metric (ppl, passkey, kl), spec-major, as EvalResults on the first
        `samples` windows (prompts per depth; default: the session's), with one rich progress bar (ETA)
        over all windows or prompts; cached ones are instant."""
        ev = self.ev
        inputs = ev.inputs.resized(samples)
        for n in lengths:  # fail on too little text before any forward pass
            ev.check_inputs(metric, n, samples)
        results = []
        shared = self.progress is not None
        with nullcontext(self.progress) if shared else overall_progress(len(specs) * len(lengths) * inputs.units(metric)) as (bar, task):
            for spec in specs:
                for n in lengths:
                    bar.update(task, description=f"{spec.label} @ {n}" + (f" ({metric})" if metric != "ppl" else ""))
                    results.append(ev.evaluate(spec, n, on_window=lambda k: bar.advance(task, k), metric=metric,
                                               samples=samples))
        return results

    @property
    def is_main(self) -> bool:
        """True in a single process and on rank 0 under torchrun: the process that prints and writes."""
        return self.ev.dist.is_main

    def header(self) -> dict:
        """What was evaluated on what: the head of every evaluating command's `--json`. Under torchrun
        it also says how the windows were split (a collective: every rank calls it)."""
        lm, ev, rope = self.model, self.ev, self.rope
        out = {"model": rope.name, "model_fingerprint": lm.fingerprint, "rotary_dim": rope.rotary_dim, "base": rope.base,
               "train_len": rope.train_len, "runtime": lm.runtime, "dtype": lm.dtype, "device": lm.device, "data": ev.inputs.data_label,
               "samples": ev.inputs.samples, "seed": ev.inputs.seed, "score_last": ev.score_last, "world_size": ev.dist.world}
        if ev.dist.world > 1:
            out["windows_per_rank"] = [len(w) for w in ev.dist.gather(ev.dist.windows_done)]
        return out

    def forward_passes(self) -> int:
        """Windows run through the model in this command, summed over ranks (a collective under torchrun)."""
        return sum(self.ev.dist.gather(self.ev.forward_passes))

    def tally(self, *others: "Session") -> dict:
        """What the run cost, for every evaluating command's `--json`: forward passes (summed over ranks and
        over `others`, e.g. the held-out session) and the cache's counts (a collective under torchrun)."""
        return {"forward_passes": self.forward_passes() + sum(o.forward_passes() for o in others),
                "cache": self.cache_stats()}

    def cache_stats(self) -> dict:
        c = self.ev.cache
        return {"hits": c.hits, "misses": c.misses, "rejected": c.rejected, "stale": c.stale, "migrated": c.migrated}


def closing_notes() -> list[str]:
    """What a command says once at its end about its sessions (entries of another cache format recomputed)."""
    caches = list({id(s.ev.cache): s.ev.cache for s in _OPENED}.values())
    _OPENED.clear()
    stale, migrated = sum(c.stale for c in caches), sum(c.migrated for c in caches)
    rekeyed = sum(c.rekeyed for c in caches)
    from ropecli.evaluation.cache import FORMAT

    notes = []
    if migrated:
        notes.append(f"note: {migrated} cached evaluation(s) of the older whole-evaluation format were split into "
                     f"per-window entries (format {FORMAT}) and reused")
    if rekeyed:
        notes.append(f"note: {rekeyed} cached window(s) stored before the runtime entered the cache key were reused")
    if stale:
        notes.append(f"note: {stale} cached result(s) were of another ropecli cache format and were recomputed (format {FORMAT} now)")
    return notes


@contextmanager
def overall_progress(total: int, description: str = "evaluating"):
    """One rich progress bar (ETA) on stderr: yields (Progress, task id)."""
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    err = stderr_console()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("ETA"), TimeRemainingColumn(), console=err,
                  disable=not err.is_terminal) as bar:  # a log file or a pipe gets no progress frames
        yield bar, bar.add_task(description, total=total)


def open_session(model: ModelOptions, data: DataOptions, evaluation: EvalOptions, quiet: bool,
                 passkey: PasskeyOptions | None = None) -> Session:
    """Load the model (spinner unless `quiet`) and its evaluator; both described on stderr."""
    from ropecli.evaluation.cache import EvalCache
    from ropecli.evaluation.distributed import quiet_unless_main, setup
    from ropecli.evaluation.evaluator import Evaluator
    from ropecli.evaluation.inputs import Inputs
    from ropecli.models.load import load_model

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
    with err.status(f"loading {model.model or 'the built-in model'} …", spinner="dots") if not quiet else nullcontext():
        if model.backend == "llamacpp":
            from ropecli.models.llamacpp import open_gguf

            lm = open_gguf(model.model, model.gguf_file, device=device, train_len=model.train_len,
                           refused={"--dtype": model.dtype != "auto", "--device-map": model.device_map,
                                    "--attn-implementation": model.attn_implementation, "--base": model.base is not None,
                                    "--d": model.d is not None, "--trust-remote-code": model.trust_remote_code,
                                    "--rope-layers": model.rope_layers})
        else:
            lm = load_model(model.model, gguf_file=model.gguf_file, dtype=model.dtype, device=device,
                            device_map=model.device_map, attn_implementation=model.attn_implementation,
                            trust_remote_code=model.trust_remote_code, rotary_dim=model.d, base=model.base,
                            train_len=model.train_len, rope_layers=model.rope_layers, gpu_group=dist.gpu_group)
    err.print(f"model {lm.describe()}", highlight=False)
    prompts = {"depths": tuple(passkey.parsed_depths()), "digits": passkey.checked_digits()} if passkey else {}
    inputs = Inputs.load(lm.tokenizer, data.data, data.text_field, samples=data.samples, seed=data.seed, **prompts)
    ev = Evaluator(lm, inputs, cache=cache, dist=dist,
                   chunk_tokens=evaluation.chunk_size, score_last=evaluation.score_last)
    err.print(f"data {inputs.data_label}; {data.samples} window(s) per length, seed {data.seed}", highlight=False)
    return Session(lm, ev)


def check_plot_path(path: str | None) -> None:
    """Refuse a bad --plot path before any evaluation runs."""
    if path:
        from ropecli.report.plots import check_out

        check_out(path)


def fmt_ppl(r: dict) -> str:
    """`59.91 ± 6.1`: PPL with the 95% half-width of its spread across windows (a ppl result's JSON row);
    `inf` for a diverged run."""
    from ropecli.evaluation.stats import ppl_half_width

    if r["ppl"] is None or r["ppl"] == float("inf"):
        return "inf"
    half = ppl_half_width(r.get("ppl_err"), len(r.get("window_nll") or []))
    return f"{r['ppl']:.4g}" + (f" ± {half:.3g}" if half else "")


def plot_results(results: list[dict], path: str, session: Session) -> None:
    from ropecli.report.result_plots import plot_ppl_vs_length

    plot_ppl_vs_length(results, path, f"Perplexity vs length: {session.rope.name} (L = {session.rope.train_len})")
    stderr_console().print(f"wrote {path}")
