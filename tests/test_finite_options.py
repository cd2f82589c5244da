"""Every float option of every command refuses NaN and ±inf in one line, before any work (click's FLOAT accepts them:
an advise --delta nan ran for minutes, its indifference zone never closing); so do the numbers inside --param, --map,
--vary and --depths."""

import pytest
import typer

from ropecli.cli.app import COMMANDS, app

from helpers import runner


def float_options():
    """(command path, option) for every float-typed option of every command and subcommand."""
    root = typer.main.get_command(app)
    ctx = root.make_context("ropecli", ["--help"], resilient_parsing=True)
    out = []

    def walk(cmd, path):
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, sub_name])
        for p in getattr(cmd, "params", ()):
            kinds = [type(p.type).__name__, *(type(t).__name__ for t in getattr(p.type, "types", ()))]
            if {"FloatParamType", "FloatRange"} & set(kinds) and p.opts[0].startswith("--"):
                out.append((tuple(path), p.opts[0], len(getattr(p.type, "types", ())) or 1))

    for name in COMMANDS:
        walk(root.get_command(ctx, name), [name])
    return out


OPTIONS = float_options()


def test_the_walk_finds_the_float_options():
    names = {(path[0], opt) for path, opt, _ in OPTIONS}
    assert len(OPTIONS) >= 15, OPTIONS
    assert {("advise", "--delta"), ("advise", "--margin"), ("compare", "--margin")} <= names, sorted(names)


@pytest.mark.parametrize("path, opt, arity", OPTIONS, ids=[f"{' '.join(p)} {o}" for p, o, _ in OPTIONS])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_float_option_refuses_what_is_not_finite(path, opt, arity, value):
    """Parsed only (the command's context made, its function never called), so a missing guard fails here at once."""
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.get_command(cmd.make_context("ropecli", ["--help"], resilient_parsing=True), name)
    with pytest.raises(Exception) as got:
        cmd.make_context(" ".join(path), [opt, *[value] * arity])
    said = got.value.format_message() if hasattr(got.value, "format_message") else str(got.value)
    assert "is not a finite number" in said or "is not in the range" in said, said  # a bounded range refuses ±inf itself


def test_advise_delta_nan_is_one_line():
    r = runner.invoke(app, ["advise", "--len", "512", "--delta", "nan"])
    assert r.exit_code == 2 and r.output.strip() == ("Error: Invalid value for '--delta': nan is not a finite number "
                                                     "(see 'ropecli advise --help')"), r.output


@pytest.mark.parametrize("line, words", [  # (the command line, what its one error line names)
    ("ppl --method mixed --param b=nan", "--param b"),
    ("ppl --method yarn --param beta_fast=inf", "--param beta_fast"),
    ("ppl --method none --map selfextend:G=nan,W=64", "selfextend"),
    ("search --method yarn --vary beta_fast=nan:32", "--vary"),
    ("passkey --depths 0,nan", "--depths"),
    ("compare --workload 2048:inf", "--workload"),
    ("compare --workload FILE", "--workload"),
])
def test_numbers_inside_text_options_are_finite_too(line, words, tmp_path):
    args = line.split()
    if args[-1] == "FILE":  # a workload file with an infinite length
        (tmp_path / "lengths.txt").write_text("2048\ninf\n")
        args = [*args[:-1], str(tmp_path / "lengths.txt")]
    r = runner.invoke(app, [*args, "--len", "512"])
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and words in lines[0] and "Traceback" not in r.output, r.output
