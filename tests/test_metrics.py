"""Passkey retrieval, KL against the unscaled model, and paired statistics (issue "Beyond perplexity")."""

import ast
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ropecli.errors import RopeCliError
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.chat_template import PromptFrame
from ropecli.evaluation.compared import Row, Verdict, attach_paired
from ropecli.evaluation.evaluator import Evaluator
from ropecli.evaluation.metrics import KL, REGISTRY
from ropecli.evaluation.passkey import QUESTION, build_sample, encode, make_samples, prompt_overhead
from ropecli.evaluation.results import EvalResult
from ropecli.evaluation.stats import paired_difference, rank_against_best
from ropecli.models.chunked_scoring import passkey_scores
from ropecli.models.patch import apply_schedule, restore
from ropecli.report.tables import tie_lines
from ropecli.rope.geometry import Geometry
from ropecli.rope.target import Target
from ropecli.spec import make_spec
from ropecli.tuning.search import search_b

from fakes import kl_result, ppl_result
from helpers import run
from tiny_models import char_tokenizer

# --- prompts ----------------------------------------------------------------------------------

def test_prompt_layout_depth_and_answer():
    tok = char_tokenizer()
    filler = np.arange(40, 90, dtype=np.int64) % 90 + 2  # token ids of printable chars
    filler = np.resize(filler, 500)
    key = "90210"
    for depth, expect_at in [(0.0, 1), (1.0, None)]:
        s = build_sample(tok, filler, 200, depth, key, PromptFrame(bos="always"))  # BOS first, as --bos always
        assert s.ids.shape == (200,) and s.ids[0] == tok.bos_token_id
        answer = tok.decode(s.ids[s.answer_start:])
        assert answer.replace(" ", "") == key and s.answer_start == 200 - 6  # " " and five digits, one token each
        question = encode(tok, QUESTION)
        assert list(s.ids[s.answer_start - len(question):s.answer_start]) == question
        needle = tok.decode(s.ids[s.needle_at:s.needle_at + 30]).replace(" ", "")
        assert needle.startswith("<unk>Thepasskeyis90210")  # "\n" is <unk> to the character tokenizer
        if expect_at is not None:
            assert s.needle_at == expect_at  # depth 0: right after BOS
        else:  # depth 1: the needle ends where the question begins
            n_needle = len(encode(tok, "\nThe pass key is 90210. Remember it.\n"))
            assert s.needle_at + n_needle == s.answer_start - len(question)


def test_prompts_are_seeded_per_depth_and_identical_across_calls():
    tok = char_tokenizer()
    stream = np.resize(np.arange(2, 90, dtype=np.int64), 5000)
    a = make_samples(tok, stream, 160, [0.0, 0.5], 3, 5, seed=7)
    b = make_samples(tok, stream, 160, [0.5], 3, 5, seed=7)
    assert [s.key for s in a[1]] == [s.key for s in b[0]]  # depth 0.5's keys do not depend on the other depths
    assert all(np.array_equal(x.ids, y.ids) for x, y in zip(a[1], b[0]))
    keys = [s.key for row in a for s in row]
    assert all(len(k) == 5 and k[0] != "0" for k in keys) and len(set(keys)) > 1
    assert make_samples(tok, stream, 160, [0.0], 3, 5, seed=8)[0][0].key != a[0][0].key


def test_prompt_overhead_and_errors():
    tok = char_tokenizer()
    need = prompt_overhead(tok, 5)
    with pytest.raises(RopeCliError, match="shorter than the passkey prompt"):
        make_samples(tok, np.arange(2, 90, dtype=np.int64), need - 1, [0.0], 1, 5, seed=0)
    with pytest.raises(RopeCliError, match="too little text"):
        make_samples(tok, np.arange(2, 20, dtype=np.int64), need + 100, [0.0], 1, 5, seed=0)


# --- scoring on a tiny model ----------------------------------------------------------------------

def test_passkey_scores_match_full_logits(tiny):
    tok = tiny.tokenizer
    s = build_sample(tok, np.resize(np.arange(2, 90, dtype=np.int64), 400), 160, 0.5, "31415")
    ids = torch.from_numpy(s.ids)[None]
    correct, nll = passkey_scores(tiny.model, ids, s.answer_start)
    with torch.inference_mode():
        logp = torch.log_softmax(tiny.model(ids).logits[0].double(), -1)
    rows = torch.arange(s.answer_start - 1, 159)
    target = ids[0, s.answer_start:]
    assert nll == pytest.approx(float(-logp[rows, target].sum()), rel=1e-5)
    assert correct == float(bool(torch.equal(logp[rows].argmax(-1), target)))


