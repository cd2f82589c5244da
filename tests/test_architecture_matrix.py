"""The architecture matrix (docs/architectures.md): every architecture of `tests/architectures.py` through
`freqs`, `ppl`, `compare --workload`, `export` to every runtime and `verify`, in-process. Per row: the
geometry, the shipped schedule and L0 / Ls read right (from config.json and from the loaded model alike);
every command exits 0 or refuses in one line that names the fix; never a traceback."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation.corpus import held_out_plays
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import bind
from ropecli.models.chunked_scoring import decoder
from ropecli.models.config import read_rope_config
from ropecli.rope.methods import compute_schedule

from architectures import ARCHS, L0, VOCAB, Arch, build_arch, docs_table, save_arch
from helpers import runner

IDS = [a.name for a in ARCHS]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {a.name: save_arch(a, tmp_path_factory.mktemp("arch") / "model") for a in ARCHS}


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "plays.txt"
    path.write_text(" ".join(list(held_out_plays().values())[0].split())[:20000])
    return str(path)


def invoke(args: list[str]):
    r = runner.invoke(app, args)
    assert "Traceback" not in r.output and not isinstance(r.exception, (TypeError, AttributeError, KeyError, IndexError)), \
        (args, r.output, repr(r.exception))
    return r


def one_line_refusal(r) -> str:
    """A refusal: exit 1 and one line `Error: … ` that names what to do instead."""
    assert r.exit_code == 1, r.output
    err = r.stderr.strip()
    assert err.startswith("Error:") and len(err.splitlines()) == 1, err
    return err


def refusal_after_header(r) -> str:
    """A refusal that comes once the model is read: the model's header, then one line `Error: …`."""
    assert r.exit_code == 1, r.output
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("Error:") and "Traceback" not in r.output, r.stderr
    return last


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_geometry_and_shipped_schedule_read_right(folders, arch: Arch):
    rope = read_rope_config(str(folders[arch.name]))
    assert (rope.rotary_dim, rope.base, rope.train_len, rope.shipped_len) == (arch.d, arch.base, L0, arch.Ls)
    assert (rope.shipped.rope_type if rope.shipped else None) == arch.shipped
    assert bool(rope.layer_types) == arch.per_type
    assert (rope.layers.summary() if rope.layers else "") == arch.layers
    assert (rope.temperature.kind if rope.temperature else None) == arch.temperature
    assert bool(rope.extension_notes()) == bool(arch.layers or arch.temperature or rope.rotating_pairs)  # advise's notes
    loaded = load_model(str(folders[arch.name]), device="cpu")
    assert loaded.rope == rope  # config.json and the loaded model agree

    def rotates(attn) -> bool:  # Llama 4, SmolLM3: `use_rope`; EXAONE 4: `sliding_window is None or is_sliding`
        if hasattr(attn, "use_rope"):
            return bool(attn.use_rope)
        return getattr(attn, "sliding_window", None) is None or getattr(attn, "is_sliding", True)

    uses = [rotates(layer.self_attn) for layer in getattr(decoder(loaded.model), "layers", [])
            if hasattr(layer, "self_attn")]  # the layers that really skip RoPE
    assert sum(1 for u in uses if not u) == (dict(rope.layers.counts).get("NoPE full", 0) if rope.layers else 0)


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_freqs_names_the_shipped_schedule(folders, arch: Arch):
    r = invoke(["freqs", "--model", str(folders[arch.name]), "--method", "native", "--k", "2", "--json"])
    assert r.exit_code == 0, r.output
    said = " ".join(r.stderr.split())  # rich wraps long lines
    assert f"training length L0={L0}, shipped length Ls={arch.Ls}" in said
    assert json.loads(r.stdout)["shipped"] == (read_rope_config(str(folders[arch.name])).shipped.to_json() if arch.shipped else None)
    if arch.shipped:
        assert f"ships {arch.shipped}(" in said


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_frequencies_are_what_the_loaded_model_rotates_by(folders, arch: Arch):
    """ropecli's frequencies of `native`, from config.json alone, against the loaded model's own inv_freq buffer (what
    it rotates by, not a re-derivation of the config): the rotary pairs, the base and the shipped schedule at once."""
    rope = read_rope_config(str(folders[arch.name]))
    geom = rope.geometry(1.0)
    ours = geom.inv_freq() / compute_schedule("native", geom).factors
    theirs = load_model(str(folders[arch.name]), device="cpu").slots[0].inv_freq.double().numpy()
    assert ours.shape == theirs.shape, (ours.shape, theirs.shape)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("arch", ARCHS, ids=IDS)
