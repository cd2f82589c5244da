"""Loss by position: every forward pass keeps the NLL summed in 32 equal bins of the window's predictions.
The bins equal the per-token losses of the full logits, add up to the window's NLL, pair across schedules
bin by bin (their count-weighted mean is the whole comparison), reach the JSON and the pictures of
`compare --plot` and advise's report; cache entries written before bins were kept still give the PPL."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ropecli.cli.app import app
from ropecli.evaluation.cache import EvalCache
from ropecli.models.chunked_scoring import window_nll
from ropecli.models.token_losses import POSITION_BINS, bin_means, decode_tokens, position_edges, token_summary

from helpers import runner


def test_bins_are_the_per_token_losses_of_the_full_logits(tiny):
    ids = torch.randint(3, 60, (1, 200))
    total, n, bins = window_nll(tiny.model, ids, chunk_tokens=17)
    with torch.no_grad():
        logits = tiny.model(input_ids=ids).logits[0, :-1].float()
    per_token = F.cross_entropy(logits, ids[0, 1:], reduction="none").double().numpy()
    edges = position_edges(199)
    assert len(bins) == POSITION_BINS and edges[0] == 0 and edges[-1] == 199
    assert np.allclose(bins, [per_token[a:b].sum() for a, b in zip(edges[:-1], edges[1:])], rtol=1e-5, atol=1e-5)
    assert n == 199 and total == pytest.approx(per_token.sum(), rel=1e-6) == pytest.approx(sum(bins), rel=1e-9)


def test_score_last_scores_the_tail_and_bins_still_cover_the_window():
    per_token = np.arange(1.0, 101.0)
    total, n, bins = token_summary(per_token, score_last=10)
    assert (total, n) == (sum(range(91, 101)), 10)
    assert sum(bins) == per_token.sum()
    assert np.allclose(bin_means(bins, 101) * np.diff(position_edges(100)), bins)


def test_compare_json_and_pictures_carry_the_loss_by_position(tiny_dir, long_text_file, tmp_path):
    r = runner.invoke(app, ["compare", "--model", tiny_dir, "--data", long_text_file, "--len", "64", "--len", "256",
                            "--method", "none,pi,mixed", "--samples", "3", "--plot", str(tmp_path / "ppl.png"), "--json"])
    assert r.exit_code == 0, r.output
    results = json.loads(r.stdout)["results"]
    for row in results:
        assert len(row["position_nll"]) == POSITION_BINS and len(row["window_position_nll"]) == 3
        if row["vs_best"]["best"]:
            assert "position_vs_best" not in row
            continue
        by_bin = row["position_vs_best"]
        assert len(by_bin["diff"]) == POSITION_BINS and by_bin["windows"] == 3 and by_bin["pointwise"]
        # the bins pair window by window: their count-weighted mean is the whole window's paired difference
        counts = np.diff(position_edges(row["len"] - 1))
        assert np.dot(counts, by_bin["diff"]) / counts.sum() == pytest.approx(row["vs_best"]["diff"], abs=1e-9)
    assert (tmp_path / "ppl.png").is_file() and (tmp_path / "ppl-position.png").is_file()


def test_the_unscaled_builtin_model_breaks_just_past_L_and_pi_does_not():
    """What the bins are for: on the trained built-in model at 8 L (2 windows, measured: the unscaled model
    +0.90 nats past L against within it, PI +0.00, and PI 1.2 nats worse than it within L), the unscaled
    model's loss rises past L; PI's does not rise, it is worse everywhere (k = 8 squeezes short context too)."""
    r = runner.invoke(app, ["compare", "--len", "2048", "--method", "none,pi", "--samples", "2", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    L = out["train_len"]
    rows = {x["label"]: x["position_nll"] for x in out["results"]}
    edges = position_edges(2048 - 1)
    within = [j for j in range(POSITION_BINS) if edges[j + 1] <= L - 1]  # bins of predictions inside L
    past = [j for j in range(POSITION_BINS) if edges[j] >= L]
    assert within and past
    jump = lambda nll: np.mean([nll[j] for j in past]) - np.mean([nll[j] for j in within])  # noqa: E731
    assert jump(rows["none"]) > 0.5 and abs(jump(rows["pi"])) < 0.2
    assert np.mean([rows["pi"][j] for j in within]) > np.mean([rows["none"][j] for j in within]) + 0.5


def test_cache_entries_without_bins_still_give_the_ppl(tiny_dir, long_text_file, tmp_path):
    """Without a key-token rule an old entry (no bins) serves PPL as it is; with one, an entry without
    per-prediction NLL is computed again (tests/test_key_metric.py)."""
    args = ["ppl", "--model", tiny_dir, "--data", long_text_file, "--len", "128", "--samples", "2", "--method", "pi",
            "--cache-dir", str(tmp_path / "c"), "--json", "--key-tokens", "off"]
    first = json.loads(runner.invoke(app, args).stdout)["results"][0]
    cache, rewritten = EvalCache(str(tmp_path / "c")), 0
    for path in (tmp_path / "c").rglob("*.json"):  # as ropecli wrote them before the bins were kept
        entry = json.loads(path.read_text())
        if len(entry["result"]["value"]) >= 3:  # (sum, n, bins[, per-prediction NLL]) -> (sum, n)
            cache.put(entry["key"], {**entry["result"], "value": entry["result"]["value"][:2]})
            rewritten += 1
    assert rewritten == 2
    again = json.loads(runner.invoke(app, args).stdout)
    assert again["cache"]["misses"] == 0
    row = again["results"][0]
    assert row["ppl"] == first["ppl"] and row["position_nll"] is None and first["position_nll"] is not None


def test_kept_token_losses_are_every_prediction_and_force_a_recompute_of_entries_without_them(tiny_dir, long_text_file, tmp_path):
    """--keep-token-losses stores each prediction's NLL (float16) with its window: they add up to the window's
    NLL and its bins; a cached window without them is computed again, one with them is reused."""
    base = ["ppl", "--model", tiny_dir, "--data", long_text_file, "--len", "128", "--samples", "2", "--method", "yarn", "--k", "2",
            "--cache-dir", str(tmp_path / "c"), "--json"]
    assert json.loads(runner.invoke(app, [*base, "--key-tokens", "off"]).stdout)["forward_passes"] == 2  # no NLL kept
    kept = json.loads(runner.invoke(app, [*base, "--keep-token-losses"]).stdout)
    assert kept["forward_passes"] == 2  # the entries had no per-token losses: computed again
    assert json.loads(runner.invoke(app, [*base, "--keep-token-losses"]).stdout)["forward_passes"] == 0
    values = [json.loads(p.read_text())["result"]["value"] for p in (tmp_path / "c").rglob("*.json")]
    for total, n, bins, tokens in (v for v in values if len(v) == 4):
        per_token = decode_tokens(tokens)
        assert len(per_token) == n == 127
        assert per_token.sum() == pytest.approx(total, rel=2e-3) == pytest.approx(sum(bins), rel=1e-9)
        edges = position_edges(127)
        assert np.allclose([per_token[a:b].sum() for a, b in zip(edges[:-1], edges[1:])], bins, rtol=2e-3)
