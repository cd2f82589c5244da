"""search-b: the golden-section search on injected objectives, and end to end on a tiny model:
resume after an interruption, zero forward passes on a rerun, corrupt cache entries recomputed,
the exported config reproducing ropecli's patched perplexity."""

import json
import math
import shlex

import numpy as np
import pytest
import torch
from helpers import runner
from tiny_models import char_tokenizer
from transformers import AutoModelForCausalLM

from ropecli.cli.app import app
from ropecli.cli.commands import search_commands
from ropecli.errors import RopeCliError
from ropecli.evaluation.bos_policy import lead_ids
from ropecli.evaluation.cache import FORMAT
from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents
from ropecli.evaluation.evaluator import Evaluator
from ropecli.models.chunked_scoring import naive_window_nll
from ropecli.report.search_tables import equivalent_words
from ropecli.tuning.optimizers import (
    golden_section,
    grid_evaluations,
    interior_evaluations,
    local_maxima,
)


@pytest.mark.parametrize("true_b", [0.0, 0.004, 0.1, 0.3333, 0.5, 0.625, 0.777, 0.99, 1.0])
@pytest.mark.parametrize("shape", ["quadratic", "abs", "skewed"])
def test_lands_within_tol_in_12_evaluations(true_b, shape):
    f = {"quadratic": lambda b: (b - true_b) ** 2,
         "abs": lambda b: abs(b - true_b),
         "skewed": lambda b: math.exp(3 * (b - true_b)) - 3 * (b - true_b)}[shape]
    r = golden_section(f, 0.0, 1.0, 0.01)
    assert abs(r.best_b - true_b) <= 0.01
    assert len(r.points) <= 12
    assert r.non_unimodal_at == []


def test_boundary_minima_are_reported():
    assert golden_section(lambda b: b, 0, 1, 0.01).at_boundary == "lo"
    assert golden_section(lambda b: -b, 0, 1, 0.01).at_boundary == "hi"
    assert golden_section(lambda b: (b - 0.5) ** 2, 0, 1, 0.01).at_boundary is None


def test_sub_range_and_counts():
    r = golden_section(lambda b: (b - 0.42) ** 2, 0.3, 0.6, 0.001)
    assert abs(r.best_b - 0.42) <= 0.001
    assert len(r.points) == 2 + interior_evaluations(0.3, 0.6, 0.001)
    assert interior_evaluations(0, 1, 0.01) == 10 and grid_evaluations(0, 1, 0.01) == 51


def test_non_unimodal_warning():
    assert local_maxima([(0, 1.0), (0.3, 2.0), (0.5, 0.5), (0.8, 1.5), (1.0, 1.0)]) == [0.3, 0.8]
    r = golden_section(lambda b: math.sin(20 * b), 0, 1, 0.01)
    assert r.non_unimodal_at


@pytest.mark.parametrize("lo,hi,tol,fragment", [(0.5, 0.5, 0.01, "below"), (0.7, 0.2, 0.01, "below"),
                                                (0, 1, 0, "positive"), (-0.1, 1, 0.01, "[0, 1]"), (0, 1.5, 0.01, "[0, 1]")])