def test_evaluate_serve_export_verify(folders, text, tmp_path, arch: Arch):
    model = str(folders[arch.name])
    n = 2 * arch.Ls
    methods = "native,none,yarn" + (",native+yarn" if arch.shipped else "")
    r = invoke(["compare", "--model", model, "--data", text, "--len", str(n), "--method", methods, "--samples", "2",
                "--workload", f"{arch.Ls}:0.5,{n}:0.5", "--json", "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["L0"] == L0 and out["Ls"] == arch.Ls
    labels = {row["label"] for row in out["results"]}
    assert "native" in labels and "none" in labels
    assert set(out["serving"]["runtimes"]) >= {"transformers", "vllm"}
    r = invoke(["ppl", "--model", model, "--data", text, "--len", str(arch.Ls), "--method", "native", "--samples", "1",
                "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 0, r.output
    p_rope = read_rope_config(model).rotating_pairs is not None  # Gemma 4: transformers' 'proportional' takes one factor
    spec = "pi" if p_rope else "native+yarn" if arch.shipped else "yarn"
    if p_rope:
        r = invoke(["export", "--model", model, "--method", "yarn", "--len", str(n), "--to", "hf", "--out", str(tmp_path / "y")])
        assert "only pi is served" in refusal_after_header(r)
    r = invoke(["export", "--model", model, "--method", spec, "--len", str(n), "--to", "hf", "--out", str(tmp_path / "hf")])
    assert r.exit_code == 0, r.output
    r = invoke(["verify", str(tmp_path / "hf"), "--run-len", str(n), "--cache-dir", str(tmp_path / "cache")])
    if arch.model_type == "deepseek_v4":
        # DeepSeek V4's compressed layers in transformers do not decode through their cache as one pass when the window
        # starts with text rather than a BOS (measured: the unscaled model itself drifts 5.5e-5 nats/token,
        # worst token 0.006, without BOS; 1.6e-7 with it; native 8.9e-4): the export's PPL and factors check out, and
        # the decode check reports the architecture's own drift (ropecli's --bos auto windows have no BOS here)
        assert r.exit_code == 1 and r.output.count("MISMATCH") == 1 and "MISMATCH: decode across L" in r.output, r.output
    else:
        assert r.exit_code == 0, r.output  # the export reloads in transformers and reproduces what ropecli measured
    r = invoke(["export", "--model", model, "--method", spec, "--len", str(n), "--to", "vllm", "--out", str(tmp_path / "v.json")])
    if p_rope:
        assert "--to hf writes transformers' own block" in refusal_after_header(r)
    else:
        assert r.exit_code == 0, r.output
        r = invoke(["verify", str(tmp_path / "v.json"), "--runtime", "vllm"])
        assert r.exit_code in (0, 1), r.output  # vLLM's rules read back; a schedule vLLM cannot hold is a verdict, not a crash
    r = invoke(["export", "--model", model, "--method", spec, "--len", str(n), "--to", "gguf", "--out", str(tmp_path / "m.gguf")])
    assert "--to llamacpp needs --model FILE.gguf" in one_line_refusal(r)
    r = invoke(["export", "--model", model, "--method", "native", "--len", str(n), "--to", "hf"])
    assert r.exit_code == 0 and "nothing to export" in r.output


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.name)
def test_the_map_cell_of_every_row(arch: Arch):
    """On every architecture a map runs on the layers that attend globally with RoPE and leaves the others as
    shipped: the identity map is the unpatched model (fp32), Self-Extend changes nothing before W and the logits after
    it; or one line says why this family cannot be mapped (MLA, chunked + NoPE, compressed layers)."""
    model = build_arch(arch)
    ids = torch.randint(2, VOCAB, (1, 3 * L0), generator=torch.Generator().manual_seed(1))
    if arch.map_refused:
        with pytest.raises(RopeCliError, match=re.escape(arch.map_refused)):
            with mapped(model, bind("none", {})):
                pass
        return
    W = 8
    with torch.no_grad():
        plain = model(ids).logits[0]
        with mapped(model, bind("none", {})):
            identity = model(ids).logits[0]
        with mapped(model, bind("selfextend", {"G": 2, "W": W})):
            extended = model(ids).logits[0]
        again = model(ids).logits[0]
    assert (identity - plain).abs().max() < 1e-4, (identity - plain).abs().max()
    assert (extended[:W] - plain[:W]).abs().max() < 1e-4, (extended[:W] - plain[:W]).abs().max()
    assert (extended[W:] - plain[W:]).abs().max() > 1e-3  # the map changes what lies past W
    assert torch.equal(again, plain)  # and leaves nothing behind


def test_docs_table_is_the_matrix():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "architectures.md").read_text()
    assert docs_table() in doc, "docs/architectures.md's table differs from tests/architectures.py: paste docs_table()"


def test_mla_with_fewer_key_value_heads_than_heads_is_refused_in_one_line(text, tmp_path):
    """transformers' MLA attention fails on every forward of a DeepSeek V3 config with 2 key-value heads of 4 (found in
    compare --workload and verify); ropecli refuses it before any weight is read, naming the fix."""
    arch = next(a for a in ARCHS if a.name.startswith("deepseek_v3"))
    model = str(save_arch(replace(arch, kwargs={**arch.kwargs, "num_key_value_heads": 2}), tmp_path / "mla-2kv"))
    for args in (["compare", "--model", model, "--data", text, "--len", str(2 * arch.Ls), "--method", "native,yarn",
                  "--samples", "1", "--workload", f"{arch.Ls}:0.5,{2 * arch.Ls}:0.5"],
                 ["verify", model, "--model", model, "--method", "yarn", "--len", str(2 * arch.Ls)]):
        err = one_line_refusal(invoke(args + ["--cache-dir", str(tmp_path / "cache")]))
        assert "num_key_value_heads 2 < num_attention_heads 4" in err and "set num_key_value_heads to 4" in err
