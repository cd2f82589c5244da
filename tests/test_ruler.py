"""RULER's tasks as ropecli generates and scores them: the prompts follow RULER's own template text
(vendored from NVIDIA/RULER c3f5e3b in tests/reference/ruler, Apache-2.0, read here independently of
ropecli's copy), fit the length the way RULER fits it, are the same for every schedule, and the
answer-likelihood score equals a hand computation with transformers."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from ropecli.cli.app import app
from ropecli.evaluation.corpus import held_out_plays
from ropecli.evaluation.evaluator import Evaluator
from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.metrics import PASSKEY, PPL, metric_record
from ropecli.evaluation.ruler.answer_scoring import string_match_all
from ropecli.evaluation.ruler.builders import Haystack
from ropecli.evaluation.ruler.generate import builder, encode, fit, icl_noise, make_units, rng_for
from ropecli.evaluation.ruler.templates import TASKS
from ropecli.spec import make_spec

from helpers import runner

REF = Path(__file__).parent / "reference" / "ruler"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"ruler_{name}", REF / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


RULER = _load("data_constants").TASKS  # scripts/data/synthetic/constants.py
RULER_EVAL = _load("eval_constants")  # scripts/eval/synthetic/constants.py


def ruler_args() -> dict[str, dict]:
    """scripts/synthetic.yaml: task -> its args (a two-level YAML read without a YAML library)."""
    out, task, args = {}, None, False
    for line in (REF / "synthetic.yaml").read_text().splitlines():
        if re.match(r"^\w", line):
            task, args = line.rstrip(":"), False
            out[task] = {}
        elif line.strip() == "args:":
            args = True
        elif args and ":" in line:
            k, v = (x.strip() for x in line.split(":", 1))
            out[task][k] = int(v) if v.isdigit() else float(v) if re.fullmatch(r"\d+\.\d+", v) else v
    return out



@pytest.fixture(scope="module")
def hay():
    return Haystack.of(list(held_out_plays().values()))


def units(builtin, hay, task, length=2048, depths=(0.0, 0.5, 1.0), samples=1, seed=0):
    return make_units(builtin.tokenizer, hay, task, length, list(depths), samples, seed)


def template_regex(template: str, **fixed) -> re.Pattern:
    """RULER's template (with its answer prefix) as a regex: the given fields filled, every other a wildcard."""
    parts = re.split(r"(\{\w+\})", template)
    out = []
    for p in parts:
        m = re.fullmatch(r"\{(\w+)\}", p)
        out.append(re.escape(str(fixed[m.group(1)])) if m and m.group(1) in fixed else
                   ("(?P<%s>.*)" % m.group(1) if m and m.group(1) not in "".join(out) else "(?s:.*)") if m else re.escape(p))
    return re.compile("".join(out), re.S)


def test_the_configs_are_rulers(hay):
    """Every ropecli task is RULER's task of the same name with its synthetic.yaml args."""
    args = ruler_args()
    for t in TASKS.values():
        a = args[t.ruler]
        if t.kind == "niah":
            assert (t.niah.haystack, t.niah.type_k, t.niah.type_v) == (a["type_haystack"], a["type_needle_k"], a["type_needle_v"])
            assert (t.niah.num_k, t.niah.num_v, t.niah.num_q) == (a["num_needle_k"], a["num_needle_v"], a["num_needle_q"])
        assert t.tokens_to_generate == RULER[{"niah": "niah", "vt": "variable_tracking", "cwe": "common_words_extraction",
                                              "fwe": "freq_words_extraction"}[t.kind]]["tokens_to_generate"]