def test_bad_ranges(lo, hi, tol, fragment):
    with pytest.raises(RopeCliError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        golden_section(lambda b: b, lo, hi, tol)


# --- end to end ------------------------------------------------------------------------------

def search(tiny_dir, cache, *extra):
    return runner.invoke(app, ["search-b", "--model", tiny_dir, "--len", "192", "--samples", "2", "--tol", "0.05",
                               "--cache-dir", str(cache), "--json", *extra])


def test_search_end_to_end_and_cached_rerun(tiny_dir, tmp_path):
    r = search(tiny_dir, tmp_path / "c", "--plot", str(tmp_path / "s.png"))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert {"best_b", "evaluations", "references"} <= set(out)
    assert all({"b", "objective", "ppl"} <= set(e) for e in out["evaluations"])
    assert [x["label"] for x in out["references"]] == ["none", "pi", "ntk-aware", "ntk-fixed", "dynamic",
                                                      "yarn(beta_fast=32, beta_slow=1)",
                                                      "llama3(low_freq_factor=1, high_freq_factor=4)", "mixed(b=0.625)"]
    lo, hi = out["equivalent_b"]
    assert lo <= out["best_b"] <= hi and out["verdict"]
    assert all("vs_best_b" in x and "windows" in x for x in out["references"])
    best = min(out["evaluations"], key=lambda e: e["objective"])
    assert out["best_b"] == best["b"]
    # b = 0 is PI and b = 1 is NTK-fixed: the references reuse the ends, and an independent
    # `ppl` run of each method on the same windows agrees
    by_b = {e["b"]: e for e in out["evaluations"]}
    refs = {x["label"]: x for x in out["references"]}
    assert refs["pi"]["same_as"] == "mixed(b=0)" and refs["ntk-fixed"]["same_as"] == "mixed(b=1)"
    for method, b in [("pi", 0.0), ("ntk-fixed", 1.0)]:
        r = runner.invoke(app, ["ppl", "--model", tiny_dir, "--len", "192", "--samples", "2", "--method", method,
                                "--no-cache", "--json"])
        assert json.loads(r.stdout)["results"][0]["nll"] == pytest.approx(by_b[b]["objective"], rel=1e-6)
    assert out["forward_passes"] > 0
    assert (tmp_path / "s.png").stat().st_size > 5000
    again = json.loads(search(tiny_dir, tmp_path / "c").stdout)
    assert again["forward_passes"] == 0
    assert again["best_b"] == out["best_b"] and again["evaluations"] == [{**e, "cached": True} for e in out["evaluations"]]


@pytest.mark.parametrize("command", [
    ["search-b", "--tol", "0.05"],  # golden-section over b: its 5th evaluation is interrupted
    ["search", "--vary", "b", "--vary", "critical", "--budget", "8"],  # Nelder-Mead over (b, m_c)
])
def test_interrupted_search_resumes(tiny_dir, tmp_path, monkeypatch, command):
    """One engine, one resume test: Ctrl-C during an evaluation keeps the finished ones in the cache."""
    def run(cache):
        return runner.invoke(app, [*command, "--model", tiny_dir, "--len", "192", "--samples", "2",
                                   "--cache-dir", str(cache), "--json"])

    full = json.loads(run(tmp_path / "ref").stdout)
    real = Evaluator._compute
    calls = {"n": 0}

    def flaky(self, *args, **kw):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt  # the user presses Ctrl-C during the 5th evaluation
        return real(self, *args, **kw)

    monkeypatch.setattr(Evaluator, "_compute", flaky)
    r = run(tmp_path / "c")
    assert r.exit_code == 130 and "rerun the same command to resume" in r.output
    monkeypatch.setattr(Evaluator, "_compute", real)
    resumed = json.loads(run(tmp_path / "c").stdout)
    assert resumed["cache"]["hits"] == 4 * 2  # the four finished evaluations (two windows each) were kept
    assert resumed.get("best_b", resumed.get("best_params")) == full.get("best_b", full.get("best_params"))
    assert [e["objective"] for e in resumed["evaluations"]] == [e["objective"] for e in full["evaluations"]]


def test_corrupt_and_foreign_cache_entries_are_recomputed(tiny_dir, tmp_path):
    cache = tmp_path / "c"
    first = json.loads(search(tiny_dir, cache).stdout)
    files = sorted(cache.glob("*.json"))
    files[0].write_text("{ truncated")
    entry = json.loads(files[1].read_text())
    entry["key"]["len"] = 999  # an entry for something else, under this key's name
    files[1].write_text(json.dumps(entry))
    entry = json.loads(files[2].read_text())
    entry["result"]["value"][0] = 1.0  # tampered result: checksum no longer matches
    files[2].write_text(json.dumps(entry))
    again = json.loads(search(tiny_dir, cache).stdout)
    assert again["cache"]["rejected"] == 3
    assert again["forward_passes"] == 3  # one entry per window: the three bad windows, nothing else
    assert [e["objective"] for e in again["evaluations"]] == [e["objective"] for e in first["evaluations"]]
    strip = lambda refs: [{k: v for k, v in r.items() if k != "cached"} for r in refs]  # noqa: E731
    assert strip(again["references"]) == strip(first["references"])


def test_entries_of_another_cache_format_are_recomputed_and_said_once(tiny_dir, tmp_path):
    cache = tmp_path / "c"
    first = json.loads(search(tiny_dir, cache).stdout)
    files = sorted(cache.glob("*.json"))
    for f in files[:3]:  # written by an older ropecli: same key, another format
        entry = json.loads(f.read_text())
        f.write_text(json.dumps({**entry, "format": FORMAT - 1}))
    r = search(tiny_dir, cache)
    again = json.loads(r.stdout)
    assert again["cache"]["stale"] == 3 and again["cache"]["rejected"] == 0
    assert again["forward_passes"] == 3  # the three windows recomputed, never reused
    notes = [ln for ln in r.stderr.splitlines() if "another ropecli cache format" in ln]
    assert notes == [f"note: 3 cached result(s) were of another ropecli cache format and were recomputed (format {FORMAT} now)"]
    assert [e["objective"] for e in again["evaluations"]] == [e["objective"] for e in first["evaluations"]]
    assert all(json.loads(f.read_text())["format"] == FORMAT for f in files)


def test_no_cache_always_computes(tiny_dir, tmp_path):
    a = json.loads(search(tiny_dir, tmp_path / "c", "--no-cache").stdout)
    assert a["forward_passes"] > 0 and not list((tmp_path / "c").glob("*.json"))


def test_exported_config_reproduces_patched_ppl(tiny_dir, tmp_path):
    export = tmp_path / "rope.json"
    out = json.loads(search(tiny_dir, tmp_path / "c", "--export-config", str(export)).stdout)
    block = json.loads(export.read_text())
    assert block["rope_parameters"]["rope_type"] == "longrope"
    # generation-safe by default, as export writes: the schedule at every length, a KV cache stays valid
    assert block["rope_parameters"]["short_factor"] == block["rope_parameters"]["long_factor"]
    assert "short_factor = long_factor" in out["export_config"]["note"]
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, **block).eval()
    tok = char_tokenizer()
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, tok), 192, 2, 0, lead_ids(tok, "auto"))
    nll = [naive_window_nll(model, torch.from_numpy(row)[None]) for row in win.ids]
    ppl = math.exp(sum(n for n, _ in nll) / sum(t for _, t in nll))
    assert ppl == pytest.approx(out["best_ppl"]["192"], rel=1e-4)
    assert not np.isclose(ppl, out["references"][0]["ppl"]["192"], rtol=1e-3)  # and it is not the unscaled model


