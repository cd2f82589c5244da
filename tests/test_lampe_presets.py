"""LaMPE's presets, each named after the committed run it reproduces (scar-on/LaMPE at 4e3c91f): its regions, U
and biases on prompts of the run's shape against the run's own lines, transliterated to the CPU (the prefill's state,
before any flash_attn call); the old `lampe-ruler` spelling's one line; and LaMPE's teacher-forced answer scoring
fixing U from the prompt alone, as its generation does."""

import dataclasses

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.maps import position_maps
from ropecli.maps.map_rules import LAMPE_PRESETS, longbench_uselen, scaled_uselen
from ropecli.maps.map_spelling import parse_map
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import MAPS, bind, map_params
from ropecli.models.chunked_scoring import final_hidden, fixed_by_prompt, greedy_tokens, passkey_scores

from architectures import ARCHS, save_arch
from helpers import export_folder, load_folder
from tiny_models import build


# --- the source, transliterated: the prefill's state of its two files, the U each run's script passes ---------------

def map_ids(X, to_min, to_max):  # llama_sw_map.py:23-28 and llama_cache1.py:17-25 (but its 1-token branch), verbatim
    x_min, x_max = X.min(), X.max()
    mapped_tensor = torch.floor((to_min + ((to_max - to_min) / (x_max - x_min)) * (X - x_min)))
    return X, mapped_tensor


def find_chunk_last_index(a, re_size):  # llama_cache1.py:27-30, verbatim
    while re_size + 1 < a.shape[1] and a[0, re_size] == a[0, re_size + 1]:
        re_size += 1
    return re_size


def remap_uselen(ctx_len, model_name):  # llama_cache1.py:724-755, the Mistral branch (the only one a run calls)
    assert model_name == "mistral"
    if ctx_len < 8192:
        return 1536
    param = [0.00010493097327094324, -2.466638011138158, 24576]
    return int(param[2] / (1 + np.exp(-(param[0] * ctx_len + param[1]))))


def llama_cache1_prefill(kv_seq_len, head, tail, use_length):
    """llama_cache1.py `forward`'s prefill state (lines 298-304, the full-attention branch of line 330)."""
    if kv_seq_len < 2 * head:  # `if self.prefill_len<2*head`: full attention
        return {"regions": 1}
    position_ids = torch.arange(kv_seq_len)[None]
    _, mapping_ids = map_ids(position_ids, 0, use_length)
    re_size_2 = find_chunk_last_index(mapping_ids, tail)
    bias_1 = head - (mapping_ids[0, head] + 1) if kv_seq_len > head else 0
    bias_2 = (kv_seq_len-1-re_size_2) - mapping_ids[0, kv_seq_len-1-re_size_2] - bias_1 if kv_seq_len > head else 0
    return {"regions": 3, "window": head, "mapping_ids": mapping_ids[0].long().numpy(), "bias_1": int(bias_1),
            "bias_2": int(bias_2), "re_size_2": re_size_2}


def llama_sw_map_prefill(kv_seq_len, head, use_length):
    """llama_sw_map.py `forward`'s prefill state (lines 279-282), its window's reach as its decoding has it (lines
    342-343, the cache's last `head` keys: d < head), which ropecli keeps in the prefill too (its flash
    window_size=[head, 0] at line 316 also reaches d = head, a pair the far triangle counts again: `lampe-sw`'s (1))."""
    position_ids = torch.arange(kv_seq_len)[None]
    _, mapping_ids = map_ids(position_ids, 0, use_length)
    bias_1 = head - (mapping_ids[0, head] + 1) if kv_seq_len > head else 0
    return {"regions": 2, "window": head - 1, "mapping_ids": mapping_ids[0].long().numpy(), "bias_1": int(bias_1)}


def longbench_run(T):  # longbench_eval/LongBench-main/pred.py:93-97 (run_cmd.sh:12-16: --use_length 1536 --head 512)
    if T < 1536:
        return llama_cache1_prefill(T, head=512, tail=200, use_length=T)
    return llama_cache1_prefill(T, head=512, tail=200, use_length=1536)


def ruler_llama3_run(T):  # ruler/run_cmd.sh:38 "--head 1024 --use_length 3072 --tail 200" → test_ruler_llama.py:238-242
    return llama_sw_map_prefill(T, head=1024, use_length=3072)  # (llama_sw_map's forward never reads tail)