def _kl_reference(lm, ids, spec, geom):
    """Full logits of both states, KL per position, in float64."""
    with torch.inference_mode():
        p = torch.log_softmax(lm.model(ids).logits[0].double(), -1)
        sched = spec.schedule(geom)
        for slot in lm.slots:
            apply_schedule(slot, sched.factors, sched.attention_factor)
        try:
            q = torch.log_softmax(lm.model(ids).logits[0].double(), -1)
        finally:
            for slot in lm.slots:
                restore(slot)
    kl = (p.exp() * (p - q)).sum(-1)
    return kl, (p.argmax(-1) == q.argmax(-1)).double().mean()


def test_kl_is_zero_for_the_unscaled_schedule_and_chunked_equals_full(tiny, text_file):
    ev = Evaluator.over(tiny, [text_file], samples=2, chunk_tokens=10, cache=EvalCache(enabled=False))
    none = ev.evaluate(make_spec("none", factor=4), 64, metric=KL)
    assert none.kl_mean == 0.0 and none.kl_max == 0.0 and none.top1_agreement == 100.0
    spec = make_spec("yarn", factor=4)
    r = ev.evaluate(spec, 64, metric=KL)
    assert r.kl_mean > 1e-3 and r.top1_agreement < 100
    geom = tiny.rope.geometry(4.0)
    ref = [_kl_reference(tiny, torch.from_numpy(w)[None], spec, geom) for w in ev.inputs.windows(64).ids]
    every = torch.cat([k for k, _ in ref])
    assert r.kl_mean == pytest.approx(float(every.mean()), abs=1e-6)
    assert r.kl_p99 == pytest.approx(float(np.percentile(every.numpy(), 99)), abs=1e-6)
    assert r.window_kl == pytest.approx([float(k.mean()) for k, _ in ref], abs=1e-6)
    assert r.top1_agreement == pytest.approx(100 * float(np.mean([a for _, a in ref])), abs=1e-9)


def test_dynamic_within_L_is_the_unscaled_model(tiny, text_file):
    ev = Evaluator.over(tiny, [text_file], samples=2, cache=EvalCache(enabled=False))
    assert ev.evaluate(make_spec("dynamic", factor=8), 64, metric=KL).kl_mean == 0.0


# --- paired statistics -------------------------------------------------------------------------

def test_paired_difference_equals_hand_computation():
    x, y = [1.0, 2.0, 3.0, 4.0], [0.5, 1.9, 2.2, 3.9]
    p = paired_difference(x, y)
    # d = (0.5, 0.1, 0.8, 0.1): mean 0.375; squared deviations sum 0.3475, /3 -> sd 0.3403429…; se = sd / 2
    assert p["diff"] == pytest.approx(0.375)
    assert p["se"] == pytest.approx(0.17017148213885, rel=1e-12)
    assert p["half_width"] == pytest.approx(3.182446305284263 * 0.17017148213885, rel=1e-9)  # t(0.975, 3)
    assert p["distinguishable"] is False and p["n"] == 4
    q = paired_difference([1.0, 2.0, 3.0, 4.0], [0.9, 1.9, 2.9, 3.8])  # same text difficulty, steady 0.1 gap
    assert q["distinguishable"] is True
    assert paired_difference([1.0], [0.0])["se"] is None


def test_rank_against_best_ties_only_what_is_shown_equivalent():
    # b: 0.01 behind on 3 windows, spread 0.01: neither shown worse nor inside ±0.01 -> undecided, not tied
    ranked = rank_against_best({"a": [1.0, 2.0, 3.0], "b": [1.01, 2.0, 3.02], "c": [2.0, 3.0, 4.1]})
    assert ranked["a"]["best"] and ranked["a"]["tied"] and ranked["a"]["verdict"] == "best"
    assert ranked["b"]["verdict"] == "undecided" and not ranked["b"]["tied"]
    assert "would decide it" in ranked["b"]["answer"]
    assert ranked["c"]["verdict"] == "worse" and not ranked["c"]["tied"]
    # a steady 0.001 gap on 6 windows: shown non-zero, but the interval lies inside ±0.01 -> equivalent, tied
    eq = rank_against_best({"a": [1.0, 2.0, 3.0, 1.5, 2.5, 3.5], "b": [1.001, 2.0012, 3.0009, 1.501, 2.5011, 3.5008]})
    assert eq["b"]["verdict"] == "equivalent" and eq["b"]["tied"]
    # the same gap with a margin below it: shown worse
    strict = rank_against_best({"a": [1.0, 2.0, 3.0, 1.5, 2.5, 3.5], "b": [1.001, 2.0012, 3.0009, 1.501, 2.5011, 3.5008]},
                               margin=0.0005)
    assert strict["b"]["verdict"] == "worse" and not strict["b"]["tied"]


