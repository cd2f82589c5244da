"""Malformed inputs users do give — truncated and random-byte GGUFs, configs and overrides with
missing keys and wrong types, impossible paths — to `verify`, `export`, `--backend llamacpp`,
`--cache-dir` and `--data`:
every one is answered in one line that is not a bare exception name (the catch-all prints
`SomeError: …`, which names neither the problem nor the fix), never a traceback."""

import json
import random
import re

import pytest

from ropecli.cli.app import app
from ropecli.models.config import BUILTIN_DIR

from helpers import runner

BARE = re.compile(r"Error: [A-Z][A-Za-z]*(Error|Exception)\b|Traceback|set ROPECLI_DEBUG")


def answered(r, args=None) -> str:
    """The answer to one malformed input, asserted on the spot: one clear line, never a bare exception."""
    # CliRunner closes its stream after each call; a library logger still bound to an earlier one prints
    # "--- Logging error ---" with the logging module's own traceback: the harness's, not ropecli's output
    out = re.sub(r"--- Logging error ---.*?(?=\n[^ \n]|\Z)", "", r.output, flags=re.S)
    out = "\n".join(line for line in out.splitlines() if not line.startswith((" ", "Message:", "Arguments:", "Call stack:",
                                                                             "Traceback (most recent call last):",
                                                                             "ValueError: I/O operation on closed file")))
    assert not (BARE.search(out) or "Traceback" in out), (
        f"bare answer: {(out.strip().splitlines()[-1] if out.strip() else '(empty)')[:160]}  <- {args}")
    return out