def test_log_n_export_has_constant_attention_factor(tiny_dir, tmp_path):
    export = tmp_path / "rope.json"
    r = search(tiny_dir, tmp_path / "c", "--log-n", "--export-config", str(export), "--tol", "0.2", "--switching")
    block = json.loads(export.read_text())["rope_parameters"]  # --switching: the extension past L alone, asked for
    assert block["short_factor"] != block["long_factor"]
    assert r.exit_code == 0, r.output
    att = json.loads(export.read_text())["rope_parameters"]["attention_factor"]
    assert att == pytest.approx(math.sqrt(math.log(192) / math.log(64)))
    assert "approximat" in json.loads(r.stdout)["export_config"]["note"]


@pytest.mark.parametrize("args,fragment,code", [(["--lo", "0.6", "--hi", "0.4"], "below", 1), (["--tol", "0"], "x>=1e-06", 2),
                                                (["--hi", "1.2"], "0<=x<=1", 2), (["--max-short-regression", "-1"], "x>=0", 2)])
def test_bad_input(tiny_dir, tmp_path, args, fragment, code):
    r = search(tiny_dir, tmp_path / "c", *args)
    assert r.exit_code == code and fragment in r.output and "Traceback" not in r.output


def test_length_within_training_is_refused_before_any_forward_pass(tiny_dir, tmp_path, monkeypatch):
    """Within L every b is the same schedule (k = 1): one line naming L and a length that extends, no search run (it
    used to run the whole search and report b = 0), nothing cached; refused from the model's config, before its
    weights load (it loaded SmolLM2 for 20 s before saying so)."""
    def no_loading(*a, **kw):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(search_commands, "open_session", no_loading)
    r = runner.invoke(app, ["search-b", "--model", tiny_dir, "--len", "64", "--samples", "1", "--tol", "0.3",
                            "--cache-dir", str(tmp_path / "c")])
    text = " ".join(r.output.split())  # rich may wrap the line
    assert r.exit_code == 1 and "nothing to extend" in text and "give a --len above" in text, r.output
    assert "Traceback" not in r.output and "best b" not in text
    assert not any(p.is_file() for p in (tmp_path / "c").rglob("*"))


def test_short_regression_guard(tiny_dir, tmp_path):
    r = search(tiny_dir, tmp_path / "c", "--max-short-regression", "0.5")  # measured rises: 0.25 to 1.04%
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["guard"]["factor"] == 3.0
    assert any("short_rise_percent" in e for e in out["evaluations"])
    ok = [e for e in out["evaluations"] if not e.get("violates_guard")]
    assert ok and all(e["short_rise_percent"] <= 0.5 for e in ok)
    assert any(e.get("violates_guard") for e in out["evaluations"])


def test_the_summary_names_equivalent_points_not_an_interval():
    """`b in [0.8541, 0.8541] is shown equivalent` beside undecided neighbours: the line names the evaluated
    points shown equivalent, or says none is, and the undecided ones."""
    alone = equivalent_words({"equivalent_points": [], "undecided_points": [0.849, 0.862]}, "b")
    assert alone.startswith("no other evaluated b is shown equivalent") and "undecided: 0.8490, 0.8620" in alone
    assert "[" not in alone
    some = equivalent_words({"equivalent_points": [0.83], "undecided_points": []}, "b")
    assert some.startswith("evaluated b shown equivalent to it: 0.8300") and "undecided" not in some


def test_export_config_says_when_the_verdict_prefers_another_method_and_how_to_export_it(tmp_path):
    """--export-config writes the best b, as the flag says; where the verdict prefers a reference (here b is held to
    [0, 0.2], where llama3 is shown better on the built-in model at 4L), the lines say so and give the export of that
    one, a command that runs and writes it."""
    rope = tmp_path / "rope.json"
    r = runner.invoke(app, ["search-b", "--len", "1024", "--samples", "2", "--tol", "0.1", "--hi", "0.2",
                            "--export-config", str(rope), "--cache-dir", str(tmp_path / "c"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    preferred = out["references_beating_best_b"][0]
    note = out["written"][-1]
    assert note.startswith(f"note: {rope} holds mixed(b), as --export-config writes; the verdict prefers {preferred}")
    command = shlex.split(note.split("to export it instead, ")[1])
    assert command[:3] == ["ropecli", "export", "--model"] and command[3] == "builtin"
    assert runner.invoke(app, command[1:]).exit_code == 0
    assert json.loads((tmp_path / "rope.json.ropecli.json").read_text())["method"] == \
        json.loads(r.stdout)["references"][[x["label"] for x in out["references"]].index(preferred)]["method"]
