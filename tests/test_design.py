"""The command layer's design: option groups defined once and shown under panels, renamed flags
kept as hidden aliases, usage errors as one line, no command importing another, `ropecli plot`
alone, and the search's orchestration in the core, driven here by an injected evaluator."""

import ast
import inspect
import json
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from ropecli.cli.app import COMMANDS, app, command_function
from ropecli.cli.commands import plot
from ropecli.cli.options import OVERVIEW_METHODS
from ropecli.cli.session_opening import RichProgress
from ropecli.report.plots import _wavelengths
from ropecli.rope.geometry import Geometry
from ropecli.rope.target import Target
from ropecli.spec import make_spec
from ropecli.tuning.search import search_b

from fakes import ppl_result
from helpers import runner

ROOT = Path(__file__).resolve().parent.parent


def test_no_command_module_imports_another():
    paths = sorted((ROOT / "ropecli" / "cli" / "commands").glob("*.py"))
    assert len(paths) >= 8, paths  # the glob must find the commands, or the test checks nothing
    for path in paths:
        assert not re.search(r"from ropecli\.cli\.commands|import ropecli\.cli\.commands", path.read_text()), path.name


def command_functions() -> dict[str, object]:
    """Every command's own function (under its decorators), by the name `ropecli --help` lists."""
    fns = {**{n: command_function(n) for n in COMMANDS if n != "plot"}, "plot": plot.overview, "plot freqs": plot.plot_freqs,
           "plot schedule": plot.plot_schedule}
    return {name: inspect.unwrap(f) for name, f in fns.items()}


def test_every_command_function_parses_calls_and_prints_in_under_40_lines():
    """The command layer's promise (docs/ARCHITECTURE.md): a command parses, calls, prints. Counted from
    `def` to the last line, signature and docstring included (decorators not)."""
    fns = command_functions()
    assert len(fns) >= 16, sorted(fns)
    sizes = {name: len([x for x in inspect.getsource(f).splitlines() if not x.lstrip().startswith("@")])
             for name, f in fns.items()}
    assert min(sizes.values()) > 5, sizes  # it measured the functions, not their wrappers
    assert not {n: k for n, k in sizes.items() if k >= 40}, sizes


def cli_imports() -> dict[str, set[str]]:
    """ropecli.cli's modules -> the ropecli.cli modules each imports (at any depth of the file)."""
    graph = {}
    for path in sorted((ROOT / "ropecli" / "cli").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ropecli.cli"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("ropecli.cli")}
        graph[name] = found
    return graph


def test_no_import_circle_in_the_command_layer():
    graph = cli_imports()
    assert len(graph) >= 10 and graph["ropecli.cli.session_opening"], graph  # it read the files

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in graph.get(start, ()))

    circles = [m for m in graph if reaches(m, m)]
    assert not circles, circles


def test_no_aliased_imports_of_ropecli_functions():
    """`from ropecli.x import f as g` hides a call from readers and tools."""
    paths = sorted((ROOT / "ropecli").rglob("*.py"))
    assert len(paths) > 50
    aliased = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in paths
               for m in re.finditer(r"from ropecli[\w.]* import [^\n]*\bas\b[^\n]*", p.read_text())]
    assert not aliased, aliased


@pytest.mark.parametrize("cmd", ["ppl", "compare", "search-b"])
def test_evaluating_commands_share_the_panels(cmd):
    r = runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for panel in ["Model", "Data", "Evaluation", "Output"]:
        assert f"─ {panel} ─" in r.output, panel
    for flag in ["--model", "--dtype", "--samples", "--len", "--cache-dir", "--json", "--plot"]:
        assert flag in r.output
    assert "--head-dim" not in r.output and "--methods" not in r.output  # hidden aliases