def test_attach_paired_groups_by_metric_and_length():
    rows = [kl_result(64, [0.0, 0.0]), kl_result(64, [0.2, 0.3]), ppl_result(make_spec("none"), 64, [3.0, 3.1])]
    out = attach_paired(rows)
    assert out[0].vs_best.best and not out[1].vs_best.best and out[2].vs_best.best


def test_a_verdict_record_writes_every_key_the_ranking_computed():
    """The typed verdict (`Verdict`) is the ranking's dict as a record: its JSON is that dict, key for key, for a
    best, a worse, an undecided (with what would decide it) and an equivalent one, and a diverged candidate, in the
    order `--json` has always written them."""
    cases = [rank_against_best({"a": [1.0, 2.0, 3.0], "b": [1.01, 2.0, 3.02], "c": [2.0, 3.0, 4.1]}),
             rank_against_best({"a": [1.0, 2.0, 3.0, 1.5, 2.5, 3.5], "b": [1.001, 2.0012, 3.0009, 1.501, 2.5011, 3.5008]}),
             rank_against_best({"a": [1.0, 2.0], "b": [float("inf"), 2.0]})]
    for ranked in cases:
        for d in ranked.values():
            assert list(Verdict.of(d).to_json().items()) == list(d.items())  # key for key, in --json's order


def test_a_row_is_its_results_json_with_its_verdicts_and_reads_back():
    """`--json` writes a Row as the result's fields plus vs_best (and position_vs_best beside the best); a saved row
    reads back into the same typed row."""
    a, b = ppl_result(make_spec("none"), 64, [3.0, 3.1, 2.9]), ppl_result(make_spec("pi"), 64, [3.2, 3.4, 3.0])
    a.window_position_nll, b.window_position_nll = [[3.0, 3.0]] * 3, [[3.1, 3.3]] * 3
    rows = attach_paired([a, b])
    saved = json.loads(json.dumps([r.to_json() for r in rows]))
    assert set(saved[0]) == set(a.to_json()) | {"vs_best"} and set(saved[1]) == set(b.to_json()) | {"vs_best", "position_vs_best"}
    assert saved[1]["position_vs_best"]["diff"] == pytest.approx([0.1, 0.3])
    assert [Row.from_json(d) for d in saved] == rows


# --- the search's statistics, with an injected evaluator -------------------------------------------

def test_search_b_paired_interval_and_verdict():
    noise = np.array([0.3, -0.2, 0.1, -0.4, 0.2, 0.0])  # text difficulty, shared by every schedule

    def fake(specs, lengths, metric="ppl", samples=None):
        rows = []
        for spec in specs:
            params = dict(spec.params)
            base = {"mixed": lambda: 3.5 + (params["b"] - 0.6) ** 2, "llama3": lambda: 3.3}.get(spec.method, lambda: 4.0)()
            if lengths == [256]:
                base = 3.0
            w = base + noise + 0.001 * np.arange(6)
            rows.append(ppl_result(spec, lengths[0], [float(v) for v in w]))
        return rows

    out = search_b(fake, Target((2048,), None, Geometry(64, 1e4, 256, 8.0)), tol=0.01)
    assert abs(out["best_b"] - 0.6) <= 0.01
    lo, hi = out["equivalent_b"]
    assert lo <= out["best_b"] <= hi and hi - lo < 0.5  # paired: only b near the best is shown equivalent
    refs = {r["label"]: r for r in out["references"]}
    assert {"yarn(beta_fast=32, beta_slow=1)", "llama3(low_freq_factor=1, high_freq_factor=4)", "dynamic"} <= set(refs)
    assert refs["llama3(low_freq_factor=1, high_freq_factor=4)"]["vs_best_b"]["beats_best_b"]
    assert out["verdict"].startswith("llama3") and "beats the best b" in out["verdict"]
    assert out["references_beating_best_b"] == ["llama3(low_freq_factor=1, high_freq_factor=4)"]


# --- the commands ------------------------------------------------------------------------------