def ruler_mistral_run(T):  # ruler/run_cmd_1.sh:38 "--head 2048 --use_length 3072 --tail 200" →
    return llama_cache1_prefill(T, head=2048, tail=200, use_length=remap_uselen(T, "mistral"))  # test_ruler_mistral.py:94-97


def infinitebench_run(T):  # InfiniteBench/run_cmd_llama3.sh:35 "--head 512 --tail 200 --map_len 4501" → src/
    return llama_cache1_prefill(T, head=512, tail=200, use_length=4501)  # test_infbench_llama_cw.py:130


# --- the same state read off ropecli's regions --------------------------------------------------------------------

def ropecli_prefill(name: str, T: int) -> dict:
    """The preset's regions for a T-token prompt (its prefill), as the state above: the window's reach (the farthest d
    it holds from the last query), every key's far position (the source's mapping_ids), the far query's offset bias_1
    and, with three regions, the initial keys' query offset bias_2 and their count from the last query (re_size_2)."""
    regions = position_maps.map_regions(name, map_params(name, {}), T)
    if len(regions) == 1:
        return {"regions": 1}
    byname = {r.name: r for r in regions}
    i, j = np.array([[T - 1]]), np.arange(T)[None, :]
    window, far = byname["window"], byname["far"]
    last = np.array([T - 1])
    out = {"regions": len(regions), "window": int(np.asarray(window.where(i, j)).sum()) - 1,
           "mapping_ids": np.asarray(far.key(np.arange(T))),
           "bias_1": int(far.query(last)[0] - far.key(last)[0])}
    if "initial" in byname:
        out.update(bias_2=int(last[0] - byname["initial"].query(last)[0]),
                   re_size_2=int(np.asarray(byname["initial"].where(i, j)).sum()))
    return out


def same_state(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)


RUNS = {"longbench": (longbench_run, [1200, 1535, 1536, 30000]),  # run_cmd.sh:11 --max_length 32768
        "ruler-llama3": (ruler_llama3_run, [120000, 131072]),  # run_cmd.sh:47 max_lens 128k
        "ruler-mistral": (ruler_mistral_run, [3000, 6000, 16000, 16384]),  # run_cmd_1.sh:47 max_lens 16k
        "infinitebench": (infinitebench_run, [32768, 65536])}  # run_cmd_llama3.sh:46 32k and 64k


def test_the_mapping_is_map_ids_where_reciprocal_and_quotient_differ():
    """m(p) is map_ids' own float32 arithmetic (U times the reciprocal of T - 1, torch's int / tensor) at every
    position, numpy and torch alike, including (T, U) where the float32 quotient U / (T - 1) is one ulp away from it
    and moves positions (16,000 at the Mistral fit's 7,683: the last key at 7,682, not 7,683)."""
    moved = 0
    for T, U in [(16000, 7683), (3991, 1536), (9973, 3072), (12964, 4501), (9, 3), (1023, 1536), (131072, 3072)]:
        want = map_ids(torch.arange(T)[None], 0, U)[1][0].long()
        m = position_maps.lampe_squeeze(U, T)
        assert torch.equal(m(torch.arange(T)), want) and np.array_equal(m(np.arange(T)), want.numpy()), (T, U)
        quotient = np.floor(np.arange(T, dtype=np.float32) * (np.float32(U) / np.float32(T - 1)))
        moved += not np.array_equal(quotient, want.numpy())
    assert moved == 4, moved  # the guard: the two roundings part on the first four


def test_every_preset_is_a_committed_run():
    assert set(RUNS) == set(LAMPE_PRESETS)


@pytest.mark.parametrize("preset", sorted(RUNS))
def test_each_preset_is_its_runs_regions_u_and_biases(preset):
    """The preset's regions on prompts of its run's lengths: the region count, window, every key's far position
    (so U), bias_1 and (three regions) bias_2 and the initial keys are what the run's script computes."""
    run, lengths = RUNS[preset]
    for T in lengths:
        got, want = ropecli_prefill(f"lampe-{preset}", T), run(T)
        assert same_state(got, want), (preset, T, {k: (got.get(k), want.get(k)) for k in want
                                                   if not np.array_equal(got.get(k), want[k])})


