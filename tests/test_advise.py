"""`ropecli advise` (issue "`ropecli advise`"): the tournament end to end on tiny models, its exported
winner reloaded by transformers, resume after an interrupt, bad input."""

import json
import math
from contextlib import contextmanager

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import ropecli.cli.session_opening as session
from ropecli.cli.app import app
from ropecli.evaluation.bos_policy import lead_ids
from ropecli.evaluation.data import load_documents, sample_windows, tokenize_documents
from ropecli.evaluation.evaluator import Evaluator
from ropecli.evaluation.session import Progress
from ropecli.models.chunked_scoring import naive_window_nll

from helpers import runner
from tiny_models import save_tiny

FAST = ["--len", "128", "--len", "256", "--samples", "2", "--budget", "7"]


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):  # another geometry than the built-in model: base 1e6, d = 16, L = 64
    return str(save_tiny(tmp_path_factory.mktemp("qwen") / "model", "qwen2"))


def advise(model_dir, out, *extra):
    return runner.invoke(app, ["advise", "--model", model_dir, *FAST, "--out", str(out), *extra])


def hf_ppl_on_held_out(model_dir: str, length: int, first: int, count: int, longest: int | None = None) -> float:
    """PPL of the exported folder as transformers loads it (a map folder through its own modeling file:
    trust_remote_code) on the held-out windows 0 … count-1 (the
    held-out half of the plays; `first` is the searched windows' count, which the split by document ignores).
    With several target lengths, the windows at `length` are the first tokens of those at `longest`."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, trust_remote_code=True).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)  # the folder's tokenizer, as ropecli loads it
    docs, _ = load_documents(None)
    win = sample_windows(docs, tokenize_documents(docs, tok), longest or length, count, 0, lead_ids(tok, "auto"), part=0)
    nll = [naive_window_nll(model, torch.from_numpy(row[:length])[None]) for row in win.ids]
    per_doc: dict = {}  # the estimand: each document's NLL per token, then the mean over documents
    for (n, t), doc in zip(nll, win.names):
        s, c = per_doc.get(doc, (0.0, 0))
        per_doc[doc] = (s + n, c + t)
    return math.exp(sum(s / c for s, c in per_doc.values()) / len(per_doc))


def exported_row(result: dict, export: dict) -> dict:
    """The row a runtime was exported: the winner, or (a map winning where the runtime serves none) the best it serves,
    which the export names and says so. transformers serves every per-pair map (its folder's own modeling file)."""
    row = next(r for r in result["rows"] if r["candidate"] == export["candidate"])
    assert (export["candidate"] == result["winner"]) != bool(export.get("instead")), export
    if row.get("position_map") and export["runtime"] == "transformers":
        assert "trust_remote_code=True" in export["output"], export
    return row


@pytest.mark.parametrize("race", [[], ["--no-race"]])
def test_advise_end_to_end_and_the_exported_winner_reproduces_its_ppl(qwen_dir, tmp_path, race):
    out = tmp_path / "advice"
    r = advise(qwen_dir, out, "--json", *race)
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    saved = json.loads((out / "advice.json").read_text())
    assert saved["winner"] == result["winner"] and saved["rule"]
    names = [row["candidate"] for row in result["rows"]]
    assert names == ["none", "pi", "ntk-aware", "dynamic", "yarn", "yarn-tuned", "llama3", "ntk-fixed", "mixed-b", "mixed-clamped",
                     "selfextend", "dca"]  # past Ls, on a model the mapped attention runs: the maps at their rules
    assert set(result["searches"]) == {"yarn-tuned", "mixed-b", "mixed-clamped"}
    # random weights retrieve nothing: passkey is skipped, and a note says why
    assert result["passkey_measured"] is False and any("passkey" in n for n in result["notes"]), result["notes"]
    assert result["held_out_first_window"] == 0 and result["searched_windows"] == 2  # held out by play: from window 0
    assert result["held_out_split"].startswith("held out by document")
    winner = next(row for row in result["rows"] if row["candidate"] == result["winner"])
    assert winner["tied"] and not winner["excluded"]
    tied = [row for row in result["rows"] if row["tied"]]
    if result["kl_race"]:  # raced: the tie goes to the leader of the KL race among the tied
        assert result["kl_race"]["leader"] == result["winner"] and set(result["kl_race"]["candidates"]) == {
            row["candidate"] for row in tied}
    else:
        assert winner["short_kl"] == min(row["short_kl"] for row in tied)  # the tie goes to the smallest cost within L
    assert result["forward_passes"] > 0 and set(result["windows_per_candidate"]) == set(names)
    report = (out / "report.md").read_text()
    assert "## The rule" in report and result["winner_label"] in report
    for png in ["ppl_vs_length.png", "loss_by_position.png", "short_cost.png", "factors.png", "search_mixed-clamped.png"]:
        assert (out / png).stat().st_size > 10_000, png
        assert f"]({png})" in report
    exports = {e["runtime"]: e for e in result["exports"]}
    assert exports["transformers"]["ok"] and exports["vllm"]["ok"], exports
    assert json.loads((out / "vllm-overrides.json").read_text())["rope_parameters"]
    served = exported_row(result, exports["transformers"])  # the winner, or the best it serves where the winner is a map
    n_windows = result["windows_per_candidate"][served["candidate"]]  # raced: it may have more than --held-out
    for n in (128, 256):  # the exported folder, loaded with no keyword arguments, gives its held-out PPL
        assert hf_ppl_on_held_out(str(out / "hf"), n, 2, n_windows, 256) == pytest.approx(served["ppl"][str(n)], rel=1e-4)


def test_builtin_model_advise_winner_reproduces_its_ppl(tmp_path):
    # the built-in model (d = 64, base 1e4, L = 256), no --model: the default path users run first
    out = tmp_path / "advice"
    r = runner.invoke(app, ["advise", "--len", "512", "--samples", "2", "--budget", "7", "--out", str(out),
                            "--cache-dir", str(tmp_path / "cache"), "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    # it retrieves within L (trained with passkey documents), so passkey is measured for every candidate
    assert result["model"] == "builtin" and result["passkey_measured"] is True and result["unscaled_passkey_at_L"] >= 0.5
    winner = next(row for row in result["rows"] if row["candidate"] == result["winner"])
    assert 0 <= winner["passkey_accuracy"] <= 1  # raced: retrieval is measured for the winner (no --min-passkey)
    assert (out / "passkey.png").stat().st_size > 10_000 and "](passkey.png)" in (out / "report.md").read_text()
    served = exported_row(result, next(e for e in result["exports"] if e["runtime"] == "transformers"))
    n_windows = result["windows_per_candidate"][served["candidate"]]
    assert hf_ppl_on_held_out(str(out / "hf"), 512, 2, n_windows) == pytest.approx(served["ppl"]["512"], rel=1e-4)


def test_interrupted_advise_repeats_no_finished_evaluation(qwen_dir, tmp_path, monkeypatch):
    real = Evaluator._compute
    calls = {"n": 0, "stop": None}

    def counting(self, *args, **kw):
        calls["n"] += 1
        if calls["n"] == calls["stop"]:
            raise KeyboardInterrupt
        return real(self, *args, **kw)

    monkeypatch.setattr(Evaluator, "_compute", counting)
    narrow = ["--candidates", "none,pi,yarn,mixed-clamped"]
    r = advise(qwen_dir, tmp_path / "full", "--cache-dir", str(tmp_path / "c0"), *narrow)
    assert r.exit_code == 0, r.output
    total = calls["n"]
    for stop in (4, total - 3):  # during the search; during the held-out measures
        calls.update(n=0, stop=stop)
        cache = tmp_path / f"c{stop}"
        r = advise(qwen_dir, tmp_path / f"out{stop}", "--cache-dir", str(cache), *narrow)
        assert r.exit_code == 130, r.output
        calls.update(n=0, stop=None)
        r = advise(qwen_dir, tmp_path / f"out{stop}", "--cache-dir", str(cache), *narrow)
        assert r.exit_code == 0, r.output
        assert calls["n"] == total - (stop - 1)  # only what had not finished is computed again


@pytest.mark.parametrize("extra, needle", [
    (["--candidates", "magic"], "--candidates magic: choose from none"),
    (["--candidates", "pi,yarn", "--max-short-kl", "0.0000001"], "no candidate meets the constraints (pi: short KL"),
])
def test_advise_bad_input_is_one_line(qwen_dir, tmp_path, extra, needle):
    r = advise(qwen_dir, tmp_path / "o", *extra)
    assert r.exit_code != 0
    lines = [line for line in r.output.strip().splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and needle in lines[0], r.output
    assert "Traceback" not in r.output


def test_advise_out_must_be_a_fresh_or_advise_folder(qwen_dir, tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    r = advise(qwen_dir, f)
    assert r.exit_code != 0 and "is a file" in r.output
    d = tmp_path / "busy"
    d.mkdir()
    (d / "mine.txt").write_text("keep me")
    r = advise(qwen_dir, d)
    assert r.exit_code != 0 and "not empty and was not made by ropecli advise" in r.output
    assert (d / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("budget, race", [("4", []), ("6", []), ("4", ["--no-race"])])
def test_progress_total_is_the_work_done(qwen_dir, tmp_path, monkeypatch, budget, race):
    """The bar's total comes from the searches' own plan: with --budget below 7 the 2-parameter searches
    still get 7 evaluations, and the total says so (every window ticks once, cached or not)."""
    seen = {"total": None, "ticks": 0}

    class Counting(Progress):
        @contextmanager
        def task(self, total, label):
            if seen["total"] is None:  # the outer task: advise's whole bar
                seen["total"] = total
            yield

        def grow(self, count):  # a race adds its rounds; a skipped passkey takes its part back
            seen["total"] += count

        def advance(self, count):
            seen["ticks"] += count

    monkeypatch.setattr(session, "RichProgress", Counting)
    r = advise(qwen_dir, tmp_path / "o", "--candidates", "pi,yarn-tuned,mixed-b", "--budget", budget,
               "--cache-dir", str(tmp_path / "c"), "--json", *race)
    assert r.exit_code == 0, r.output
    assert seen["ticks"] == seen["total"] > 0
