"""Registries that own their lists: a record planted in its one registry appears everywhere with no
other file changed — a metric in --metric's choices and help, compare's table, a race, the search objective and
--json; a scaling method in freqs, compare, search --vary and export; a RULER task as a metric, a --task choice and
a search objective. (Runtimes: tests/test_runtimes.py plants a whole module.) Each test also checks the planted
record is gone afterwards, so the registries were the only thing that changed."""

import dataclasses
import json
from typing import ClassVar

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from ropecli.backends.backend import TransformersBackend
from ropecli.evaluation import metrics
from ropecli.evaluation.metrics import REGISTRY, objective_names
from ropecli.evaluation.results import PplResult
from ropecli.evaluation.ruler import templates
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import MAPS, Region, bind, register_map
from ropecli.rope import methods
from ropecli.rope.schedule import REQUIRED, Param
from ropecli.tuning.candidates import candidate_names

from helpers import run


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture()
def toy_metric(monkeypatch):
    """A metric on windows with its own result type: the mean NLL of the window scored as PPL is, under its own
    name, column, cell and cache entries (what a user's new metric would be)."""
    @dataclasses.dataclass
    class ToyResult(PplResult):
        metric: ClassVar[str] = "toy"

        def cell(self) -> str:  # compare's cell of a typed row's result
            return f"toy{self.nll:.3f}"

    record = dataclasses.replace(metrics.PPL, name="toy", column="TOY", words="toy NLL", result=lambda: ToyResult,
                                 ranks=False)
    monkeypatch.setitem(metrics.REGISTRY, "toy", record)
    yield record
    monkeypatch.delitem(metrics.REGISTRY, "toy")


def test_a_planted_metric_is_a_choice_a_column_a_race_and_an_objective(toy_metric, tiny_dir, text_file):
    assert ", toy" in flat(run("compare", "--help").output)  # --metric's help lists it (nothing else says toy)
    assert ", toy" in flat(run("search", "--help").output)  # and --objective's
    common = ["--model", tiny_dir, "--data", text_file, "--len", "64", "--samples", "2"]
    r = run("compare", *common, "--method", "none,pi", "--metric", "toy")
    assert r.exit_code == 0, r.output
    assert "TOY 64" in r.output and "toy" in r.output.split("TOY 64")[1], r.output  # its column, its cells
    out = json.loads(run("compare", *common, "--method", "none,pi", "--metric", "toy", "--json").stdout)
    assert {row["metric"] for row in out["results"]} == {"toy"}
    raced = json.loads(run("compare", *common, "--method", "none,pi", "--metric", "toy", "--race", "--json").stdout)
    assert "toy" in raced["races"], raced.keys()
    s = run("search", *common, "--method", "yarn", "--vary", "beta_fast=8:64", "--budget", "4", "--objective", "toy", "--json")
    assert s.exit_code == 0 and json.loads(s.stdout)["objective_name"] == "toy", s.output


def test_a_planted_metric_leaves_no_trace(tiny_dir):
    assert "toy" not in REGISTRY
    r = run("compare", "--model", tiny_dir, "--len", "64", "--metric", "toy")
    assert r.exit_code == 2 and "--metric toy: choose from" in flat(r.output)


@pytest.fixture()
def toy_method():
    """A scaling method registered in rope/methods.py's registry only: PI with its own bounded strength."""
    @methods.register("toy-pi", "Lambda_m = 1 + s(k - 1): PI at strength s (a planted record)", Param("s", 1.0, "strength", 0.0, 1.0))
    def toy(geom, s: float = 1.0):
        return np.full(geom.n_pairs, 1.0 + s * (geom.factor - 1.0)), 1.0

    yield methods.REGISTRY["toy-pi"]
    methods.REGISTRY.pop("toy-pi")


def test_a_planted_method_in_freqs_compare_search_and_export(toy_method, tiny_dir, text_file, tmp_path):
    f = json.loads(run("freqs", "--d", "64", "--k", "4", "--method", "toy-pi", "--param", "s=0.5", "--json").stdout)
    assert f["method"] == "toy-pi" and [p["factor"] for p in f["pairs"]] == pytest.approx([2.5] * 32)
    common = ["--model", tiny_dir, "--data", text_file, "--len", "64", "--samples", "2"]
    c = json.loads(run("compare", *common, "--method", "pi,toy-pi", "--json").stdout)
    assert {r["method"] for r in c["results"]} == {"pi", "toy-pi"}
    s = run("search", *common, "--method", "toy-pi", "--vary", "s", "--budget", "4", "--json")
    assert s.exit_code == 0, s.output
    assert 0.0 <= json.loads(s.stdout)["best_params"]["s"] <= 1.0
    e = run("export", "--model", tiny_dir, "--method", "toy-pi", "--len", "128", "--to", "transformers",
            "--out", tmp_path / "toy.json", "--json")
    assert e.exit_code == 0, e.output
    assert "toy-pi" in run("methods").output


def test_a_planted_task_is_a_metric_a_choice_and_an_objective(monkeypatch):
    monkeypatch.setitem(templates.TASKS, "niah-toy", templates.TASKS["niah-single"])
    assert REGISTRY["niah-toy"].units == "task" and "niah-toy" in objective_names()
    assert "niah-toy" in flat(run("compare", "--help").output)
    r = run("compare", "--len", "64", "--task", "niah-nope")
    assert r.exit_code == 2 and "niah-toy" in flat(r.output)  # the choices named in the error are the registry's
    monkeypatch.delitem(templates.TASKS, "niah-toy")
    assert "niah-toy" not in REGISTRY