def test_longbench_leaves_a_short_prompt_near_its_true_positions():
    """pred.py:93-97 runs a 1,200-token prompt at U = 1,200: its far keys stay at their own positions (all but the
    last, which m puts at 1,200), where a fixed U = 1,536 would stretch them by 1,536/1,199."""
    assert longbench_uselen(1200, 1536) == 1200 and longbench_uselen(30000, 1536) == 1536
    far = ropecli_prefill("lampe-longbench", 1200)["mapping_ids"]
    assert far[-1] == 1200 and np.array_equal(far[:-1], np.arange(1199))
    fixed = position_maps.map_regions("lampe", map_params("lampe", {"head": 512, "U": 1536}), 1200)[1]
    assert fixed.key(np.array([1199]))[0] == 1536  # the old preset's stretch


def test_the_ruler_presets_are_two_runs_of_two_files():
    """Llama 3's RULER run is the two-region file at U = 3,072 whatever the length (not the Llama 3 fit's 6,204 at
    128k); Mistral's is the three-region file with U from the Mistral fit."""
    assert ropecli_prefill("lampe-ruler-llama3", 131072)["mapping_ids"][-1] == 3072
    assert MAPS["lampe-ruler-llama3"].regions is MAPS["lampe-sw"].regions
    assert MAPS["lampe-ruler-mistral"].regions is MAPS["lampe"].regions
    assert ropecli_prefill("lampe-ruler-mistral", 16384)["mapping_ids"][-1] in (remap_uselen(16384, "mistral"),
                                                                                remap_uselen(16384, "mistral") - 1)


@pytest.mark.parametrize("preset, says", [
    ("longbench", ["pred.py:93-97", "llama_cache1.py", "three regions", "head 512", "tail 200", "min(T, 1,536)"]),
    ("ruler-llama3", ["ruler/run_cmd.sh:38", "test_ruler_llama.py:232-245", "llama_sw_map.py", "two regions",
                      "head 1,024", "U = 3,072"]),
    ("ruler-mistral", ["ruler/run_cmd_1.sh:38", "test_ruler_mistral.py:94-99", "llama_cache1.py", "three regions",
                       "head 2,048", "Mistral fit"]),
    ("infinitebench", ["run_cmd_llama3.sh:35", "test_infbench_llama_cw.py:125-131", "three regions", "head 512",
                       "U = 4,501"])])
def test_each_presets_line_names_its_run(preset, says):
    summary = MAPS[f"lampe-{preset}"].summary
    assert all(s in summary for s in says), summary


def test_the_old_ruler_spelling_fails_in_one_line_naming_the_new_ones():
    with pytest.raises(RopeCliError) as err:
        parse_map("lampe-ruler")
    text = str(err.value)
    assert "\n" not in text and "lampe-ruler-llama3" in text and "lampe-ruler-mistral" in text, text
    assert "lampe-ruler" not in MAPS
    r = CliRunner().invoke(app, ["freqs", "--d", "64", "--train-len", "256", "--k", "4", "--map", "lampe-ruler:head=16"])
    assert r.exit_code != 0 and "lampe-ruler-llama3" in r.output and len(r.output.strip().splitlines()) == 1, r.output


# --- teacher forcing: U and both biases from the prompt alone ------------------------------------------------------

PROMPT, ANSWER = 60, 6
SCALED = {"head": 8, "tail": 3, "L": 32}  # lampe's scaled fit at the tiny model's L: U moves with the prompt's length


@pytest.fixture
def prompts_seen(monkeypatch):
    """The prompt lengths lampe's regions are made for while a test runs (the map's region function, spied)."""
    seen = []
    real = MAPS["lampe"].regions

    def spy(head, tail, U, L, fit, t, length=2, prompt=None):
        seen.append(prompt)
        return real(head, tail, U, L, fit, t, length, prompt)

    monkeypatch.setitem(MAPS, "lampe", dataclasses.replace(MAPS["lampe"], regions=spy))
    return seen


