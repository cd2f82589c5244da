"""`export --to transformers --map MAP` writes a folder that plain transformers runs under the map
(`trust_remote_code=True`), with no ropecli import: its logits are ropecli's mapped model's, greedy generation through
the KV cache from below L to past it is one teacher-forced pass, `pipeline` runs it, `verify` reads the map back and
rejects a tampered one."""

import ast
import json
import os
import shutil
import subprocess

import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
from typer.testing import CliRunner

from ropecli.backends.load import load_model
from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.evaluation.corpus import training_plays
from ropecli.evaluation.data import load_documents, tokenize_documents
from ropecli.evaluation.passkey import filler_stream, make_samples
from ropecli.export.folder_source import folder_source, glue_lines, ropecli_definitions, same_code
from ropecli.export.plan import check_map_served
from ropecli.export.registry import record
from ropecli.maps.map_spelling import map_text
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import MAPS as REGISTERED
from ropecli.maps.position_maps import Region, bind, register_map
from ropecli.spec import make_spec

from architectures import ARCHS, L0, VOCAB, save_arch
from helpers import export_folder, load_folder, passkey_folder

MAPS = [("none", {}), ("selfextend", {"G": 2, "W": 8}), ("rerope", {"w": 12}), ("leaky-rerope", {"w": 12, "k": 4}),
        ("dca", {"chunk": 24, "local": 4}), ("string", {"S": 20, "W": 4}),
        ("selfextend-llamacpp", {"G": 2, "W": 8}),
        ("dpe", {"W": 8, "G1": 1, "G2": 2, "G3": 4, "G4": 1, "G5": 2, "G6": 8, "G7": 1, "G8": 3})]
T = 3 * L0  # past every tiny model's L


def export(model_dir, out, name, params, method="none"):
    return export_folder(model_dir, out, map_text(bind(name, params)), T, method)


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return save_arch(next(a for a in ARCHS if a.name == "llama"), tmp_path_factory.mktemp("llama"))


