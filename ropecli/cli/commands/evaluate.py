"""`ropecli ppl` and `ropecli compare`: perplexity of a real causal LM under schedules, at lengths.
The work is `ropecli.tuning.comparison` (compare) and the session (`ropecli.evaluation.session`)."""

from __future__ import annotations

from ropecli.cli.common import emit_json, handle_errors
from ropecli.cli.console import show, stderr_console
from ropecli.cli.eval_groups import (
    DataOptions,
    EvalOptions,
    MappedScheduleOptions,
    ModelOptions,
    PasskeyOptions,
    ServingOptions,
)
from ropecli.cli.eval_options import BothLogNOpt, GenerateOpt, MarginOpt, MaxWindowsOpt, MetricOpt, RaceOpt, TaskOpt
from ropecli.cli.groups import OutputOptions, with_option_groups
from ropecli.cli.options import COMPARE_METHODS, DEFAULT_METHOD, flat_choices
from ropecli.cli.session_opening import check_plot_path, open_session
from ropecli.errors import RopeCliError
from ropecli.evaluation.compared import Row
from ropecli.evaluation.metrics import is_task, metric_record, prompted
from ropecli.evaluation.results import PplResult
from ropecli.report.position_plots import PositionCurve, plot_loss_by_position, position_path
from ropecli.report.result_plots import plot_ppl_vs_length
from ropecli.report.serving_plots import plot_serving, serving_path
from ropecli.report.tables import bos_words, compare_table, ppl_table, task_table
from ropecli.report.task_plots import plot_task_heatmap, tasks_path
from ropecli.rope.target import check_lengths
from ropecli.tuning.comparison import compare_schedules


def plot_ppl(rows: list, path: str | None, session, serving: dict | None = None, tasks: tuple = ()) -> None:
    """On the main rank: PPL against length, one line per schedule; beside it the loss by position at the
    longest length (ppl-position.png), L marked; with a workload, loss against request length per runtime
    (ppl-serving.png); each of `tasks` (RULER's, in `rows` too) as its heat map (ppl-TASK.png). `rows`: typed rows
    (`ropecli.evaluation.compared.Row`)."""
    plot_tasks([r.result for r in rows], path, session, tasks)
    rows = [r for r in rows if type(r.result) is PplResult]
    if path and session.is_main and serving:
        plot_serving(serving, session.rope.train_len, serving_path(path), f"{session.rope.name}: loss by request length")
        stderr_console().print(f"wrote {serving_path(path)}")
    if path and session.is_main and rows:
        rope, n = session.rope, max(r.result.len for r in rows)
        plot_ppl_vs_length([r.result for r in rows], path, f"Perplexity vs length: {rope.name} (L = {rope.train_len})")
        stderr_console().print(f"wrote {path}")
        curves = [PositionCurve(r.result.label, r.result.position_nll, r.position_vs_best) for r in rows if r.result.len == n]
        if plot_loss_by_position(curves, n, rope.train_len, position_path(path),
                                 f"Loss by position at {n} tokens: {rope.name} (L = {rope.train_len})"):
            stderr_console().print(f"wrote {position_path(path)}")


def plot_tasks(results: list, path: str | None, session, tasks: list[str]) -> None:
    """On the main rank: each task's heat map (score against depth x length, a panel per schedule) beside `path`."""
    if not (path and session.is_main):
        return

    for t in tasks:
        if plot_task_heatmap(results, t, session.rope.train_len, tasks_path(path, t), f"{t} on {session.rope.name} "
                             f"(L = {session.rope.train_len}): by needle depth and length"):
            stderr_console().print(f"wrote {tasks_path(path, t)}")


def chosen_metrics(metric: list | None, task: list | None, prompts: PasskeyOptions) -> tuple[list, list, bool]:
    """(metrics in order, the tasks among them, whether any scores prompts): --metric (ppl unless only --task is
    given) then --task; depths and digits checked before the model loads where prompts are scored."""
    tasks = flat_choices(task, ())
    metrics = list(dict.fromkeys(flat_choices(metric, ("ppl",) if not tasks else ()) + tasks))
    any_prompted = any(map(prompted, metrics))
    if any_prompted:
        prompts.parsed_depths(), prompts.checked_digits()
    return metrics, [m for m in metrics if is_task(m)], any_prompted


