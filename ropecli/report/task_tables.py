"""The table of RULER task results (`ropecli ppl --task`): per task and length, the answer NLL, its gain
over the needle-free prompt, the share of answers the model would produce greedily token by token, RULER's
score with --generate, and the gain at each depth."""

from __future__ import annotations

from ropecli.evaluation.task_results import TaskResult
from ropecli.report.text import plain, table


def _num(x, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def task_table(results: list[TaskResult], title: str) -> list:
    if not results:
        return []
    depths = [d["depth"] for d in results[0].by_depth]
    t = table(title, ["task", "len", "prompts", "answer NLL", "gain", "argmax", "RULER score",
                      *[f"gain @ {d:g}" for d in depths if d is not None]])
    for r in results:
        t.add_row(r.task, str(r.len), str(r.samples), _num(r.answer_nll), _num(r.gain, "{:+.2f}"),
                  f"{r.accuracy:.0%}", _num(r.match, "{:.0%}"),
                  *[_num(d["gain"], "{:+.2f}") for d in r.by_depth if d["depth"] is not None])
    return [t, plain("answer NLL: -log p(answer | prompt, answer prefix), nats, mean over prompts; gain: the same prompt "
                     "without the needle minus it (what the needle is worth); argmax: answers the model reproduces token "
                     "by token; RULER score: string match of a greedy answer (--generate).")]