def mutations(obj: dict, rng: random.Random, n: int):
    """n malformed copies of a JSON object: keys removed, values of the wrong type, huge, negative."""
    keys = list(obj)
    bad_values = ["two", None, [], {}, -1, 0, 10 ** 30, 1e308, float("nan"), True, "", [1, 2], {"a": 1}]
    for i in range(n):
        o = json.loads(json.dumps(obj))
        k = keys[i % len(keys)]
        if i % 3 == 0:
            o.pop(k)
        else:
            o[k] = bad_values[(i // len(keys) + i) % len(bad_values)]
        if isinstance(o.get("rope_parameters"), dict) and i % 2:
            rp = o["rope_parameters"]
            inner = next(iter(rp)) if rp else None
            if inner:
                rp[inner] = bad_values[i % len(bad_values)]
        yield o


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    base = tmp_path_factory.mktemp("exports")
    out = {}
    for to, name, method in [("hf", "block.json", "yarn"), ("vllm", "v.json", "yarn"), ("hf", "hfdir", "llama3")]:
        r = runner.invoke(app, ["export", "--model", str(BUILTIN_DIR), "--method", method, "--len", "2048", "--to", to,
                                "--out", str(base / name)])
        assert r.exit_code == 0, r.output
        out[name] = base / name
    return out


@pytest.mark.parametrize("name", ["block.json", "v.json", "hfdir"])
def test_verify_of_a_hand_edited_export(exports, tmp_path, name):
    rng = random.Random(0)
    src = exports[name]
    cfg_path = src / "config.json" if src.is_dir() else src
    original = json.loads(cfg_path.read_text())
    text = original.get("text_config") or original
    count = 0
    for k, bad in enumerate(list(mutations(text, rng, 40)) + list(mutations(text.get("rope_parameters") or {}, rng, 20))):
        if "rope_parameters" in bad or k >= 40:
            cfg = {**original, **(bad if k < 40 else {**text, "rope_parameters": bad})}
        else:
            cfg = {**original, **bad}
        target = tmp_path / f"{k}-{name}"
        if src.is_dir():
            target.mkdir()
            (target / "config.json").write_text(json.dumps(cfg))
        else:
            target.write_text(json.dumps(cfg))
        answered(runner.invoke(app, ["verify", str(target), "--no-run", "--method", "yarn" if name != "hfdir" else "llama3",
                                     "--len", "2048", "--model", str(BUILTIN_DIR)]), ["verify", str(target), "--no-run", "--method", "yarn" if name != "hfdir" else "llama3",
                                     "--len", "2048", "--model", str(BUILTIN_DIR)])
        count += 1
    for k, bad in enumerate(["", "{", "[]", "null", '{"rope_parameters": 3}', "\x00\xff" * 10]):
        target = tmp_path / f"raw{k}-{name}"
        if src.is_dir():
            target.mkdir()
            (target / "config.json").write_text(bad)
        else:
            target.write_text(bad)
        answered(runner.invoke(app, ["verify", str(target), "--no-run", "--method", "yarn", "--len", "2048"]), ["verify", str(target), "--no-run", "--method", "yarn", "--len", "2048"])
        count += 1
    assert count == 66


def test_truncated_and_random_gguf(builtin_gguf, tmp_path):
    data = builtin_gguf.read_bytes()
    rng = random.Random(1)
    cuts = [0, 4, 8, 16, 24, 100, 1000, len(data) // 3, len(data) // 2, len(data) - 10]
    files = []
    for c in cuts:
        p = tmp_path / f"cut{c}.gguf"
        p.write_bytes(data[:c])
        files.append(p)
    for k in range(10):
        p = tmp_path / f"noise{k}.gguf"
        b = bytearray(data[:4096])
        for _ in range(50):
            b[rng.randrange(len(b))] = rng.randrange(256)
        p.write_bytes(bytes(b) + data[4096:] if k % 2 else bytes(b))
        files.append(p)
    for k in range(8):  # the magic, version 3 and random bytes: the header's counts are random (up to 2^64)
        p = tmp_path / f"header{k}.gguf"
        p.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(rng.randrange(256) for _ in range(64)))
        files.append(p)
    assert len(files) == 28
    for p in files:  # 28 files x 4 commands
        args = ["ppl", "--backend", "llamacpp", "--model", str(p), "--len", "64", "--samples", "1", "--no-cache"]
        answered(runner.invoke(app, args), args)
        answered(runner.invoke(app, ["verify", str(p), "--no-run", "--method", "yarn", "--len", "1024"]), ["verify", str(p), "--no-run", "--method", "yarn", "--len", "1024"])
        answered(runner.invoke(app, ["export", "--model", str(p), "--method", "yarn", "--len", "1024", "--to", "gguf",
                                     "--out", str(tmp_path / f"x-{p.name}")]), ["export", "--model", str(p), "--method", "yarn", "--len", "1024", "--to", "gguf",
                                     "--out", str(tmp_path / f"x-{p.name}")])
        answered(runner.invoke(app, ["freqs", "--model", str(p)]), ["freqs", "--model", str(p)])


@pytest.mark.parametrize("args", [
    ["ppl", "--len", "64", "--cache-dir", "/proc/1/no/such"],
    ["ppl", "--len", "64", "--cache-dir", "/dev/null/cache"],
    ["ppl", "--len", "64", "--data", "/no/such/file.txt"],
    ["ppl", "--len", "64", "--data", "/dev/null"],
    ["ppl", "--len", "64", "--data", "/proc/self/mem"],
    ["export", "--model", str(BUILTIN_DIR), "--method", "yarn", "--len", "512", "--to", "hf", "--out", "/proc/1/x"],
    ["export", "--model", str(BUILTIN_DIR), "--method", "yarn", "--len", "512", "--to", "vllm", "--out", "/dev/null/x.json"],
    ["export", "--model", str(BUILTIN_DIR), "--method", "yarn", "--len", "512", "--to", "gguf", "--out", "x.gguf"],
    ["verify", "/no/such/export"],
    ["verify", "/dev/null"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_impossible_paths(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    answered(runner.invoke(app, args))


def test_malformed_data_files(tmp_path):
    cases = {"a.jsonl": '{"text": 3}\nnot json\n', "b.json": "{", "c.json": '{"other": "x"}', "d.json": "[1, 2]",
             "e.txt": "\xff\xfe\x00bad", "f.jsonl": "[]\n"}
    for name, text in cases.items():
        p = tmp_path / name
        p.write_text(text, errors="surrogateescape") if name != "e.txt" else p.write_bytes(b"\xff\xfe\x00\x80bad")
        answered(runner.invoke(app, ["ppl", "--len", "64", "--data", str(p), "--no-cache"]), ["ppl", "--len", "64", "--data", str(p), "--no-cache"])