@handle_errors
@with_option_groups
def ppl(model: ModelOptions, schedule: MappedScheduleOptions, data: DataOptions, evaluation: EvalOptions, output: OutputOptions,
        prompts: PasskeyOptions, task: TaskOpt = None, generate: GenerateOpt = False):
    """Perplexity of a model under one schedule at one or more lengths (and RULER's tasks with --task).

    Examples: ropecli ppl --len 256 --len 2048 --method mixed --b 0.625
              ropecli ppl --model meta-llama/Llama-2-7b-hf --len 4096 --len 8192 --method mixed --log-n
              ropecli ppl --len 2048 --method yarn --task niah-single,vt
    """
    lengths = check_lengths(evaluation.length or [])
    specs = schedule.specs(DEFAULT_METHOD,
                             factor=evaluation.k, log_n_modes=(evaluation.log_n,))
    if len(specs) != 1:
        raise RopeCliError("ppl evaluates one schedule (one --method, at most one --b); use `ropecli compare` for several")
    check_plot_path(output.plot, output.force)
    tasks = flat_choices(task, ())
    if tasks:
        prompts.parsed_depths()
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if tasks else None,
                           generate=generate)
    results = session.run(specs, lengths)
    done = [r for t in tasks for r in session.run(specs, lengths, metric_record(t))]
    plot_ppl([Row(r) for r in results + done], output.plot, session, tasks=tasks)
    if output.as_json:
        return emit_json({**session.header(), "results": results + done, **session.tally()})
    show(ppl_table(results, f"{specs[0].label} on {session.rope.name}; {bos_words(session.bos())}"))
    if done:
        framed = f"; prompts {session.inputs.frame.describe()}" if session.inputs.frame.chat else ""
        show(task_table(done, f"RULER's tasks on {session.rope.name} under {specs[0].label} ({session.inputs.data_label}{framed}; "
                              f"{bos_words(session.bos())})"))


@handle_errors
@with_option_groups
def compare(model: ModelOptions, schedule: MappedScheduleOptions, data: DataOptions, evaluation: EvalOptions, prompts: PasskeyOptions,
            output: OutputOptions, serving: ServingOptions, metric: MetricOpt = None, both_log_n: BothLogNOpt = False,
            race: RaceOpt = False, max_windows: MaxWindowsOpt = None, margin: MarginOpt = None, task: TaskOpt = None,
            generate: GenerateOpt = False):
    """Methods x lengths on the same documents, each cell against the best with paired confidence (the methods papers' table).

    --metric ppl (default), passkey, kl (at L, for the target's k), RULER's tasks (--task: answer NLL per prompt).
    ≈ = shown equivalent to the best within --margin, ? = undecided; 95% per column. --workload: per runtime.

    Examples: ropecli compare --len 256 --len 2048
              ropecli compare --len 2048 --method none,yarn,llama3,mixed --metric ppl,passkey,kl
              ropecli compare --len 2048 --task niah-multikey,vt
              ropecli compare --model meta-llama/Llama-2-7b-hf --len 4096 --len 16384 --method none,pi,ntk-fixed,mixed --log-n --plot ppl.png
    """
    (serve, lengths), (metrics, tasks, prompted) = serving.plan(evaluation.length), chosen_metrics(metric, task, prompts)
    specs = schedule.specs(COMPARE_METHODS, factor=evaluation.k, log_n_modes=(False, True) if both_log_n else (evaluation.log_n,))
    check_plot_path(output.plot, output.force)
    evaluation.target_before_loading(model, lengths, default=False)  # before the model loads
    session = open_session(model, data, evaluation, quiet=output.as_json, passkey=prompts if prompted else None,
                           generate=generate)
    target = evaluation.target(session.rope, lengths, default=False)
    out = compare_schedules(session, specs, target, [metric_record(m) for m in metrics], race=race, max_windows=max_windows, margin=margin, serving=serve)
    plot_ppl(out["results"], output.plot, session, out.get("serving"), tasks=tasks)
    return emit_json(out) if output.as_json else show(compare_table(out, [s.label for s in specs], list(target.lengths)))