def test_compare_checks_every_task_before_the_first_forward_pass(tmp_path, monkeypatch):
    """`--task niah-single,vt` at a length vt's smallest prompt does not fit ran
    niah-single's passes first, then failed. The boundary now checks every metric at every length first."""
    passes = []
    monkeypatch.setattr(TransformersBackend, "_run", lambda self, *a, **k: passes.append(1))  # every forward pass
    cache = tmp_path / "cache"
    r = run("compare", "--len", "300", "--task", "niah-single,vt", "--method", "pi", "--samples", "1", "--depths", "0",
            "--cache-dir", cache)
    assert r.exit_code == 1 and "too short for the task vt" in r.output, r.output
    assert not passes and not (cache.exists() and any(cache.rglob("*.json"))), "niah-single was scored before vt was checked"


@pytest.fixture()
def toy_map():
    """A position map registered in maps/position_maps.py's registry only: relative positions capped at w (ReRoPE's
    shape under its own name), with a rule (w = Ls/2) and a search range, so it is an advise candidate too."""
    @register_map("toy-cap", "relative position min(d, w) (a planted record)",
                  Param("w", REQUIRED, "window", 1, 1e12, integer=True), window="w",
                  rule=lambda Ls, T: {"w": Ls // 2}, ranges=lambda Ls, T: {"w": (Ls // 8, Ls // 2)})
    def toy(w: float):
        w = int(w)
        return (Region("near", lambda i, j: i - j < w, lambda i: i, lambda j: j),
                Region("far", lambda i, j: i - j >= w, lambda i: i * 0 + w, lambda j: j * 0))

    yield MAPS["toy-cap"]
    MAPS.pop("toy-cap")


def test_a_planted_map_in_help_methods_ppl_compare_search_advise_and_export(toy_map, tiny_dir, text_file, tmp_path):
    assert "toy-cap" in flat(run("ppl", "--help").output)  # --map's help lists the registry
    assert "toy-cap" in run("methods").output and "toy-cap" in flat(run("advise", "--help").output)  # --candidates too
    common = ["--model", tiny_dir, "--data", text_file, "--samples", "2"]
    p = json.loads(run("ppl", *common, "--len", "128", "--map", "toy-cap:w=16", "--json").stdout)
    assert all(r["position_map"]["name"] == "toy-cap" for r in p["results"]), p["results"]
    r = run("compare", *common, "--len", "128", "--method", "none", "--map", "none", "--map", "toy-cap:w=16")
    assert r.exit_code == 0 and "toy-cap(w=16)" in r.output, r.output  # its label in the table
    s = run("search", *common, "--len", "128", "--method", "none", "--map", "toy-cap:w=16", "--vary", "w=8:48",
            "--budget", "4", "--json")
    assert s.exit_code == 0 and 8 <= json.loads(s.stdout)["best_params"]["w"] <= 48, s.output
    a = run("advise", *common, "--len", "128", "--budget", "4", "--candidates", "none,toy-cap,toy-cap-tuned", "--out",
            tmp_path / "a", "--json")
    assert a.exit_code == 0, a.output
    advice = json.loads(a.stdout)
    rows = {row["candidate"]: row for row in advice["rows"]}
    assert rows["toy-cap"]["position_map"] == {"name": "toy-cap", "params": {"w": 32.0}}, rows  # its rule at Ls = 64
    assert rows["toy-cap-tuned"]["position_map"]["name"] == "toy-cap"  # searched around it
    exports = {e["runtime"]: e for e in advice["exports"]}
    assert set(exports) == {"transformers", "vllm", "sglang", "llamacpp", "ollama"}
    if advice["winner"].startswith("toy-cap"):  # a runtime that does not serve it says so and writes the best it serves
        assert "does not serve the winner's position map (toy-cap)" in exports["sglang"]["instead"], exports["sglang"]
        assert exports["vllm"]["ok"] and "instead" not in exports["vllm"]  # vLLM's plugin serves every map's folder
    e = run("export", "--model", tiny_dir, "--method", "none", "--map", "toy-cap:w=16", "--len", "128", "--to", "sglang",
            "--out", tmp_path / "v.json")
    assert e.exit_code == 1 and "--map toy-cap: sglang does not serve" in flat(e.output), e.output
    # the transformers folder (and vLLM's, the same) serves every registered map: its modeling file carries the
    # planted region function
    f = run("export", "--model", tiny_dir, "--method", "none", "--map", "toy-cap:w=16", "--len", "128", "--to",
            "transformers", "--out", tmp_path / "folder")
    assert f.exit_code == 0, f.output


    folder = AutoModelForCausalLM.from_pretrained(str(tmp_path / "folder"), trust_remote_code=True).eval()
    model = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    ids = torch.randint(2, 90, (1, 128), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = folder(ids).logits
        with mapped(model, bind("toy-cap", {"w": 16})):
            want = model(ids).logits
    assert (got - want).abs().max() < 1e-4 and (got - model(ids).logits).abs().max() > 1e-3
    v = run("verify", tmp_path / "folder")
    assert v.exit_code == 0 and "ropecli_map.params.w" in v.output, v.output


def test_a_planted_map_leaves_no_trace():
    assert "toy-cap" not in MAPS and not any(c.startswith("toy-cap") for c in candidate_names())
    r = run("ppl", "--len", "64", "--map", "toy-cap:w=8")
    assert r.exit_code == 1 and "unknown position map 'toy-cap'" in flat(r.output), r.output