@pytest.mark.parametrize("cmd", [["freqs"], ["digits"], ["schedule"], ["plot"], ["plot", "freqs"], ["plot", "schedule"]])
def test_analysis_commands_take_model_and_schedule_panels(cmd):
    r = runner.invoke(app, [*cmd, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "─ Model ─" in r.output and "─ Schedule ─" in r.output and "--model" in r.output


def test_old_flag_names_still_work():
    new = json.loads(runner.invoke(app, ["freqs", "--d", "64", "--json"]).stdout)
    old = json.loads(runner.invoke(app, ["freqs", "--head-dim", "64", "--json"]).stdout)
    assert new == old and new["rotary_dim"] == 64
    a = json.loads(runner.invoke(app, ["schedule", "--method", "pi,mixed", "--d", "8", "--json"]).stdout)
    b = json.loads(runner.invoke(app, ["schedule", "--method", "pi", "-m", "mixed", "--d", "8", "--json"]).stdout)
    assert a == b


def test_usage_errors_are_one_line():
    r = runner.invoke(app, ["ppl", "--samples", "0"])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "--samples" in lines[0] and "ropecli ppl --help" in lines[0]
    r = runner.invoke(app, ["freqs", "--no-such-flag"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "No such option" in r.output


def test_plot_alone_draws_the_overview(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["plot"])
    assert r.exit_code == 0, r.output
    assert "wrote ropecli.png" in r.output
    assert (tmp_path / "ropecli.png").stat().st_size > 20000
    r = runner.invoke(app, ["plot", "--d", "64", "--k", "4", "--out", "o.svg"])
    assert r.exit_code == 0 and (tmp_path / "o.svg").stat().st_size > 20000


def test_no_wavelength_curve_hides_under_another():
    """The overview's "none" leaves every wavelength as it was: drawn, it would lie exactly over "original" (hidden);
    it is named in the original's legend entry instead, and every curve drawn is one that can be seen."""
    geom = Geometry(rotary_dim=64, base=1e4, train_len=4096, factor=4)
    fig, ax = plt.subplots()
    _wavelengths(ax, geom, [make_spec(name).schedule(geom) for name in OVERVIEW_METHODS.split(",")])
    curves = [(line.get_label(), tuple(line.get_ydata())) for line in ax.get_lines() if len(line.get_xdata()) > 2]
    plt.close(fig)
    assert curves[0][0] == "original = none"
    assert len({y for _, y in curves}) == len(curves), [label for label, _ in curves]


# --- the search's orchestration, without a model --------------------------------------------

def fake_evaluator(nll_of, calls):
    """An evaluator with the Session.run contract: one row per (spec, length), spec-major."""
    def run(specs, lengths, metric="ppl", samples=None):
        rows = []
        for spec in specs:
            for n in lengths:
                calls.append((spec.label, n, spec.factor))
                rows.append(ppl_result(spec, n, [nll_of(spec, n)]))
        return rows
    return run


def test_search_core_with_an_injected_evaluator():
    def nll(spec, n):  # long-context NLL minimal at b = 0.7; at L every schedule is the same model
        params = dict(spec.params)
        if n == 256:
            return 3.0
        if spec.method == "mixed":
            return 3.5 + (params["b"] - 0.7) ** 2
        return {"none": 4.2, "pi": 3.99, "ntk-aware": 3.58, "ntk-fixed": 3.59, "yarn": 3.7, "llama3": 3.6, "dynamic": 3.8}[spec.method]

    calls = []
    out = search_b(fake_evaluator(nll, calls), Target((2048,), None, Geometry(64, 1e4, 256, 8.0)), lo=0, hi=1, tol=0.01)
    assert abs(out["best_b"] - 0.7) <= 0.01
    assert out["search_evaluations"] == 12 and out["grid_evaluations_same_accuracy"] == 51
    refs = {r["label"]: r for r in out["references"]}
    assert refs["pi"]["same_as"] == "mixed(b=0)" and refs["ntk-fixed"]["same_as"] == "mixed(b=1)"
    assert refs["none"]["objective"] == 4.2 and refs["mixed(b=0.625)"]["objective"] == pytest.approx(3.5 + 0.075 ** 2)
    assert len(calls) == 12 + 6  # the 12 search points, then none, NTK-aware, dynamic, YaRN, llama3, b = 0.625 (PI, NTK-fixed reused)


def test_search_core_guard_rejects_short_context_damage():
    def nll(spec, n):
        b = dict(spec.params).get("b", 0.0)
        if n == 256:  # short context: b above 0.5 costs more than 5 % PPL at L (k = 8 there)
            return 3.0 if spec.method == "none" else 3.0 + (0.2 if b > 0.5 else 0.0)
        return 3.5 + (b - 0.9) ** 2 if spec.method == "mixed" else 4.0

    calls = []
    out = search_b(fake_evaluator(nll, calls), Target((2048,), None, Geometry(64, 1e4, 256, 8.0)), tol=0.01, max_short_regression=5.0)
    assert out["guard"]["factor"] == 8.0 and out["guard"]["none_ppl"] == pytest.approx(math.exp(3.0))
    assert out["best_b"] <= 0.5  # the unguarded optimum 0.9 is rejected
    assert all(e["violates_guard"] for e in out["evaluations"] if e["b"] > 0.5)
    assert all((n, k) == (256, 8.0) for label, n, k in calls if label.startswith("mixed") and n == 256)


def test_a_long_command_says_its_plan_first_and_progress_in_a_log(monkeypatch):
    """With stderr not a terminal (a log, a pipe), a command says its forward passes before the first one, the time
    the rest should take after the first one that runs, and a progress line every LINE_EVERY seconds."""
    monkeypatch.setattr(RichProgress, "LINE_EVERY", 0.0)
    monkeypatch.setattr(RichProgress, "LONG", 0.0)
    r = runner.invoke(app, ["search-b", "--len", "512", "--samples", "2", "--tol", "0.3", "--no-cache"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    planned = next(i for i, ln in enumerate(lines) if "search-b: " in ln and "forward passes planned" in ln)
    estimate = next(i for i, ln in enumerate(lines) if "a forward pass takes about" in ln)
    progress = [ln for ln in lines if re.match(r"search-b: \d+/\d+ forward passes, .* elapsed, (up to )?about .* left", ln)]
    assert planned < estimate and len(progress) >= 2, r.output