@pytest.mark.parametrize(("name", "params"), MAPS, ids=[m[0] for m in MAPS])
def test_the_folder_is_ropecli_mapped_and_decodes_across_L_as_one_pass(llama_dir, tmp_path, name, params):
    folder = load_folder(export(llama_dir, tmp_path / "out", name, params))
    assert type(folder).__name__ == ("LlamaForCausalLM" if name == "none" else "RopecliMapForCausalLM")  # none: no map
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(0))
    reference = AutoModelForCausalLM.from_pretrained(str(llama_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        got = folder(ids).logits
        with mapped(reference, bind(name, params)):
            want = reference(ids).logits
        plain = reference(ids).logits
        out = folder.generate(ids[:, :L0 - 8], max_new_tokens=2 * L0, do_sample=False, min_new_tokens=2 * L0)
        logits = folder(out).logits[0, L0 - 9:-1]
        logits[:, folder.config.eos_token_id] = float("-inf")  # generate holds EOS back for min_new_tokens
        one = logits.argmax(-1)
    assert (got - want).abs().max() < 1e-4, (got - want).abs().max()
    if name != "none":
        assert (got - plain).abs().max() > 1e-2  # the map is on
    assert torch.equal(out[0, L0 - 8:], one)  # every decoded token from below L to 2L past it follows the map


MLA = ["deepseek_v3 (MLA) + yarn", "mistral4 (MLA, partial 0.5) + yarn"]


def reference_model(arch, model_dir):
    """The model as transformers loads it without the folder (Mistral 4: its class; AutoModelForCausalLM has no entry for
    its config, and after a folder loaded with trust_remote_code it would name the folder's class)."""
    cls = getattr(transformers, arch.model_class) if arch.model_class else transformers.AutoModelForCausalLM
    return cls.from_pretrained(str(model_dir), dtype=torch.float32).eval()


@pytest.mark.parametrize("row", ["gemma3 + linear (v4)", "phi (partial)", "gpt_oss + yarn", "gemma2", "cohere", *MLA])
def test_the_folder_maps_the_families(tmp_path, row):
    """Per-layer RoPE, partial and interleaved rotary, sinks, soft-capping, multi-head latent attention (its cache holds
    the latent and one shared k_rot, which enters turned): the folder (the model as shipped, Gemma 3's linear x4 and
    DeepSeek's YaRN mscale included, under the map) is ropecli's mapped model."""
    arch = next(a for a in ARCHS if a.name == row)
    model_dir = save_arch(arch, tmp_path / "model")
    folder = load_folder(export(model_dir, tmp_path / "out", "selfextend", {"G": 2, "W": 8}, method="native"))
    reference = reference_model(arch, model_dir)
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), mapped(reference, bind("selfextend", {"G": 2, "W": 8})):
        want = reference(ids).logits
    with torch.no_grad():
        got = folder(ids).logits
    assert (got - want).abs().max() < 1e-4, (got - want).abs().max()


@pytest.mark.parametrize("row", MLA)
def test_an_mla_folder_decodes_across_L_as_one_pass_and_a_padded_row_as_alone(tmp_path, row):
    """Through the KV cache of latents and turned k_rot: greedy decoding from below L to 2L past it is the folder's own
    teacher-forced pass, and a left-padded row of a batch generates what it generates alone."""
    model_dir = save_arch(next(a for a in ARCHS if a.name == row), tmp_path / "model")
    folder = load_folder(export(model_dir, tmp_path / "out", "selfextend", {"G": 2, "W": 8}, method="native"))
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = folder.generate(ids[:, :L0 - 8], max_new_tokens=2 * L0, do_sample=False, min_new_tokens=2 * L0)
        logits = folder(out).logits[0, L0 - 9:-1]
        logits[:, folder.config.eos_token_id] = float("-inf")  # generate holds EOS back for min_new_tokens
        prompt = ids[:, :40]
        batch = torch.cat([torch.cat([torch.zeros(1, 6, dtype=torch.long), prompt[:, 6:]], 1), prompt], 0)
        mask = torch.ones_like(batch)
        mask[0, :6] = 0
        both = folder.generate(batch, attention_mask=mask, max_new_tokens=10, do_sample=False)
        alone = folder.generate(prompt[:, 6:], max_new_tokens=10, do_sample=False)
    assert torch.equal(out[0, L0 - 8:], logits.argmax(-1))
    assert torch.equal(both[0, 40:], alone[0, 34:])


def test_pipeline_runs_the_folder_unchanged(llama_dir, tmp_path, capfd):
    """pipeline() accepts the folder's class: no "is not supported for text-generation" (several KB)."""
    folder = export(llama_dir, tmp_path / "out", "selfextend", {"G": 2, "W": 8})
    capfd.readouterr()
    generate = pipeline("text-generation", model=str(folder), trust_remote_code=True, dtype=torch.float32)
    said = capfd.readouterr()
    assert "not supported" not in said.err + said.out, (said.err + said.out)[:300]
    text = generate("the quick brown fox " * 12, max_new_tokens=L0, do_sample=False)[0]["generated_text"]
    assert len(text) > len("the quick brown fox " * 12)
    assert type(generate.model).__name__ == "RopecliMapForCausalLM"


def test_verify_reads_the_map_back_and_rejects_another_G(llama_dir, tmp_path):
    folder = export(llama_dir, tmp_path / "out", "selfextend", {"G": 2, "W": 8})
    r = CliRunner().invoke(app, ["verify", str(folder)])
    assert r.exit_code == 0, r.output
    assert "ropecli_map.params.G" in r.output
    cfg = json.loads((folder / "config.json").read_text())
    cfg["ropecli_map"]["params"]["G"] = 4
    (folder / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(app, ["verify", str(folder)])
    assert r.exit_code == 1 and "ropecli_map.params.G" in r.output, r.output


def test_what_cannot_be_served_is_one_line(llama_dir, tmp_path):
    r = CliRunner().invoke(app, ["export", "--model", str(llama_dir), "--method", "none", "--map", "selfextend:G=2,W=8",
                                 "--len", str(T), "--to", "transformers"])
    assert r.exit_code != 0 and "pass --out DIR" in r.output and "Traceback" not in r.output


def test_transformers_serves_every_per_pair_map_of_the_registry():
    """transformers' record names no maps: it serves the registry's, read when asked, so a map registered later (here
    one planted into MAPS) is served, listed and exported with no edit in ropecli/export."""
    rec = record("transformers")
    assert rec.map_names() == tuple(REGISTERED) and all(rec.serves_map(name) for name in REGISTERED)

    @register_map("planted-cap", "relative position min(d, 8) (planted by a test)")
    def planted():
        return (Region("near", lambda i, j: i - j < 8, lambda i: i, lambda j: j),
                Region("far", lambda i, j: i - j >= 8, lambda i: i * 0 + 8, lambda j: j * 0))

    try:
        assert rec.serves_map("planted-cap") and "planted-cap" in rec.describe()["maps"]
        assert record("vllm").serves_map("planted-cap") and not record("sglang").serves_map("planted-cap")
        check_map_served(make_spec("none").but(position_map=bind("planted-cap", {})), rec)  # no refusal
    finally:
        REGISTERED.pop("planted-cap")
    assert not rec.serves_map("planted-cap")


@pytest.mark.parametrize("name", list(REGISTERED))
def test_the_modeling_file_is_ropecli_own_code_and_a_small_glue(name):
    """Each registered map's generated file imports no ropecli (a user without ropecli loads it), and is ropecli's own
    code: every top-level definition but the glue's has the code of the definition of the same name in ropecli/
    (docstrings and registering decorators aside), the glue at most 200 code lines."""
    source = folder_source(REGISTERED[name].regions, "LlamaForCausalLM")
    tree = ast.parse(source)
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.split(".")[0] == "ropecli" for m in modules), modules
    own = ropecli_definitions()
    copied = [n for n in tree.body if any(b in own for b in _names(n))]
    glue = {"BASE_CLASS", "REGION_FUNCTION", "REFUSED_CACHES", "Base", "RopecliMapForCausalLM"}
    assert [ast.unparse(n)[:60] for n in copied if not _names(n) & glue and not same_code(n, own[next(iter(_names(n)))])] == []
    assert {"MapRun", "map_attention", "plan_layers", "region_attention", "split_band", "check_map_block"} <= \
        {b for n in copied for b in _names(n)}
    assert 20 < glue_lines(source) <= 200
    # the red side: a definition edited in the file is no longer ropecli's, and counts as glue
    edited = source.replace("QUERY_BLOCK = 512", "QUERY_BLOCK = 256", 1)
    assert glue_lines(edited) == glue_lines(source) + 1


def _names(node) -> set:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return {t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    return set()


def test_the_folders_passkey_is_ropecli_passkey_under_the_map(tmp_path):
    """The built-in model at 4L = 1,024, Self-Extend G = 8, W = 64: the exported folder, run by plain transformers on
    ropecli's own passkey prompts, retrieves exactly where `ropecli passkey --map` does (every answer token the argmax
    given its prefix: what greedy generation returns), and greedy generation through `generate` says the key."""
    r = CliRunner().invoke(app, ["passkey", "--len", "1024", "--method", "none", "--map", "selfextend:G=8,W=64",
                                 "--depths", "0,0.5", "--samples", "2", "--json", "--cache-dir", str(tmp_path / "c"), "--text"])
    assert r.exit_code == 0, r.output
    row = next(x for x in json.loads(r.stdout)["results"] if x["position_map"])
    folder = tmp_path / "se"
    r = CliRunner().invoke(app, ["export", "--model", "builtin", "--method", "none", "--map", "selfextend:G=8,W=64",
                                 "--len", "1024", "--to", "transformers", "--out", str(folder)])
    assert r.exit_code == 0, r.output
    model = load_folder(folder)

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    docs, _ = load_documents(None)
    samples = make_samples(tokenizer, filler_stream(tokenize_documents(docs, tokenizer)), 1024, [0.0, 0.5], 2, 5, 0)
    hits = []
    for sample in (s for depth in samples for s in depth):
        ids = torch.as_tensor(sample.ids)[None]
        with torch.no_grad():
            best = model(ids).logits[0, sample.answer_start - 1:-1].argmax(-1)
        hits.append(bool(torch.equal(best, ids[0, sample.answer_start:])))
    assert sum(hits) / len(hits) == row["accuracy"], (hits, row["accuracy"])
    first = samples[0][0]
    with torch.no_grad():
        said = model.generate(torch.as_tensor(first.ids[:first.answer_start])[None], do_sample=False,
                              max_new_tokens=len(first.ids) - first.answer_start)[0, first.answer_start:]
    assert torch.equal(said, torch.as_tensor(first.ids[first.answer_start:])) == hits[0]


def test_lm_evals_hf_model_runs_the_folder(tmp_path):
    """lm-evaluation-harness, unchanged (`lm_eval run --model hf --model_args pretrained=FOLDER,trust_remote_code=True`),
    on a local passkey task made of ropecli's prompts (loglikelihood: its `acc` is whether the key is the greedy
    continuation): its accuracy is the folder's own. Skipped where lm-eval is not installed (CI: it is no dependency)."""
    pytest.importorskip("lm_eval")
    if shutil.which("lm_eval") is None:
        pytest.skip("lm_eval's command is not on PATH")


    folder, tokenizer, samples = passkey_folder(tmp_path, 0.0, 3)
    task = tmp_path / "task"
    task.mkdir()
    rows = [{"context": tokenizer.decode(s.ids[:s.answer_start]), "answer": tokenizer.decode(s.ids[s.answer_start:])}
            for s in samples]
    (task / "passkey.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (task / "ropecli_passkey.yaml").write_text(
        "task: ropecli_passkey\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
        f"{task / 'passkey.jsonl'}\ntest_split: test\noutput_type: loglikelihood\ndoc_to_text: '{{{{context}}}}'\n"
        "doc_to_target: '{{answer}}'\ntarget_delimiter: ''\nmetric_list:\n  - metric: acc\n")
    out = subprocess.run([shutil.which("lm_eval"), "run", "--model", "hf", "--model_args",
                          f"pretrained={folder},trust_remote_code=True,dtype=float32,max_length=1100",
                          "--tasks", "ropecli_passkey", "--include_path", str(task), "--device", "cpu",
                          "--batch_size", "1", "--output_path", str(tmp_path / "results")],
                         capture_output=True, text=True, timeout=900, env={**os.environ, "HF_DATASETS_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(next((tmp_path / "results").rglob("results_*.json")).read_text())
    acc = result["results"]["ropecli_passkey"]["acc,none"]
    model = load_folder(folder)
    own = []
    for s in samples:
        ids = torch.as_tensor(s.ids)[None]
        with torch.no_grad():
            own.append(bool(torch.equal(model(ids).logits[0, s.answer_start - 1:-1].argmax(-1), ids[0, s.answer_start:])))
    assert acc == pytest.approx(sum(own) / len(own)), (acc, own)


@pytest.mark.parametrize("row", ["llama", "phi (partial)", "cohere", "ernie4_5", "gemma4 (p-RoPE 0.25)"])
def test_the_folder_serves_dpes_key_pairs(tmp_path, row):
    """DPE with top < 1: the export chooses each head's key pairs on the model (as ropecli's evaluations do) and writes
    them in config.json; the folder moves only those (rotate-half, partial and interleaved layouts alike), its logits
    ropecli's mapped model's under the same selection, and decoding through the KV cache follows one pass."""
    params = {**MAPS[-1][1], "top": 0.5}
    model_dir = save_arch(next(a for a in ARCHS if a.name == row), tmp_path / "model")
    folder = load_folder(export(model_dir, tmp_path / "out", "dpe", params, method="native"))
    pairs = json.loads((tmp_path / "out" / "config.json").read_text())["ropecli_map"]["pairs"]
    backend = load_model(str(model_dir), dtype="fp32", device="cpu")
    with pytest.raises(RopeCliError, match="chosen on calibration text"):
        backend.pair_selection(bind("dpe", params))
    selection = backend.pair_selection(bind("dpe", params), training_plays)  # as the evaluator and the export hand it in
    first = min(selection)  # Gemma 4: its first global layer
    assert {int(k) for k in pairs} == set(selection) and all(len(h) == selection[first].sum(1)[0] for h in pairs[str(first)])
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = folder(ids).logits
        with mapped(reference, bind("dpe", params), selection=selection):
            want = reference(ids).logits
        with mapped(reference, bind("dpe", {**params, "top": 1.0})):
            every = reference(ids).logits
        out = folder.generate(ids[:, :L0 - 8], max_new_tokens=L0, do_sample=False, min_new_tokens=L0)
        logits = folder(out).logits[0, L0 - 9:-1]
        logits[:, folder.config.eos_token_id] = float("-inf")
    assert (got - want).abs().max() < 1e-4 and (got - every).abs().max() > 1e-3
    assert torch.equal(out[0, L0 - 8:], logits.argmax(-1))


@pytest.mark.parametrize("row", ["gemma2", "gemma3 + linear (v4)", "gpt_oss + yarn", "gemma4 (p-RoPE 0.25)"])
def test_sliding_layers_decode_past_their_window_as_shipped(tmp_path, row):
    """A sliding-window cache hands a decoding step only the window's keys: the sliding layer stays as shipped (read
    from the position, not from T_k <= window), so greedy decoding under a map, in ropecli and in the folder, is one
    teacher-forced pass (before: each step past the window ran the sliding layer under the map)."""
    params = {"G": 2, "W": 8}
    model_dir = save_arch(next(a for a in ARCHS if a.name == row), tmp_path / "model")
    folder = load_folder(export(model_dir, tmp_path / "out", "selfextend", params, method="native"))
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.randint(2, VOCAB, (1, L0), generator=torch.Generator().manual_seed(3))
    for model, context in ((folder, None), (reference, lambda: mapped(reference, bind("selfextend", params)))):
        with torch.no_grad(), (context() if context else torch.no_grad()):
            out = model.generate(ids[:, :L0 - 8], max_new_tokens=L0, do_sample=False, min_new_tokens=L0)
            logits = model(out).logits[0, L0 - 9:-1]
        logits[:, model.config.eos_token_id] = float("-inf")
        assert torch.equal(out[0, L0 - 8:], logits.argmax(-1)), type(model).__name__