def test_teacher_forced_and_generated_lampe_fix_u_from_the_same_tokens(prompts_seen):
    """passkey_scores (teacher-forced) and greedy_tokens (--score generate) make lampe's regions for the prompt's
    60 tokens only, and the teacher-forced answer's NLL is what the prefill and the decoding steps give it; one pass
    over prompt and answer (what passkey_scores ran) makes them for 66 tokens, with another U, and another NLL."""
    model = build("llama")
    ids = torch.randint(2, 96, (1, PROMPT + ANSWER), generator=torch.Generator().manual_seed(1))
    bound = bind("lampe", SCALED)
    assert scaled_uselen(PROMPT, 32) != scaled_uselen(PROMPT + ANSWER, 32)  # the answer's tokens would move U
    with mapped(model, bound):
        _, nll = passkey_scores(model, ids, PROMPT)
        forced = {p for p in prompts_seen if p is not None}
        prompts_seen.clear()
        greedy_tokens(model, ids[:, :PROMPT], ANSWER, None)
        generated = {p for p in prompts_seen if p is not None}
        prompts_seen.clear()
        with torch.no_grad():  # the prefill, then each answer token through the cache, as generation runs
            cache = DynamicCache(config=model.config)
            logits = [model(ids[:, :PROMPT], cache=cache, use_cache=True).logits[0, -1]]
            logits += [model(ids[:, t:t + 1], cache=cache, use_cache=True).logits[0, -1]
                       for t in range(PROMPT, PROMPT + ANSWER - 1)]
            stepwise = float(torch.nn.functional.cross_entropy(torch.stack(logits), ids[0, PROMPT:], reduction="sum"))
            one_pass = model(ids).logits[0, PROMPT - 1:-1]
        one = {p for p in prompts_seen if p is not None}
    assert forced == generated == {PROMPT}, (forced, generated)
    assert abs(nll - stepwise) < 1e-4, (nll, stepwise)
    assert one == {PROMPT + ANSWER}  # the guard: one pass sets them from every token
    assert abs(float(torch.nn.functional.cross_entropy(one_pass, ids[0, PROMPT:], reduction="sum")) - nll) > 1e-3


def test_only_a_map_its_prompt_fixes_scores_the_answer_through_the_cache():
    """Without a map, and under maps whose regions the prompt does not fix (Self-Extend; lampe-sw, per length), the
    answer is scored by one pass as before; under lampe and its presets through the prompt's cache."""
    model = build("llama")
    assert not fixed_by_prompt(model)
    for spelled, fixed in [("selfextend:G=2,W=8", False), ("lampe-sw:head=8,U=20", False),
                           ("lampe:head=8,tail=3,U=20", True), ("lampe-longbench:head=8,tail=3,U=40", True)]:
        with mapped(model, parse_map(spelled)):
            assert fixed_by_prompt(model) is fixed, spelled
    ids = torch.randint(2, 96, (1, 40), generator=torch.Generator().manual_seed(2))
    with mapped(model, parse_map("selfextend:G=2,W=8")), torch.no_grad():
        hidden = final_hidden(model, ids)[0, 29:-1]
        want = torch.nn.functional.cross_entropy(model.lm_head(hidden).float(), ids[0, 30:], reduction="sum")
        assert passkey_scores(model, ids, 30)[1] == pytest.approx(float(want), abs=1e-6)


# --- the LongBench rule travels with an exported folder -----------------------------------------------------------

def test_the_longbench_folder_runs_its_u_rule(tmp_path):
    """`lampe-longbench` exported (small head, U = 40 for the tiny model): the folder's logits are ropecli's on a
    prompt below U (U = its length, not lampe's fixed 40) and one above (U = 40)."""
    model_dir = save_arch(next(a for a in ARCHS if a.name == "llama"), tmp_path / "model")
    out = export_folder(model_dir, tmp_path / "out", "lampe-longbench:head=8,tail=3,U=40", 96)
    folder = load_folder(out)
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.randint(2, 96, (1, 70), generator=torch.Generator().manual_seed(0))
    for n in (30, 70):
        with torch.no_grad(), mapped(reference, parse_map("lampe-longbench:head=8,tail=3,U=40")):
            want = reference(ids[:, :n]).logits
        with torch.no_grad(), mapped(reference, parse_map("lampe:head=8,tail=3,U=40")):
            fixed = reference(ids[:, :n]).logits
        with torch.no_grad():
            got, plain = folder(ids[:, :n]).logits, reference(ids[:, :n]).logits
        assert (got - want).abs().max() < 1e-4 and (got - plain).abs().max() > 1e-3, n
        assert ((got - fixed).abs().max() > 1e-3) == (n < 40), n  # below U the rule moves U; above, U = 40
