"""The exported map folder as clients run it. A left- or right-padded batch gives each prompt its own answer
(logits and greedy tokens), the static cache gives the dynamic cache's tokens, beam search and sampling run, decoding
from a prompt inside a sliding window past it is one pass (in the folder and in ropecli), and a damaged ropecli_map
block is one line at `verify` and at load. Each model is a tiny random one of its family; T = 3 L0 is past its L."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, pipeline
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.maps.map_spelling import map_text
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import bind

from architectures import L0, VOCAB
from helpers import arch_folder, load_folder, passkey_folder

SE = ("selfextend", {"G": 2, "W": 8})
DPE = ("dpe", {"W": 8, "G1": 1, "G2": 2, "G3": 4, "G4": 1, "G5": 2, "G6": 8, "G7": 1, "G8": 3, "top": 0.5})
PAD = 0
FOLDERS = {}  # (family, map) -> the exported folder, once per session


def folder_for(tmp_path_factory, family, name, params):
    if (family, name) not in FOLDERS:
        FOLDERS[family, name] = arch_folder(tmp_path_factory.mktemp(family.split()[0]), family,
                                            map_text(bind(name, params)), 3 * L0, "native")
    return FOLDERS[family, name]


def prompts(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (n,), generator=g) for n in lengths]


def left_padded(rows):
    n = max(len(r) for r in rows)
    ids = torch.full((len(rows), n), PAD)
    mask = torch.zeros(len(rows), n, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, n - len(r):], mask[b, n - len(r):] = r, 1
    return ids, mask


CASES = [("llama", *SE), ("llama", "dca", {"chunk": 24, "local": 4}), ("llama", "rerope", {"w": 12}),
         ("llama", *DPE), ("gemma2", *SE), ("gpt_oss + yarn", *SE), ("phi (partial)", *SE)]


@pytest.mark.parametrize(("family", "name", "params"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_left_padded_batch_is_each_prompt_alone(tmp_path_factory, family, name, params):
    """Two prompts past L in one left-padded batch (generate's layout): each row's logits at every real token and its
    greedy continuation are the prompt's alone (before: the folder read positions as the last T_q of arange(T_k) and
    dropped the mask in mapped layers, 0.98 apart on llama)."""
    model = load_folder(folder_for(tmp_path_factory, family, name, params)[1])
    rows = prompts([2 * L0 + 8, 2 * L0 - 20])
    ids, mask = left_padded(rows)
    with torch.no_grad():
        batch = model(input_ids=ids, attention_mask=mask).logits
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                             pad_token_id=PAD, min_new_tokens=12)
        for b, r in enumerate(rows):
            alone = model(r[None]).logits[0]
            assert (batch[b, -len(r):] - alone).abs().max() < 1e-4, (b, (batch[b, -len(r):] - alone).abs().max())
            own = model.generate(r[None], max_new_tokens=12, do_sample=False, pad_token_id=PAD, min_new_tokens=12)
            assert torch.equal(out[b, ids.shape[1]:], own[0, len(r):]), b


def test_a_right_padded_batch_is_each_prompt_alone(tmp_path_factory):
    model = load_folder(folder_for(tmp_path_factory, "llama", *SE)[1])
    rows = prompts([2 * L0 + 8, 2 * L0 - 20], seed=1)
    n = max(len(r) for r in rows)
    ids, mask = torch.full((2, n), PAD), torch.zeros(2, n, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, :len(r)], mask[b, :len(r)] = r, 1
    with torch.no_grad():
        batch = model(input_ids=ids, attention_mask=mask).logits
        for b, r in enumerate(rows):
            assert (batch[b, :len(r)] - model(r[None]).logits[0]).abs().max() < 1e-4, b


@pytest.mark.parametrize(("family", "name", "params"), [("llama", *SE), ("llama", *DPE), ("gemma2", *SE), ("qwen2", *SE)],
                         ids=["llama-selfextend", "llama-dpe-pairs", "gemma2-selfextend", "qwen2-selfextend"])
def test_the_static_cache_gives_the_dynamic_caches_tokens(tmp_path_factory, family, name, params):
    """generate(cache_implementation="static"): the keys sit in a buffer of max_cache_len slots, the empty ones masked
    (before: T_k was the whole buffer, so every position was wrong and the tokens differed with no error)."""
    model = load_folder(folder_for(tmp_path_factory, family, name, params)[1])
    rows = prompts([2 * L0 + 8, 2 * L0 - 20], seed=2)
    ids, mask = left_padded(rows)
    with torch.no_grad():
        for x, m in ((rows[0][None], None), (ids, mask)):
            kw = dict(max_new_tokens=16, do_sample=False, pad_token_id=PAD, min_new_tokens=16)
            kw.update({"attention_mask": m} if m is not None else {})
            dynamic = model.generate(x, **kw)
            static = model.generate(x, cache_implementation="static", **kw)
            assert torch.equal(dynamic, static)


def test_beam_search_and_sampling_run_under_the_map(tmp_path_factory):
    """The widened cache is reordered by beam search as any cache is: the folder's beams are ropecli's mapped model's
    beams; sampling with a seed repeats."""
    model_dir, out = folder_for(tmp_path_factory, "llama", *SE)
    model = load_folder(out)
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    x = prompts([2 * L0 + 3], seed=3)[0][None]
    kw = dict(max_new_tokens=10, num_beams=3, do_sample=False, pad_token_id=PAD, min_new_tokens=10)
    with torch.no_grad():
        beams = model.generate(x, **kw)
        with mapped(reference, bind(*SE)):
            want = reference.generate(x, **kw)
        sampled = [model.generate(x, do_sample=True, max_new_tokens=10, pad_token_id=PAD,
                                  generator=None) if torch.manual_seed(7) is not None else None for _ in range(2)]
    assert torch.equal(beams, want)
    assert torch.equal(sampled[0], sampled[1]) and sampled[0].shape[1] > x.shape[1]


@pytest.mark.parametrize("family", ["gemma2", "gpt_oss + yarn"])
def test_decoding_from_inside_a_sliding_window_past_it_is_one_pass(tmp_path_factory, family):
    """A 10-token prompt, 40 greedy tokens across the sliding window (16 tokens): a sliding layer whose window is
    below the exported length runs as shipped at every step, so each step's logits are one pass's over the whole
    sequence, in the folder and in ropecli's mapped model (before: mapped while the sequence fit the window, 0.058
    apart on Gemma 2)."""
    model_dir, out = folder_for(tmp_path_factory, family, *SE)
    folder = load_folder(out)
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    x = prompts([10], seed=4)[0][None]
    for model, context in ((folder, None), (reference, lambda: mapped(reference, bind(*SE), length=3 * L0))):
        with torch.no_grad(), (context() if context else torch.no_grad()):
            res = model.generate(x, max_new_tokens=40, do_sample=False, min_new_tokens=40, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=PAD)
            steps = torch.stack(res.logits, dim=1)[0]
            one = model(res.sequences).logits[0, 9:-1]
        assert (steps - one).abs().max() < 1e-4, (type(model).__name__, (steps - one).abs().max())


def test_a_damaged_map_block_is_one_line_at_verify_and_at_load(tmp_path_factory, tmp_path):
    _, out = folder_for(tmp_path_factory, "llama", *SE)
    bad = tmp_path / "bad"
    shutil.copytree(out, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["ropecli_map"]["pairs"] = [[0, 1]]
    (bad / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(app, ["verify", str(bad)])
    assert r.exit_code != 0 and "ropecli_map.pairs is list" in r.output and "Traceback" not in r.output, r.output
    with pytest.raises(Exception, match=r"ropecli_map.pairs is list, expected an object: export the folder again") as got:
        load_folder(bad)
    assert type(got.value).__name__ == "RopeCliError"  # ropecli's own kind, copied into the folder's file
    cfg["ropecli_map"].pop("pairs")
    cfg["ropecli_map"]["window"] = 3
    (bad / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(app, ["verify", str(bad)])
    assert r.exit_code != 0 and "unknown key 'window'" in r.output, r.output


def test_a_cache_the_folder_cannot_serve_is_refused_in_one_line(tmp_path_factory):
    model = load_folder(folder_for(tmp_path_factory, "llama", *SE)[1])
    # generate() reads forward's signature: the prefill's logits for the last token only, as for the model itself
    assert model._supports_logits_to_keep() and not model._can_compile_fullgraph
    with pytest.raises(Exception, match="use the dynamic \\(default\\) or static cache"):
        model.generate(prompts([40])[0][None], cache_implementation="quantized", max_new_tokens=2)


@pytest.fixture(scope="session")
def lm_eval_command(tmp_path_factory):
    """lm-evaluation-harness's `lm_eval` command. Where it is not installed (CI: it is no dependency of ropecli), it is
    installed into a virtual environment of its own that sees this one's packages through a .pth file (torch and
    transformers are not installed twice), so its dependencies never change this environment's mid-run; skipped only
    where it cannot be installed (no registry)."""
    if importlib.util.find_spec("lm_eval") is not None:
        exe = shutil.which("lm_eval") or str(Path(sys.executable).with_name("lm_eval"))
        if Path(exe).exists():
            return exe
    venv = tmp_path_factory.mktemp("lm-eval-venv")
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    if made.returncode:
        pytest.skip(f"no virtual environment for lm-eval: {made.stderr.strip()[-200:]}")
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "ropecli-tests-parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    constraints = Path(__file__).resolve().parent.parent / "constraints" / "cpu.txt"
    got = subprocess.run([str(python), "-m", "pip", "install", "-q", "lm-eval==0.4.13", "-c", str(constraints)],
                         capture_output=True, text=True, timeout=900)
    if got.returncode:
        pytest.skip(f"lm-eval could not be installed: {got.stderr.strip().splitlines()[-1:]}")
    return str(venv / "bin" / "lm_eval")


def passkey_folder_and_prompts(tmp_path, n=8):
    """The built-in model's Self-Extend folder at 4L = 1,024 and n passkey prompts of different lengths (the needle in
    the middle, 0 … 7 x 90 tokens cut from the front), with their answers."""
    folder, tokenizer, samples = passkey_folder(tmp_path, 0.5, n)
    rows = [{"context": tokenizer.decode(s.ids[90 * i:s.answer_start]), "answer": tokenizer.decode(s.ids[s.answer_start:])}
            for i, s in enumerate(samples)]
    return folder, tokenizer, rows


def test_lm_eval_at_batch_4_gives_batch_1s_answers_on_the_folder(tmp_path, lm_eval_command):
    """lm-evaluation-harness's hf model on the folder, generate_until (left-padded batches through generate()) on a
    local passkey task whose prompts differ in length: --batch_size 4 gives every prompt the answer --batch_size 1
    gives it, and the same exact_match (before: a padded row read positions from the row's slots)."""
    exe = lm_eval_command
    folder, _, rows = passkey_folder_and_prompts(tmp_path)
    task = tmp_path / "task"
    task.mkdir()
    (task / "passkey.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (task / "ropecli_passkey_gen.yaml").write_text(
        "task: ropecli_passkey_gen\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
        f"{task / 'passkey.jsonl'}\ntest_split: test\noutput_type: generate_until\ndoc_to_text: '{{{{context}}}}'\n"
        "doc_to_target: '{{answer}}'\ntarget_delimiter: ''\ngeneration_kwargs:\n  until: ['\\n']\n  max_gen_toks: 8\n"
        "  do_sample: false\nmetric_list:\n  - metric: exact_match\n")
    answers = {}
    for batch in ("1", "4"):
        out = tmp_path / f"results{batch}"
        got = subprocess.run([exe, "run", "--model", "hf", "--model_args",
                              f"pretrained={folder},trust_remote_code=True,dtype=float32,max_length=1100",
                              "--tasks", "ropecli_passkey_gen", "--include_path", str(task), "--device", "cpu",
                              "--batch_size", batch, "--log_samples", "--output_path", str(out)],
                             capture_output=True, text=True, timeout=900,
                             env={**os.environ, "HF_DATASETS_OFFLINE": "1"})
        assert got.returncode == 0, got.stderr[-3000:]
        samples = [json.loads(line) for line in next(out.rglob("samples_*.jsonl")).read_text().splitlines()]
        result = json.loads(next(out.rglob("results_*.json")).read_text())["results"]["ropecli_passkey_gen"]
        answers[batch] = ({s["doc_id"]: s["resps"] for s in samples}, result["exact_match,none"])
    assert answers["4"] == answers["1"], answers
    assert len(answers["1"][0]) == len(rows)


def test_a_batched_pipeline_gives_each_prompt_its_own_answer(tmp_path):
    folder, _, rows = passkey_folder_and_prompts(tmp_path, n=6)
    generate = pipeline("text-generation", model=str(folder), trust_remote_code=True, dtype=torch.float32)
    if generate.tokenizer.pad_token is None:
        generate.tokenizer.pad_token = generate.tokenizer.eos_token
    prompts = [r["context"] for r in rows]
    kw = dict(max_new_tokens=8, do_sample=False, return_full_text=False)
    one = [generate(p, **kw)[0]["generated_text"] for p in prompts]
    four = [o[0]["generated_text"] for o in generate(prompts, batch_size=4, **kw)]
    assert four == one
    assert sum(a.strip().startswith(r["answer"].strip()) for a, r in zip(one, rows)) >= 1  # the map retrieves


def test_ropecli_mapped_attention_runs_a_padded_batch_as_each_row_alone(tmp_path_factory):
    """ropecli's own mapped attention is the folder's (`maps.map_run`): a left-padded batch runs each row at its own
    positions, as that prompt alone."""
    model_dir, _ = folder_for(tmp_path_factory, "llama", *SE)
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    rows = prompts([40, 28])
    ids, mask = left_padded(rows)
    with torch.no_grad(), mapped(reference, bind(*SE)):
        both = reference(input_ids=ids, attention_mask=mask).logits
        alone = reference(input_ids=rows[1][None]).logits
    assert (both[1, -28:] - alone[0]).abs().max() < 1e-4


@pytest.mark.parametrize(("name", "params"), [SE, ("dca", {"chunk": 24, "local": 4}), ("rerope", {"w": 12})],
                         ids=["selfextend", "dca", "rerope"])
def test_a_decoding_step_is_one_kernel_call_that_puts_the_cache_back(tmp_path_factory, monkeypatch, name, params):
    """A decoding step's one query scores every region in one call: the other regions' bands are turned in place in the
    cache's keys and put back bit for bit (the keys before the step are the same tensors' values after it), and the
    step's logits are one pass's over the whole sequence at a few thousand positions, as close as the unmapped model's
    own decode is to its one pass (the turns' angles in float64: in float32 a query turned by -2,000 positions against
    keys turned by +2,000 left 7e-5 on the built-in model)."""
    model = load_folder(folder_for(tmp_path_factory, "llama", name, params)[1])
    module = __import__(type(model).__module__, fromlist=["one_call"])
    calls = []
    real = module.one_call
    monkeypatch.setattr(module, "one_call", lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])
    x = prompts([2000], seed=5)[0][None]
    with torch.no_grad():
        out = model(x, use_cache=True)
        cache = out.cache if hasattr(out, "cache") and out.cache is not None else out.past_key_values
        before = [layer.keys.clone() for layer in cache.layers]
        nxt, steps = out.logits[:, -1:].argmax(-1), []
        for _ in range(4):
            x = torch.cat([x, nxt], dim=1)
            step = model(nxt, cache=cache, use_cache=True).logits[:, -1]
            steps.append(step)
            nxt = step.argmax(-1, keepdim=True)
        one = model(x).logits[0, -4:]
    mapped_layers = sum(p.mapped for p in model._map_run().plans)
    assert len(calls) == 4 * mapped_layers  # every mapped layer's step took the one call
    for old, layer in zip(before, cache.layers):
        assert torch.equal(layer.keys[:, :, :old.shape[2]], old)
    gap = (torch.stack(steps, dim=1)[0] - one).abs().max() / one.abs().max()
    assert gap < 3e-6, gap


