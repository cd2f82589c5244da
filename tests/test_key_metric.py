"""The key-token metric: LongPPL reproduced (longppl 0.3.0, vendored in tests/reference), the same key
set for every schedule, paired, the float16 per-prediction NLL accurate enough, prefix scoring kept."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.compared import attach_paired
from ropecli.evaluation.corpus import held_out_plays
from ropecli.evaluation.inputs import Inputs
from ropecli.evaluation.key_metric import key_fields, window_key_sums
from ropecli.evaluation.key_tokens import FarRepeat, far_repeat_mask
from ropecli.evaluation.longppl import LongShort, merge_intervals, overlap_mask, token_spans
from ropecli.evaluation.results import KeyPplResult
from ropecli.models.token_losses import token_summary
from ropecli.report.tables import key_note
from ropecli.spec import make_spec

from fakes import ppl_result
from helpers import runner
from reference.longppl_0_3_0 import cal_overlap, compute_longppl, find_key_token
from tiny_models import save_tiny


def repeated_text() -> str:
    """Real text with a passage repeated after more than the short context: tokens the long context predicts."""
    plays = list(held_out_plays().values())
    a, b = plays[0][2000:2240], plays[1][3000:3210]
    return a + b + a


def test_longppl_reproduced_key_tokens_and_number(builtin):
    """ropecli's LongShort rule on the built-in model (evaluator and model under test, L = 256) marks the
    same key tokens as longppl's `compute_longppl` on the same text, and its key PPL equals longppl's
    LongPPL: losses from chunked final hidden states against longppl's full logits (1e-4). The built-in
    model's long-short gain stays under 1.2 nats on this text, so α = 2 marks nothing (both agree on that);
    α = 0.1, β = -6 give a key set to compare."""
    text = repeated_text()
    tok, model = builtin.tokenizer, builtin.model
    ids = np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    assert len(ids) <= builtin.rope.train_len
    trunc, window = 64, 32
    ref = compute_longppl(text, model, model, tok, tok, trunc_len=trunc, sliding_window=window, alpha=0.1, beta=-6)
    intervals = find_key_token(text, model, tok, trunc, window, alpha=0.1, beta=-6)
    rule = LongShort(builtin, tok, EvalCache(None, enabled=False), trunc_len=trunc, sliding_window=window, alpha=0.1,
                     beta=-6.0)
    assert compute_longppl(text, model, model, tok, tok, trunc_len=trunc, sliding_window=window)["n_key_token"] is None
    assert not LongShort(builtin, tok, EvalCache(None, enabled=False), trunc_len=trunc, sliding_window=window).mask(ids).any()
    mask = rule.mask(ids)

    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    expected = sorted(cal_overlap(offsets, [tuple(map(int, iv)) for iv in intervals]))
    assert ref["n_key_token"] >= 10  # the repeated passage: a real long-short contrast
    assert list(np.flatnonzero(mask)) == expected
    per_token = builtin.token_losses(ids)
    ours = float(np.exp(per_token[mask].mean()))
    assert ours == pytest.approx(float(ref["longppl"]), rel=1e-4)
    assert rule.passes == 1 + len(range(0, len(ids) - trunc, window))  # one full pass, one per short block


def test_longppl_across_tokenizers(builtin, tmp_path):
    """An evaluator with another vocabulary (a character-level model): key tokens go through character
    spans as longppl does (`find_key_token`'s merged intervals, `cal_overlap`); loose thresholds so a
    random evaluator has some."""
    judge = load_model(str(save_tiny(tmp_path / "judge")), device="cpu", dtype="fp32", train_len=4096)
    text = repeated_text()[:420]
    tok = builtin.tokenizer
    ids = np.asarray(tok(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    rule = LongShort(judge, tok, EvalCache(None, enabled=False), trunc_len=96, sliding_window=48, alpha=0.0, beta=-20.0)
    mask = rule.mask(ids)
    intervals = find_key_token(text, judge.model, judge.tokenizer, 96, 48, alpha=0.0, beta=-20.0)
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    expected = sorted(i for i in cal_overlap(offsets, [tuple(map(int, iv)) for iv in intervals]) if i >= 0)
    assert len(expected) >= 10
    assert list(np.flatnonzero(mask)) == expected


def test_token_spans_and_overlap_walk():
    class Chars:  # decode = join; one special token
        all_special_ids = [0]

        def decode(self, ids, skip_special_tokens=False):
            return "".join("" if i == 0 else "abcdefgh"[i - 1] * (1 + i % 2) for i in ids)

    text, spans = token_spans(Chars(), np.array([0, 1, 2, 3]))
    assert text == "aabcc" and spans == [(0, 0), (0, 2), (2, 3), (3, 5)]
    assert merge_intervals([(0, 2), (2, 3), (5, 6)]) == [(0, 3), (5, 6)]
    assert list(overlap_mask(spans, [(2, 5)])) == [False, True, True]  # tokens 2 and 3: predictions 1 and 2


def test_evaluator_too_short_for_the_window_is_refused(builtin):
    rule = LongShort(builtin, builtin.tokenizer, EvalCache(None, enabled=False), trunc_len=64)
    with pytest.raises(RopeCliError, match="reads 256 tokens.*--key-evaluator"):
        rule.mask(np.arange(300) % 50 + 5)


def test_key_set_is_cached_per_window_and_evaluator(builtin, tmp_path):
    ids = np.asarray(builtin.tokenizer(repeated_text(), add_special_tokens=False)["input_ids"], dtype=np.int64)
    cache = EvalCache(str(tmp_path / "c"))
    first = LongShort(builtin, builtin.tokenizer, cache, trunc_len=64, sliding_window=32)
    again = LongShort(builtin, builtin.tokenizer, cache, trunc_len=64, sliding_window=32)
    assert np.array_equal(first.mask(ids), again.mask(ids)) and first.passes > 0 and again.passes == 0
    other = LongShort(builtin, builtin.tokenizer, cache, trunc_len=32, sliding_window=32)
    other.mask(ids)
    assert other.passes > 0  # another rule: its own entry


def test_far_repeat_rule_marks_copies_from_beyond_the_short_context():
    ids = np.array([5, 6, 7, 8, 9] + list(range(20, 40)) + [5, 6, 7, 8, 9])
    mask = far_repeat_mask(ids, short=10, span=4)
    # token j = 28 (the second 8) ends the repeated 4-gram 5 6 7 8 first seen ending at j = 3: 25 back > 10
    assert list(np.flatnonzero(mask)) == [27, 28]
    assert not far_repeat_mask(ids, short=30, span=4).any()  # within the short context: not key
    rule = FarRepeat(short=10)
    assert np.array_equal(rule.mask(ids), mask) and rule.passes == 0


def test_float16_kept_nll_gives_the_key_nll_within_3e4():
    rng = np.random.default_rng(0)
    per_token = rng.gamma(2.0, 1.5, size=4000)
    mask = rng.random(4000) < 0.1
    value = token_summary(per_token, None, keep=True)
    (total, n), = window_key_sums([value], [mask], None)
    assert n == mask.sum() and total == pytest.approx(per_token[mask].sum(), rel=3e-4)
    (last_total, last_n), = window_key_sums([value], [mask], 1000)  # --score-last: key predictions among the last 1000
    assert last_n == mask[-1000:].sum() and last_total == pytest.approx(per_token[-1000:][mask[-1000:]].sum(), rel=3e-4)
    assert window_key_sums([value[:3]], [mask], None) is None  # an entry without per-prediction NLL


def test_key_fields_leave_windows_without_keys_out():
    f = key_fields([(6.0, 3), (0.0, 0), (2.0, 2)], "far-repeat")
    assert f["key_nll"] == pytest.approx(8.0 / 5) and f["key_tokens"] == 5
    assert f["window_key_nll"] == [2.0, None, 1.0] and f["window_key_tokens"] == [3, 0, 2]

    r = KeyPplResult(method="pi", label="pi", params={}, log_n=False, len=8, factor=1.0, attention_factor=1.0, seconds=0.0,
                     ppl=1.0, nll=0.0, tokens=1, ppl_err=None, window_nll=[0.0] * 3, windows=["a", "b", "c"], **f)
    assert r.values == [2.0, 1.0] and r.clusters == ["a", "c"]  # paired over the windows that have key predictions


def _compare(*extra):
    out = runner.invoke(app, ["compare", "--method", "none,yarn,pi", "--len", "256", "--len", "512", "--samples", "3",
                              "--json", *extra])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_compare_reports_key_ppl_paired_and_equal_to_a_recount():
    """compare's key PPL is exp(mean NLL over the far-repeat key predictions), the same key set for every
    method (counts equal), ranked with its own paired verdicts; the key predictions' NLL recounted from
    the model's own per-prediction losses agrees."""
    out = _compare()
    rows = [r for r in out["results"] if r["len"] == 512]
    assert len({tuple(r["window_key_tokens"]) for r in rows}) == 1 and rows[0]["key_tokens"] > 20
    assert rows[0]["key_rule"] == "far-repeat (short 128, span 4)"
    assert sum(1 for r in rows if r["key_vs_best"]["best"]) == 1
    assert all("verdict" in r["key_vs_best"] for r in rows)
    lm = load_model(None, device="cpu", dtype="fp32")
    inputs = Inputs.load(lm.tokenizer, None, samples=3)
    rule = FarRepeat(short=128)
    yarn = next(r for r in rows if r["method"] == "yarn")
    ev_geom = lm.rope.geometry(2.0)
    sched = make_spec("yarn").schedule(ev_geom, 512)
    sums = []
    with lm.scaled(sched, False):
        for ids, _ in inputs.spanning(512).unit_inputs("ppl", 512):
            losses, mask = lm.token_losses(ids), rule.mask(ids)
            sums.append((losses[mask].sum(), mask.sum()))
    docs = yarn["windows"]  # the estimand: per document the key NLL pooled over its key predictions, then the mean
    pooled = [sum(s for (s, _), g in zip(sums, docs) if g == d) / sum(n for (_, n), g in zip(sums, docs) if g == d)
              for d in dict.fromkeys(docs)]
    assert yarn["key_nll"] == pytest.approx(sum(pooled) / len(pooled), rel=3e-4)


def test_key_ppl_metric_and_prefix_scoring_keep_one_pass_per_window():
    """--metric key-ppl ranks by key PPL from the same cached windows as ppl (no extra pass), and the lengths
    below the longest come from the longest windows' prefixes."""
    out = _compare("--metric", "ppl,key-ppl", "--k", "2")  # one k: 256 is a prefix of 512 under one schedule
    assert out["forward_passes"] == 3 * 3  # 3 windows x 3 methods: 256 from the 512 windows, key-ppl from ppl's
    ppl = {(r["label"], r["len"]): r for r in out["results"] if r["metric"] == "ppl"}
    keyed = [r for r in out["results"] if r["metric"] == "key-ppl"]
    assert len(keyed) == len(ppl) == 6
    for r in keyed:
        assert r["key_ppl"] == ppl[(r["label"], r["len"])]["key_ppl"]
        if r["len"] == 512:
            assert r["vs_best"]["best"] == ppl[(r["label"], 512)]["key_vs_best"]["best"]


def test_key_ppl_as_the_search_objective():
    out = runner.invoke(app, ["search-b", "--len", "512", "--samples", "2", "--objective", "key-ppl", "--tol", "0.2", "--json"])
    assert out.exit_code == 0, out.output
    res = json.loads(out.stdout)
    best = next(e for e in res["evaluations"] if e["b"] == res["best_b"])
    assert best["objective"] == pytest.approx(float(np.log(best["key_ppl"]["512"])), rel=1e-9)


def test_key_ppl_without_a_rule_is_one_line():
    out = runner.invoke(app, ["compare", "--method", "pi", "--len", "256", "--metric", "key-ppl", "--key-tokens", "off"])
    assert out.exit_code != 0 and "--key-tokens far-repeat" in out.output and "Traceback" not in out.output


def test_advise_ranks_by_key_ppl(tmp_path):
    """advise --metric key-ppl: the objective of every row is its mean log key-token PPL, the rule says so."""
    out = runner.invoke(app, ["advise", "--len", "512", "--candidates", "pi,yarn,ntk-fixed", "--samples", "2", "--no-race",
                              "--metric", "key-ppl", "--out", str(tmp_path / "a")])
    assert out.exit_code == 0, out.output
    advice = json.loads((tmp_path / "a" / "advice.json").read_text())
    assert advice["metric"] == "key-ppl" and "key-token PPL" in advice["rule"]
    for r in advice["rows"]:
        assert r["objective"] == pytest.approx(float(np.log(r["key_ppl"]["512"])), rel=1e-9)
    assert "key PPL @ 512" in (tmp_path / "a" / "report.md").read_text()


def test_long_short_from_the_cli_is_cached_and_refuses_windows_past_the_evaluator(tmp_path):
    args = ["compare", "--method", "none,yarn", "--len", "256", "--samples", "2", "--key-tokens", "long-short",
            "--key-short", "64", "--cache-dir", str(tmp_path / "c"), "--json"]
    first = json.loads(runner.invoke(app, args).stdout)
    assert first["key_rule"]["name"] == "long-short" and first["key_rule"]["trunc_len"] == 64
    assert first["key_evaluator_passes"] == 2 * (1 + len(range(0, 256 - 64, 1024)))  # per window: full + short blocks
    again = json.loads(runner.invoke(app, args).stdout)
    assert again["key_evaluator_passes"] == 0 and again["forward_passes"] == 0
    assert [r["window_key_tokens"] for r in again["results"]] == [r["window_key_tokens"] for r in first["results"]]
    past = runner.invoke(app, [a if a != "256" else "512" for a in args])
    assert past.exit_code != 0 and "--key-evaluator" in past.output and "Traceback" not in past.output
    wrong = runner.invoke(app, ["compare", "--len", "256", "--key-evaluator", "x"])
    assert wrong.exit_code != 0 and "--key-tokens long-short" in wrong.output


def test_cached_windows_without_per_prediction_nll_are_computed_again_for_key_ppl(tmp_path):
    """Windows cached by a run without a key rule (no per-prediction NLL kept) are scored again when the
    next run asks for key PPL, instead of silently leaving key PPL out (what advise on SmolLM2 did)."""
    cache = str(tmp_path / "cache")
    args = ["compare", "--method", "none,yarn", "--len", "512", "--samples", "2", "--cache-dir", cache, "--json"]
    first = runner.invoke(app, [*args, "--key-tokens", "off"])
    assert first.exit_code == 0, first.output
    assert all(r["key_ppl"] is None for r in json.loads(first.stdout)["results"])
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    out = json.loads(again.stdout)
    assert out["forward_passes"] == 4 and all(r["key_ppl"] is not None for r in out["results"])


def test_the_key_note_says_what_happened():
    """No key prediction found (0 key tokens, an empty cache) is not "cached windows predate"; a result
    without per-prediction NLL is."""
    base = ppl_result(make_spec("pi", factor=2.0), 512, [3.0, 3.1])
    found_none = dataclasses.replace(base, key_rule="repeated n-grams", key_tokens=0)
    note = key_note([found_none])[0]
    assert "found no key prediction" in note and "predate" not in note, note
    stale = dataclasses.replace(base, key_rule="repeated n-grams", key_tokens=None)
    assert "predate" in key_note([stale])[0]


def test_a_column_where_no_window_has_a_key_prediction_is_left_unranked():
    """Key PPL at a length whose windows hold no key prediction (every value empty): no verdict, no error (it raised
    "paired values need at least one unit on each side" once windows lost their BOS and 256 tokens held no key)."""
    f = key_fields([(0.0, 0), (0.0, 0)], "far-repeat")
    results = [KeyPplResult(method=m, label=m, params={}, log_n=False, len=8, factor=1.0, attention_factor=1.0, seconds=0.0,
                            ppl=1.0, nll=0.0, tokens=1, ppl_err=None, window_nll=[0.0] * 2, windows=["a", "b"], **f)
               for m in ("pi", "yarn")]
    assert all(r.values == [] for r in results)
    rows = attach_paired(results)
    assert [r.vs_best for r in rows] == [None, None]