def test_passkey_command_json_and_plot(tiny_dir, text_file, tmp_path):
    png = tmp_path / "pk.png"
    r = run("passkey", "--model", tiny_dir, "--data", text_file, "--len", "128", "--len", "256", "--method", "none,yarn",
            "--samples", "2", "--depths", "0,1", "--digits", "3", "--plot", str(png), "--json", "--text")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {(x["method"], x["len"], x["depth"]) for x in data["rows"]} == {
        (m, n, d) for m in ("none", "yarn(beta_fast=32, beta_slow=1)") for n in (128, 256) for d in (0.0, 1.0)}
    assert all(set(x) >= {"accuracy", "answer_nll", "samples"} and x["samples"] == 2 for x in data["rows"])
    assert png.stat().st_size > 10_000
    # at 128 (k = 2) the prompts are the same for both methods: answer NLLs are paired
    res = {(x["label"], x["len"]): x for x in data["results"]}
    assert len(res[("none", 128)]["prompt_answer_nll"]) == 4


def test_compare_with_metrics(tiny_dir, text_file):
    r = run("compare", "--model", tiny_dir, "--data", text_file, "--len", "128", "--len", "256", "--method", "none,pi",
            "--samples", "2", "--metric", "ppl,passkey-text,kl", "--depths", "0.5", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    metrics = {(x["metric"], x["label"], x["len"]) for x in data["results"]}
    assert ("kl", "pi", 64) in metrics and ("passkey-text", "none", 128) in metrics and ("ppl", "pi", 256) in metrics
    assert data["kl_factor"] == 4.0  # the longest --len over L
    assert all("vs_best" in x for x in data["results"])
    table = run("compare", "--model", tiny_dir, "--data", text_file, "--len", "64", "--len", "128", "--method", "none,pi",
                "--samples", "2", "--metric", "ppl,kl")
    assert table.exit_code == 0 and "KL @ L" in table.stdout and "paired" in table.stdout


@pytest.mark.parametrize("command", [["passkey", "--len", "128", "--depths", "0.5", "--text"], ["kl", "--k", "4"]])
def test_log_n_is_named_once(tiny_dir, text_file, command, tmp_path):
    png = tmp_path / "p.png"
    r = run(*command, "--model", tiny_dir, "--data", text_file, "--method", "mixed", "--b", "0.5", "--log-n",
            "--samples", "1", "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert "mixed(b=0.5)+log-n" in r.stdout and "+log-n +log-n" not in r.stdout and "+log-n+log-n" not in r.stdout
    assert png.stat().st_size > 5_000


def test_kl_command(tiny_dir, text_file):
    r = run("kl", "--model", tiny_dir, "--data", text_file, "--k", "4", "--method", "none,yarn", "--samples", "2", "--json")
    assert r.exit_code == 0, r.output
    res = {x["label"]: x for x in json.loads(r.stdout)["results"]}
    assert res["none"]["kl_mean"] == 0.0 and res["none"]["top1_agreement"] == 100.0
    assert res["yarn(beta_fast=32, beta_slow=1)"]["factor"] == 4


@pytest.mark.parametrize("args, needle", [
    (["passkey", "--depths", "1.5"], "--depths 1.5 is outside [0, 1]"),
    (["passkey", "--depths", "a,b"], "--depths a,b"),
    (["passkey", "--digits", "0"], "--digits 0 is outside 1..20"),
    (["passkey", "--digits", "40"], "--digits 40 is outside 1..20"),
    (["passkey", "--len", "40", "--text"], "shorter than the passkey prompt"),
    (["passkey", "--len", "40"], "shorter than the published passkey prompt itself"),
    (["passkey", "--len", "100000", "--text"], "too little text for the passkey filler"),
    (["kl"], "kl needs the target's factor"),
    (["kl", "--k", "4", "--len", "512"], "beyond the shipped length Ls"),
    (["compare", "--len", "128", "--metric", "bleu"], "--metric bleu: choose from ppl, key-ppl, passkey, passkey-text, kl"),
    (["search-b", "--objective", "bleu"], "--objective bleu: choose from ppl"),
])
def test_bad_input_is_one_line(tiny_dir, text_file, args, needle, tmp_path):
    r = run(*args, "--model", tiny_dir, "--data", text_file, "--cache-dir", str(tmp_path / "c"))
    assert r.exit_code != 0
    lines = [line for line in r.output.strip().splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and needle in lines[0], r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_too_little_text_at_a_later_length_fails_before_any_forward_pass(tiny_dir, text_file, tmp_path):
    cache = tmp_path / "c"
    r = run("passkey", "--model", tiny_dir, "--data", text_file, "--len", "128", "--len", "100000", "--cache-dir", str(cache),
            "--text")
    assert r.exit_code != 0 and "too little text" in r.output
    assert not cache.exists() or not any(cache.iterdir())


def test_a_candidate_dropped_by_a_race_pairs_on_the_windows_it_has():
    # compare --race: a dropped method has fewer windows than the best; it pairs on the first ones
    ranked = rank_against_best({"a": [1.0, 2.0, 3.0, 4.1], "b": [2.0, 3.1]})
    assert ranked["a"]["best"] and ranked["b"]["n"] == 2 and ranked["b"]["diff"] == pytest.approx(1.05)


def test_every_metric_record_is_whole():
    """A record names a result type that carries its metric, the field its estimand reads, a column heading, and a
    cell in compare's table: a metric added without one of them fails here, not in a user's run."""
    for name, m in REGISTRY.items():
        cls = m.result()
        assert issubclass(cls, EvalResult), name
        assert m.units == "task" or cls.metric == name, name
        assert m.estimand in {f.name for f in dataclasses.fields(cls)}, (name, m.estimand)
        assert "cell" in vars(cls) and m.column, name  # its own cell in compare's table
        assert m.prefixes == (m.unit_metric == "ppl"), name  # one pass of a long window serves the shorter ones


REGISTRY_MODULES = ("evaluation/metrics.py", "evaluation/results.py", "evaluation/task_results.py",
                    "evaluation/cache_migrations.py", "evaluation/ruler/")  # the records, their result types, the task registry


def metric_names_in(paths, names) -> list[str]:
    """`path:line name` for every string constant in `paths` that is a metric's name (a field read, a call argument,
    a comparison alike): what the layers below the commands must not hold."""
    return [f"{p}:{n.lineno} {n.value}" for p in paths for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]


def test_no_metric_name_below_the_command_layer():
    """The command layer resolves --metric / --objective once; evaluation, tuning, export and report/ take the record
    (`PPL`, `metric_record(name)`), so a table, a race or a search names no metric: a new metric is a record, not a
    search for "ppl" through the tree."""
    root = Path(__file__).parents[1] / "ropecli"
    below = [p for p in root.rglob("*.py") if p.relative_to(root).parts[0] != "cli"
             and not str(p.relative_to(root)).startswith(REGISTRY_MODULES)]
    assert len(below) > 100
    assert not metric_names_in(below, set(REGISTRY)), metric_names_in(below, set(REGISTRY))


def test_the_metric_name_check_finds_a_name(tmp_path):
    bad = tmp_path / "table.py"
    bad.write_text('def cells(r):\n    return r["ppl"] if r["metric"] == "key-ppl" else None\n')
    assert sorted(metric_names_in([bad], {"ppl", "key-ppl"})) == [f"{bad}:2 key-ppl", f"{bad}:2 ppl"]


def test_compare_judges_key_ppl_by_its_own_verdict():
    """The key-PPL column beside PPL reads the row's key verdict (`key_vs_best`), not PPL's: a schedule best on PPL
    and worse on the key predictions is bold in one column only, and each column's line names its own best."""
    a, b = ppl_result(make_spec("none"), 64, [3.0, 3.1, 2.9, 3.0]), ppl_result(make_spec("pi"), 64, [3.5, 3.6, 3.4, 3.5])
    for r, key in ((a, [5.0, 5.2, 4.9, 5.1]), (b, [2.0, 2.1, 1.9, 2.0])):
        r.key_rule, r.window_key_nll, r.window_key_tokens = "far-repeat", key, [3, 3, 3, 3]
        r.key_nll = sum(key) / 4
        r.key_ppl, r.key_tokens = math.exp(r.key_nll), 12
    rows = attach_paired([a, b])
    assert rows[0].vs_best.best and rows[1].key_vs_best.best
    lines = tie_lines(rows)
    assert any(line.startswith("PPL @ 64: best none") for line in lines), lines
    assert any(line.startswith("key PPL @ 64: best pi") for line in lines), lines


def test_a_column_where_every_candidate_diverged_has_no_best_and_says_so():
    """Every result of a length with an infinite unit: no best to pair with (each shown worse, nothing bold), and the
    column's line says so, where it raised StopIteration."""
    a = ppl_result(make_spec("none"), 64, [math.inf, 3.0])
    b = ppl_result(make_spec("pi"), 64, [math.inf, 3.2])
    rows = attach_paired([a, b])
    assert not any(r.vs_best.best for r in rows) and {r.vs_best.verdict for r in rows} == {"worse"}
    assert tie_lines(rows) == ["PPL @ 64: no best, every candidate diverged (a unit with infinite loss in each)"]
