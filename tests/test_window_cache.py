"""The per-window cache: one entry per (window, schedule, …), so more windows cost only the new ones,
an interrupt keeps every finished window, and entries of the older whole-evaluation format are reused."""

import hashlib
import json
from dataclasses import replace

import pytest

from ropecli.backends.load import fingerprint
from ropecli.cli.app import app
from ropecli.evaluation.cache import LEGACY_FORMAT, EvalCache, _canonical, key_hash
from ropecli.evaluation.evaluator import Evaluator
from ropecli.evaluation.metrics import metric_record
from ropecli.spec import make_spec

from helpers import runner


def compare(tiny_dir, text_file, cache, samples, *extra):
    r = runner.invoke(app, ["compare", "--model", tiny_dir, "--data", text_file, "--len", "128", "--method", "none,yarn",
                            "--samples", str(samples), "--cache-dir", str(cache), "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_compare_samples_8_after_4_computes_only_the_4_new_windows_per_cell(tiny_dir, text_file, tmp_path):
    four = compare(tiny_dir, text_file, tmp_path / "c", 4)
    assert four["forward_passes"] == 2 * 4
    eight = compare(tiny_dir, text_file, tmp_path / "c", 8)
    assert eight["forward_passes"] == 2 * 4  # 2 cells x the 4 new windows
    assert eight["cache"]["hits"] == 2 * 4
    fresh = compare(tiny_dir, text_file, tmp_path / "fresh", 8)
    assert [r["window_nll"] for r in eight["results"]] == [r["window_nll"] for r in fresh["results"]]
    assert [r["ppl"] for r in eight["results"]] == [r["ppl"] for r in fresh["results"]]
    assert [r["window_nll"][:4] for r in eight["results"]] == [r["window_nll"] for r in four["results"]]
    again = compare(tiny_dir, text_file, tmp_path / "c", 6)  # fewer windows: all from the cache
    assert again["forward_passes"] == 0 and all(r["cached"] for r in again["results"])


def test_an_interrupt_keeps_every_finished_window(tiny, tmp_path, monkeypatch, text_file):
    ev = Evaluator.over(tiny, [text_file], samples=4, cache=EvalCache(tmp_path / "c"))
    real = type(tiny).window_nll
    calls = {"n": 0}

    def flaky(self, *args, **kw):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third window
        return real(self, *args, **kw)

    monkeypatch.setattr(type(tiny), "window_nll", flaky)
    with pytest.raises(KeyboardInterrupt):
        ev.evaluate(make_spec("yarn"), 128)
    monkeypatch.setattr(type(tiny), "window_nll", real)
    resumed = Evaluator.over(tiny, [text_file], samples=4, cache=EvalCache(tmp_path / "c"))
    r = resumed.evaluate(make_spec("yarn"), 128)
    assert resumed.forward_passes == 2 and resumed.cache.hits == 2  # windows 0 and 1 were kept
    fresh = Evaluator.over(tiny, [text_file], samples=4, cache=EvalCache(enabled=False)).evaluate(make_spec("yarn"), 128)
    assert r.values == fresh.values and r.ppl == fresh.ppl


@pytest.mark.parametrize("metric", ["ppl", "passkey-text", "kl"])
def test_whole_evaluation_entries_of_the_older_format_are_split_or_recomputed(tiny, tmp_path, text_file, metric):
    spec, n = make_spec("yarn"), 128 if metric != "kl" else 64
    first = Evaluator.over(tiny, [text_file], samples=3, cache=EvalCache(tmp_path / "c0"))
    result = first.evaluate(spec, n, metric=metric_record(metric))
    old_cache = EvalCache(tmp_path / "old")  # what ropecli wrote before per-window entries: one file per evaluation
    key = first.legacy_key(spec, n, *first.schedule_for(spec, n), metric, first.inputs)
    stored = result.stored()
    old_cache.dir.mkdir()
    (old_cache.dir / f"{key_hash(key)}.json").write_text(json.dumps({
        "format": LEGACY_FORMAT, "key": key, "result": stored,
        "checksum": hashlib.sha256(_canonical(stored).encode()).hexdigest()}))
    ev = Evaluator.over(tiny, [text_file], samples=3, cache=old_cache)
    again = ev.evaluate(spec, n, metric=metric_record(metric))
    if metric == "kl":  # its per-token values are not in the old entry: recomputed and counted
        assert ev.forward_passes == 3 and old_cache.stale == 1 and old_cache.migrated == 0
    else:
        assert ev.forward_passes == 0 and old_cache.migrated == 1 and again.cached
        assert again.values == pytest.approx(result.values, rel=1e-12)
        later = Evaluator.over(tiny, [text_file], samples=3, cache=old_cache)
        later.evaluate(spec, n, metric=metric_record(metric))  # now from the per-window entries
        assert later.forward_passes == 0 and old_cache.hits == 2 * len(result.values)


@pytest.mark.parametrize("command", [
    ["ppl", "--len", "128"],
    ["compare", "--len", "128", "--method", "none,pi"],
    ["passkey", "--len", "128", "--method", "none", "--depths", "0.5", "--digits", "3", "--text"],
    ["kl", "--k", "4", "--method", "pi"],
])
def test_every_evaluating_command_reports_its_forward_passes(tiny_dir, text_file, tmp_path, command):
    args = [*command, "--model", tiny_dir, "--data", text_file, "--samples", "2", "--cache-dir", str(tmp_path / "c"), "--json"]
    first = json.loads(runner.invoke(app, args).stdout)
    assert first["forward_passes"] > 0 and first["forward_passes"] == first["cache"]["misses"]
    again = json.loads(runner.invoke(app, args).stdout)
    assert again["forward_passes"] == 0 and again["cache"]["hits"] == first["cache"]["misses"]


def test_compare_race_records_every_candidates_windows(tiny_dir, text_file, tmp_path):
    """The plumbing of `compare --race` (the decisions are tested on simulated races in test_racing.py):
    each method's results carry exactly the windows the race gave it, every window is computed once,
    and the JSON records the race."""
    out = compare(tiny_dir, text_file, tmp_path / "c", 3, "--race", "--max-windows", "12", "--method", "none,pi,yarn,ntk-fixed")
    race = out["races"]["ppl"]
    windows = {r["label"]: len(r["window_nll"]) for r in out["results"]}
    assert {label: row["windows"] for label, row in race["candidates"].items()} == windows
    assert out["forward_passes"] == sum(windows.values())  # one length, every window once
    assert race["looks"] == [3, 6, 12] and race["outcome"]
    leader = race["leader"]
    assert all(windows[label] <= windows[leader] for label in windows)
    for label, row in race["candidates"].items():
        assert (row["dropped_round"] is not None) == row["status"].startswith("dropped")


@pytest.mark.parametrize("earlier", ["versioned", "oldest"])
def test_windows_stored_under_an_earlier_fingerprint_are_reused(tiny, tmp_path, text_file, earlier):
    """Entries keyed an earlier way (`versioned`: the fingerprint with transformers' version in it, which an upgrade
    changed; `oldest`: no `runtime`, the fingerprint that hashed the load path) are found, re-stored under today's
    key, and counted; no forward pass."""
    cache = EvalCache(tmp_path / "c")
    first = Evaluator.over(tiny, [text_file], samples=3, cache=cache)
    want = first.evaluate(make_spec("yarn"), 128)
    versioned, oldest = tiny.earlier_fingerprints
    assert first.forward_passes == 3 and len({tiny.fingerprint, versioned, oldest}) == 3
    for path in (tmp_path / "c").glob("*.json"):  # rewrite every entry as ropecli stored it before
        entry = json.loads(path.read_text())
        if earlier == "versioned":
            entry["key"] = entry["key"] | {"model": versioned}
        else:
            entry["key"] = {k: v for k, v in entry["key"].items() if k != "runtime"} | {"model": oldest}
        path.unlink()
        (tmp_path / "c" / f"{key_hash(entry['key'])}.json").write_text(json.dumps(entry))
    again = Evaluator.over(tiny, [text_file], samples=3, cache=EvalCache(tmp_path / "c"))
    got = again.evaluate(make_spec("yarn"), 128)
    assert again.forward_passes == 0 and again.cache.rekeyed == 3 and again.cache.misses == 0
    assert got.window_nll == want.window_nll
    third = Evaluator.over(tiny, [text_file], samples=3, cache=EvalCache(tmp_path / "c"))
    third.evaluate(make_spec("yarn"), 128)
    assert third.cache.rekeyed == 0 and third.cache.hits == 3  # stored under today's key


def test_windows_stored_under_the_old_spelling_of_a_runtime_are_reused(tiny, tmp_path, text_file):
    """One spelling per runtime: entries keyed `"runtime": "llama.cpp"` (before `llamacpp`) are found and re-stored."""
    backend = replace(tiny, runtime="llamacpp", earlier_fingerprints=())
    first = Evaluator.over(backend, [text_file], samples=2, cache=EvalCache(tmp_path / "c"))
    want = first.evaluate(make_spec("yarn"), 128)
    for path in (tmp_path / "c").glob("*.json"):
        entry = json.loads(path.read_text())
        entry["key"] = entry["key"] | {"runtime": "llama.cpp"}
        path.unlink()
        (tmp_path / "c" / f"{key_hash(entry['key'])}.json").write_text(json.dumps(entry))
    again = Evaluator.over(backend, [text_file], samples=2, cache=EvalCache(tmp_path / "c"))
    got = again.evaluate(make_spec("yarn"), 128)
    assert again.forward_passes == 0 and again.cache.rekeyed == 2 and got.window_nll == want.window_nll


def test_the_fingerprint_outlives_a_transformers_upgrade(tiny):
    """The config's transformers_version is not in the fingerprint (it once was: a new transformers orphaned every
    cached window); the fingerprint with it is kept as an earlier one, for the windows stored under it."""
    now, (versioned, _) = fingerprint(tiny.model)  # config.to_dict() writes the installed version
    then, (versioned_then, _) = fingerprint(tiny.model, "5.0.0")  # as transformers 5.0.0 would have
    assert then == now and versioned_then != versioned
