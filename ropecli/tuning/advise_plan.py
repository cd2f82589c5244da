"""AdvisePlan: what the user asked of advise, one record made at the command boundary (`ropecli.cli.eval_groups.
AdviseOptions.plan`) and taken whole by the tournament (`ropecli.tuning.tournament`) and by advise end to end
(`ropecli.tuning.advise`); its own module so that neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

from ropecli.evaluation.metrics import PPL, Metric


@dataclass
class AdvisePlan:
    """What the user asked of advise (the flags of its own panel), defaults as the CLI shows them."""
    candidates: list[str] | None = None  # None: every candidate (ropecli.tuning.candidates.CANDIDATES)
    with_log_n: bool = False
    budget: int = 12  # evaluations per searched candidate
    held_out: int | None = None  # held-out windows of the first round (default: --samples)
    max_short_kl: float | None = None
    max_short_regression: float | None = None
    min_passkey: float | None = None
    race: bool = True  # racing: forward passes only where they change the verdict (--no-race: every one)
    margin: float | None = None
    delta: float | None = None  # racing's indifference zone (ropecli.tuning.racing); None: the margin, 0: off
    max_windows: int | None = None
    metric: Metric = PPL  # what the searches minimize and the rule ranks by (ppl or key-ppl), the record
    task_guard: Metric | None = None  # a RULER task's record: out if shown worse at the target than as shipped within Ls
    workload: str | None = None  # --workload: also every candidate served per runtime over these request lengths
    runtime: list | None = None  # the runtimes of --workload, their records (None: transformers, vLLM, llama.cpp)
    weights: str = "auto"  # how the transformers export holds a local model's weights (`export.hf_folder.place_weights`)