@pytest.mark.parametrize("name", [n for n, t in TASKS.items() if t.kind == "niah"])
def test_niah_prompts_follow_rulers_template_and_needle(builtin, hay, name):
    """The prompt is RULER's niah template + answer prefix (singular where one value is asked), the needles
    are RULER's needle sentence with the plural type, the queried needle sits at the asked depth, and the
    control prompt is the same without the queried needle(s)."""
    cfg = TASKS[name].niah
    template = RULER["niah"]["template"] + RULER["niah"]["answer_prefix"]
    type_v = cfg.type_v
    if cfg.num_q * cfg.num_v == 1:  # niah.py generate_input_output's four replaces
        template = template.replace("Some", "A").replace("are all", "is").replace("are", "is").replace("answers", "answer")
        type_v = type_v[:-1]
    for u in units(builtin, hay, name):
        p = u.prompt
        m = template_regex(template, type_needle_v=type_v).fullmatch(p.text)
        assert m, p.text[:200]
        query, context = m.group("query"), m.group("context")
        keys = [k.strip() for k in re.split(r", and |, ", query)]
        assert len(keys) == cfg.num_q
        needles = re.findall(r"One of the special magic " + cfg.type_v + r" for (\S+) is: (\S+)\.", context)
        asked = [(k, v) for k, v in needles if k in keys]
        assert sorted(v for _, v in asked) == sorted(p.references) and len(asked) == cfg.num_q * cfg.num_v
        assert p.answer == " " + ", ".join(p.references)
        pattern = {"numbers": r"\d{7}", "uuids": r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"}[cfg.type_v]
        assert all(re.fullmatch(pattern, v) for v in p.references)
        # the first queried key's needle sits at the depth asked, in haystack units (essay: sentences; else lines)
        needle = f"One of the special magic {cfg.type_v} for {keys[0]} is: {p.references[0]}."  # its first value
        if cfg.haystack == "essay":
            split = lambda t: [x for x in re.split(r"(?<=[.!?])\s+", t.strip()) if x]  # noqa: E731
            bare = lambda t: re.sub(r"One of the special magic \S+ for \S+ is: \S+\.\s*", "", t)  # noqa: E731
            before, total = len(split(bare(context[:context.index(needle)]))), len(split(bare(context)))
        else:  # lines: noise, or distractor needles
            lines = context.split("\n")
            before = lines.index(needle)
            total = len(lines) - sum(1 for k, _ in needles if k in keys or cfg.haystack == "noise")
        assert abs(before / total - p.depth) <= 1.5 / total, (before, total, p.depth)
        control = template_regex(template, type_needle_v=type_v).fullmatch(p.control)
        assert control and control.group("query") == query
        assert not any(f"for {k} is:" in control.group("context") for k in keys)
        haystack = {"essay": None, "noise": "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.",
                    "needle": "One of the special magic"}[cfg.haystack]
        if haystack:
            assert context.split("\n")[0].startswith(haystack) or p.depth == 0.0


def test_vt_prompt_follows_rulers_template_with_its_one_shot_example(builtin, hay):
    template = RULER["variable_tracking"]["template"] + RULER["variable_tracking"]["answer_prefix"]
    for u in units(builtin, hay, "vt"):
        p = u.prompt
        shot, question = p.text.split("\n\n" + RULER["variable_tracking"]["template"][:20], 1)
        question = RULER["variable_tracking"]["template"][:20] + question
        m = template_regex(template, num_v=5).fullmatch(question)
        assert m
        value = m.group("query")
        lines = m.group("context").split("\n")
        chain = [ln for ln in lines if ln.startswith("VAR ")]
        assert chain[0] == f"VAR {p.references[0]} = {value}" and re.fullmatch(r"\d{5}", value)
        assert chain[1:] == [f"VAR {b} = VAR {a} " for a, b in zip(p.references, p.references[1:])]  # RULER's trailing space
        assert all(ln == "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
                   for ln in lines if not ln.startswith("VAR "))
        noise = len(lines) - len(chain)
        assert abs(lines.index(chain[0]) / noise - p.depth) <= 1.5 / noise  # the first assignment at the depth asked
        assert template_regex(template, num_v=5).match(shot)  # the example: the same template, answered
        assert re.search(r"they are:  [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3} [A-Z]{3}$", shot)
        assert p.answer == " ".join(p.references) and "VAR" not in p.control.split("\n\n")[-1].split("Question")[0]


@pytest.mark.parametrize("length", [2048, 4096])
def test_cwe_lists_rulers_counts(builtin, hay, length):
    """cwe: RULER's template twice (an answered example, then the question); in the question's list the 10
    common words appear freq_cw times (6 below 4096) and every other word freq_ucw times (1 below 4096)."""
    template = RULER["common_words_extraction"]["template"] + RULER["common_words_extraction"]["answer_prefix"]
    p = units(builtin, hay, "cwe", length, depths=(0.0,))[0].prompt
    shot, question = p.text.rsplit("\n", 3)[0], "\n".join(p.text.rsplit("\n", 3)[1:])
    m = template_regex(template).fullmatch(question)
    assert m and template_regex(template).match(shot)
    words = re.findall(r"\d+\. (\S+)", m.group("context"))
    counts = {w: words.count(w) for w in set(words)}
    common, rare = (30, 3) if length >= 4096 else (6, 1)
    assert all(counts[w] == common for w in p.references) and len(p.references) == 10
    assert set(counts.values()) == {common, rare}
    assert [int(x) for x in re.findall(r"(\d+)\. ", m.group("context"))] == list(range(1, len(words) + 1))


def test_fwe_answer_is_the_three_most_frequent_coded_words_after_the_noise(builtin, hay):
    template = RULER["freq_words_extraction"]["template"] + RULER["freq_words_extraction"]["answer_prefix"]
    p = units(builtin, hay, "fwe", depths=(0.0,))[0].prompt
    m = template_regex(template).fullmatch(p.text)
    words = m.group("context").split(" ")
    ranked = sorted(set(words), key=lambda w: -words.count(w))
    assert ranked[0] == "..." and tuple(ranked[1:4]) == p.references
    assert all(re.fullmatch(r"[a-z]{6}", w) for w in p.references)


@pytest.mark.parametrize("name", ["niah-single", "niah-multikey-needle", "vt", "cwe", "fwe"])
def test_prompts_fill_the_length_as_ruler_does(builtin, hay, name):
    """BOS + prompt + tokens_to_generate fits the length and one more haystack unit would not (RULER's
    binary search); the answer fits in the room left for the generation."""
    tok, L = builtin.tokenizer, 1024
    for u in units(builtin, hay, name, L, depths=(0.5,)):
        room = TASKS[name].tokens_to_generate
        assert u.answer_start + room <= L and len(u.ids) <= L
        assert len(u.ids) - u.answer_start <= room

        build = builder(TASKS[name], hay, u.prompt.depth, rng_for(0, L, name, u.prompt.depth, 0), L,
                        icl_noise(tok, L) if name == "vt" else 0)
        assert build(u.haystack).text == u.prompt.text  # the prompt is the fitted size's, reproducibly
        assert 1 + len(encode(tok, build(u.haystack + 1).text)) + room > L


def test_fit_finds_the_largest_size_that_fits():
    sizes = {}

    class P:
        def __init__(self, n):
            self.text = "x" * (3 * n + 7)
    size = lambda p: len(p.text)  # noqa: E731
    n, _ = fit(lambda n: sizes.setdefault(n, P(n)), size, 100, 1)
    assert n == 31  # 3 * 31 + 7 = 100
    assert fit(lambda n: P(n), size, 100, 1, most=10)[0] == 10


def test_prompts_are_seeded_and_a_depths_prompts_do_not_depend_on_the_others(builtin, hay):
    a = units(builtin, hay, "niah-single", 1024, depths=(0.0, 0.5), samples=2)
    b = units(builtin, hay, "niah-single", 1024, depths=(0.5,), samples=2)
    assert [u.prompt.text for u in a[2:]] == [u.prompt.text for u in b]
    assert a[0].prompt.text != a[1].prompt.text  # two samples, two prompts
    assert units(builtin, hay, "niah-single", 1024, depths=(0.5,), samples=2, seed=1)[0].prompt.text != b[0].prompt.text


def test_string_match_all_is_rulers():
    rng = np.random.default_rng(0)
    for _ in range(50):
        refs = ["".join(rng.choice(list("abcAB12"), size=3)) for _ in range(rng.integers(1, 5))]
        pred = " ".join("".join(rng.choice(list("abcAB12 \n"), size=5)) for _ in range(4))
        assert round(100 * string_match_all(pred, refs), 2) == RULER_EVAL.string_match_all([pred], [refs])


def test_answer_likelihood_equals_a_hand_computation_with_transformers(builtin, hay):
    """The task's answer NLL (prompt, then the answer teacher-forced) and its control's, from transformers'
    own forward pass and log-softmax of the built-in model (unscaled: ropecli's `none` leaves it as is)."""
    ev = Evaluator.over(builtin, samples=1)
    ev.inputs.depths = (0.5,)
    r = ev.evaluate(make_spec("none"), 512, metric=metric_record("niah-single-noise"))
    u = ev.inputs.task_units("niah-single-noise", 512)[0]

    def by_hand(ids, start):
        with torch.no_grad():
            logits = builtin.model(torch.from_numpy(ids)[None]).logits[0].double()
        logp = torch.log_softmax(logits[start - 1:-1], -1)
        return -float(logp.gather(1, torch.from_numpy(ids[start:])[:, None]).sum())

    assert r.prompt_answer_nll[0] == pytest.approx(by_hand(u.ids, u.answer_start), rel=1e-4)
    control = by_hand(u.control_ids, u.control_start)
    assert r.prompt_gain[0] == pytest.approx(control - by_hand(u.ids, u.answer_start), rel=1e-3, abs=1e-3)
    assert r.prompt_answer_tokens[0] == len(u.ids) - u.answer_start and r.prompt_depth == [0.5]
    assert ev.forward_passes == 2  # the prompt and its control


def test_compare_task_columns_with_paired_verdicts_and_per_prompt_json(tmp_path):
    args = ["compare", "--len", "1024", "--task", "niah-multikey,vt", "--method", "none,yarn", "--samples", "1",
            "--depths", "0,1", "--cache-dir", str(tmp_path)]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    assert {r["metric"] for r in res["results"]} == {"niah-multikey", "vt"}
    assert res["forward_passes"] == 2 * 2 * 2 * 2  # tasks x methods x prompts x (prompt + control)
    for r in res["results"]:
        assert len(r["prompt_answer_nll"]) == len(r["prompt_depth"]) == 2 and r["prompt_depth"] == [0.0, 1.0]
        assert "verdict" in r["vs_best"] and r["vs_best"]["inference"] in ("units", None)
        assert [d["depth"] for d in r["by_depth"]] == [0.0, 1.0]
    table = runner.invoke(app, args)
    assert table.exit_code == 0 and "niah-multikey 1024" in table.output and "vt 1024" in table.output
    assert "answer NLL @ 1024" in table.output
    again = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert again["forward_passes"] == 0  # every prompt cached


def test_an_unknown_task_or_a_too_short_length_is_one_line():
    out = runner.invoke(app, ["compare", "--len", "1024", "--task", "niah-bogus"])
    assert out.exit_code != 0 and "niah-bogus" in out.output and "niah-single" in out.output
    out = runner.invoke(app, ["compare", "--len", "256", "--task", "cwe", "--samples", "1", "--no-cache"])
    assert out.exit_code == 1 and "too short for the task cwe" in out.output and "Traceback" not in out.output


def test_compare_says_whether_a_task_ranks_the_schedules_as_ppl_does(tmp_path):
    out = runner.invoke(app, ["compare", "--len", "1024", "--metric", "ppl", "--task", "niah-single", "--method",
                              "none,yarn,pi", "--samples", "2", "--depths", "0,1", "--cache-dir", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    got = {a["vs"]: a for a in res["agreement"]}
    assert set(got) == {"ppl", "key-ppl"} and all(a["task"] == "niah-single" and a["schedules"] == 3 for a in got.values())
    a = got["ppl"]
    assert a["low"] <= a["rho"] <= a["high"] and a["rho"] in (-1.0, -0.5, 0.5, 1.0)  # 3 schedules: rho's values
    ppl = {r["label"]: r["nll"] for r in res["results"] if r["metric"] == "ppl"}
    assert a["order_b"] == sorted(ppl, key=ppl.get)  # PPL's order is the estimand's
    table = runner.invoke(app, ["compare", "--len", "1024", "--metric", "ppl", "--task", "niah-single", "--method",
                                "none,yarn,pi", "--samples", "2", "--depths", "0,1", "--cache-dir", str(tmp_path)])
    assert "niah-single vs PPL @ 1024: Spearman's rho" in table.output


def test_generate_adds_rulers_score_and_recomputes_prompts_cached_without_it(tmp_path):
    """--generate: a greedy answer per prompt scored by string_match_all (RULER's), kept in the cache; prompts
    cached by a run without it are computed again (their likelihood alone does not answer)."""
    args = ["compare", "--len", "1024", "--task", "niah-single-noise", "--method", "yarn", "--samples", "1",
            "--depths", "0.5", "--cache-dir", str(tmp_path), "--json"]
    plain = json.loads(runner.invoke(app, args).stdout)["results"][0]
    assert plain["match"] is None and plain["generated"] is None
    out = runner.invoke(app, [*args, "--generate"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    r = res["results"][0]
    assert res["forward_passes"] == 3  # the prompt, its control, the generation's prefill
    assert isinstance(r["generated"][0], str) and r["prompt_references"][0][0].isdigit()
    assert r["match"] == r["prompt_match"][0] == string_match_all(r["generated"][0], r["prompt_references"][0])
    assert r["prompt_answer_nll"] == plain["prompt_answer_nll"]  # the same likelihood, computed again
    again = json.loads(runner.invoke(app, [*args, "--generate"]).stdout)
    assert again["forward_passes"] == 0 and again["results"][0]["generated"] == r["generated"]


def test_a_task_as_the_search_objective(tmp_path):
    out = runner.invoke(app, ["search-b", "--len", "1024", "--objective", "niah-single-noise", "--samples", "1",
                              "--depths", "0.5", "--tol", "0.3", "--cache-dir", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    assert res["objective_name"] == "niah-single-noise"
    best = min(res["evaluations"], key=lambda e: e["objective"])
    assert best["b"] == res["best_b"] and all("answer_nll" in e for e in res["evaluations"] if "stopped_early" not in e)


def test_prompts_per_depth_apart_from_windows(tmp_path):
    """--prompts: PPL on --samples windows beside a task's --prompts prompts per depth, in one compare; the
    prompts are the first ones of the seeded sequence (the same as a --samples 1 run's, so cached)."""
    base = ["compare", "--len", "1024", "--task", "niah-single", "--method", "none,yarn,pi", "--depths", "0,1",
            "--cache-dir", str(tmp_path), "--json"]
    alone = json.loads(runner.invoke(app, [*base, "--samples", "1"]).stdout)
    out = runner.invoke(app, [*base, "--metric", "ppl", "--samples", "3", "--prompts", "1"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    assert res["samples"] == 3 and res["prompts"] == 1
    assert {len(r["window_nll"]) for r in res["results"] if r["metric"] == "ppl"} == {3}
    tasks = [r for r in res["results"] if r["metric"] == "niah-single"]
    assert {len(r["prompt_answer_nll"]) for r in tasks} == {2}  # 2 depths x 1 prompt
    assert res["forward_passes"] == 3 * 3  # the windows only: every prompt was the --samples 1 run's
    before = {r["label"]: r["prompt_answer_nll"] for r in alone["results"]}
    assert {r["label"]: r["prompt_answer_nll"] for r in tasks} == before


def test_held_out_prompts_follow_this_samples_prompts(builtin):
    """A held-out copy takes the prompts after this one's, counted by --prompts (not by --samples)."""
    ins = Inputs.load(builtin.tokenizer, None, samples=3, prompt_count=1, depths=(0.0, 1.0))
    held = ins.held_out(2)
    assert (ins.count(PPL), ins.count(PASSKEY), held.count(PASSKEY)) == (3, 1, 1)
    assert held.prompt_start == 1 and held.first_window == 3
    ids = lambda i, n: [tuple(u.ids) for u in i.task_units("niah-single", n)]  # noqa: E731
    two = Inputs.load(builtin.tokenizer, None, samples=2, depths=(0.0, 1.0))
    both = ids(two, 1024)  # depth-major: [depth 0: prompt 0, 1; depth 1: prompt 0, 1]
    assert ids(ins, 1024) == [both[0], both[2]] and ids(held, 1024) == [both[1], both[3]]
    assert ins.resized(2).count(PASSKEY) == 2 and ins.resized(3).count(PASSKEY) == 3


def test_a_task_race_counts_prompts_per_depth(tmp_path):
    """compare --race --task: the race grows prompts per depth from --prompts, and its outcome says so."""
    out = runner.invoke(app, ["compare", "--len", "1024", "--task", "niah-single", "--method", "none,pi,yarn", "--race",
                              "--samples", "4", "--prompts", "2", "--max-windows", "4", "--depths", "0,0.5,1",
                              "--cache-dir", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    race = json.loads(out.stdout)["races"]["niah-single"]
    assert race["looks"] == [2, 4]  # from --prompts 2, not --samples 4
    assert "prompts per depth" in race["outcome"] and " windows" not in race["outcome"]
    assert {c["windows"] for c in race["candidates"].values()} <= {2, 4}  # per depth, not x 3 depths


def test_needle_free_tasks_held_out_prompts_do_not_repeat_the_searched_ones(builtin, hay):
    """cwe and fwe take samples x depths prompts; a later first sample (a held-out copy's) starts after them, and a
    larger sample keeps the smaller one as its prefix."""
    make = lambda first, n: [tuple(u.ids) for u in make_units(builtin.tokenizer, hay, "fwe", 1024, [0.0, 1.0], n, 0,  # noqa: E731
                                                            first_sample=first)]
    searched, held, both = make(0, 2), make(2, 1), make(0, 3)
    assert len(searched) == 4 and len(held) == 2 and not set(searched) & set(held)
    assert both == searched + held


def test_a_task_race_asks_the_text_for_no_windows(tmp_path, text_file):
    """A prompt race is sized in prompts; the text's windows at the length do not bound it (a short text that holds
    3 windows of 1024 tokens still makes 4 prompts per depth)."""
    out = runner.invoke(app, ["compare", "--len", "1024", "--task", "niah-single", "--method", "none,pi", "--race",
                              "--data", text_file, "--samples", "1", "--prompts", "2", "--max-windows", "4", "--depths", "1",
                              "--cache-dir", str(tmp_path), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["races"]["niah-single"]["looks"] == [2, 4]


def test_a_task_search_holds_out_prompts_and_says_so(tmp_path):
    """search --objective TASK: searched on the first --prompts prompts per depth, held out on the next ones, and
    the split named as prompts (the documents' split is the windows')."""
    args = ["search", "--method", "yarn", "--vary", "beta_fast", "--len", "1024", "--objective", "niah-single",
            "--samples", "2", "--prompts", "1", "--depths", "0,1", "--budget", "4", "--cache-dir", str(tmp_path)]
    res = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert res["searched_prompts"] == [0, 1] and res["held_out_prompts"] == [1, 1]
    assert res["held_out_split"].startswith("held out by prompt") and "on held-out prompts" in res["held_out"]["verdict"]
    table = runner.invoke(app, args).output
    assert "held-out prompts 1…1 per depth" in table and "prompts 0…0 per depth" in table