@pytest.mark.parametrize(("name", "params", "rows", "made"), [(*SE, 1 << 20, 8), ("dca", {"chunk": 24, "local": 4}, 1 << 20, 8),
                                                            (*SE, 30, 16)], ids=["selfextend", "dca", "few-rows"])
def test_decoding_steps_planned_ahead_equal_one_pass(tmp_path_factory, monkeypatch, name, params, rows, made):
    """An unpadded row's decoding steps are planned several at a time (`step_plan`: the bands of the steps ahead and
    all their turns at once): 30 greedy steps, planned 8 ahead (or as few as `rows` turns allow: Self-Extend's window
    of 8 keys and the query, 9 a step, beside the 8 new keys' turns, leave room for 2 steps in 30), equal one pass over
    the whole sequence, and the turns are computed `made` times, not 60 (the query's and bands' and the new key's, per
    step): once per plan and once per step whose new key no plan has turned yet (the first of 8)."""
    model = load_folder(folder_for(tmp_path_factory, "llama", name, params)[1])
    module = __import__(type(model).__module__, fromlist=["step_plan"])
    monkeypatch.setattr(module, "STEPS_AHEAD", 8)
    monkeypatch.setattr(module, "AHEAD_BYTES", rows * 8 * model.config.head_dim)
    turns = []
    real = module.MapRun.turn_trig
    monkeypatch.setattr(module.MapRun, "turn_trig", lambda *a, **k: turns.append(1) or real(*a, **k))
    x = prompts([300], seed=7)[0][None]
    with torch.no_grad():
        out = model(x, use_cache=True)
        cache = out.cache if hasattr(out, "cache") and out.cache is not None else out.past_key_values
        nxt, steps = out.logits[:, -1:].argmax(-1), []
        turns.clear()
        for _ in range(30):
            x = torch.cat([x, nxt], dim=1)
            step = model(nxt, cache=cache, use_cache=True).logits[:, -1]
            steps.append(step)
            nxt = step.argmax(-1, keepdim=True)
        planned = len(turns)
        one = model(x).logits[0, -30:]
    gap = (torch.stack(steps, dim=1)[0] - one).abs().max() / one.abs().max()
    assert gap < 3e-6, gap
    assert planned == made, planned


def test_a_turn_by_thousands_of_positions_is_the_exact_rotation(tmp_path_factory):
    """The folder turns queries and keys by differences of a few thousand positions (a decoding step's query to the
    grouped region, the window's keys back): the cos and sin of a turn are the float64 angle's, within 1e-6, where the
    rotary module's own float32 angle leaves 4e-5 at 4,000 positions; the attention scaling stays out."""
    model = load_folder(folder_for(tmp_path_factory, "llama", *SE)[1])
    run = model._map_run()
    plan = next(p for p in run.plans if p.mapped)
    module, attr = run.inv_freq[plan.rope]
    x = torch.zeros(1, 1, 3, 2 * getattr(module, attr).numel())
    delta = torch.tensor([[4000.0, -3999.0, 2.5]])
    cos, sin = run.turn_trig(plan, x, delta)
    f = getattr(module, attr).double()
    angle = delta.double()[..., None] * torch.cat([f, f])
    assert (cos.double() - angle.cos()).abs().max() < 1e-6 and (sin.double() - angle.sin()).abs().max() < 1e-6


def test_the_prefill_plan_runs_as_few_masked_pairs_as_the_map_allows(tmp_path_factory):
    """An unpadded prompt's plan: Self-Extend's grouped region (every query i from W on takes keys 0 … i - W) is one
    causal call over the whole prompt, as ropecli's own forward runs it, its neighbours' band one batched call
    (`band_attention`), and DCA's query blocks start at its chunks,
    so every part is whole columns or the causal square, with no mask (at 8L on the built-in model DCA's prefill took
    1.31x the schedule's folder in blocks of 512 and 1.20x in blocks of its chunk)."""
    T = 4 * L0
    plans = {}
    for name, params in (SE, ("dca", {"chunk": 24, "local": 4})):
        model = load_folder(folder_for(tmp_path_factory, "llama", name, params)[1])
        module = __import__(type(model).__module__, fromlist=["row_plan"])
        run = model._map_run()
        (blocks, whole, bands), _ = module.row_plan(run, torch.arange(T), torch.arange(T), None, None, None, torch.float32)
        plans[name] = (run, blocks, whole, bands)
    run, blocks, whole, bands = plans["selfextend"]
    grouped = [r.name for r in run.regions].index("grouped")
    assert whole == {grouped: (SE[1]["W"], SE[1]["W"])}
    neighbours = [r.name for r in run.regions].index("neighbour")
    assert bands == {neighbours: ("band", SE[1]["W"])}  # the neighbours' band in one batched call: no block parts
    assert not any(p[0] in (grouped, neighbours) for _, _, parts in blocks for p in parts)
    run, blocks, whole, bands = plans["dca"]
    assert run.period == 20 and all(start % 20 == 0 for start, _, _ in blocks)
    assert all(p[5] is None or isinstance(p[5], str) for _, _, parts in blocks for p in parts)
