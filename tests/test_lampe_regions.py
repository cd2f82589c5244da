"""LaMPE's three regions: the registered `lampe` against a transliteration of the method its benchmarks run,
scar-on/LaMPE llama_cache1.py `forward` (prefill and decoding, the full-attention fallback below 2 x head), each
flash_attn_func call replaced by explicit scores with flash's semantics; its U fits (`remap_uselen`) and the fit a
model's config picks; the presets; the exported folder decoding as the source decodes."""

import json
import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.maps import position_maps
from ropecli.maps.map_spelling import map_label, parse_map
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import MAPS, bind, map_params, map_regions

from architectures import ARCHS, save_arch
from helpers import reference_attention, rotate_at, run
from tiny_models import build, char_tokenizer, folder_batches_agree

T_FACTOR = 0.1 * math.log(2) + 1


def flash(q, k, v, causal=True, window=-1):
    """flash_attn_func(q, k, v, causal, window_size=[window, 0], return_attn_probs=True) on (B, T, H, D): the causal
    mask aligned to the bottom right (query a sees key b <= a + T_k - T_q) and the left window b >= that - window;
    -> out (B, T_q, H, D), lse (B, H, T_q)."""
    Tq, Tk = q.shape[1], k.shape[1]
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    a, b = torch.arange(Tq)[:, None] + (Tk - Tq), torch.arange(Tk)[None, :]
    keep = (b <= a) if causal else torch.ones(Tq, Tk, dtype=torch.bool)
    if window >= 0:
        keep = keep & (b >= a - window)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v), lse


def map_ids(X, to_min, to_max):  # the source's, verbatim
    x_min, x_max = X.min(), X.max()
    return torch.floor((to_min + ((to_max - to_min) / (x_max - x_min)) * (X - x_min)))


def find_chunk_last_index(a, re_size):  # the source's, verbatim
    while re_size + 1 < a.shape[1] and a[0, re_size] == a[0, re_size + 1]:
        re_size += 1
    return re_size


def flash_prefill_merge(head_out, head_lse, map_out, map_lse, tail_out, tail_lse, bias_1, bias_2):  # the source's
    L, N = head_out.size(1), map_out.size(1)
    head_out_head, head_out_mid, head_out_tail = head_out[:, :bias_1], head_out[:, bias_1:L - bias_2], head_out[:, L - bias_2:]
    map_out_mid, map_out_tail = map_out[:, :N - bias_2], map_out[:, N - bias_2:]
    head_lse_mid, head_lse_tail = head_lse[:, :, bias_1:L - bias_2], head_lse[:, :, L - bias_2:]
    map_lse_mid, map_lse_tail = map_lse[:, :, :N - bias_2], map_lse[:, :, N - bias_2:]
    lse_1 = (1 / (1 + torch.exp(head_lse_mid - map_lse_mid))).transpose(1, 2).unsqueeze(-1)
    lse_2 = (1 / (1 + torch.exp(map_lse_mid - head_lse_mid))).transpose(1, 2).unsqueeze(-1)
    merge_out_mid = head_out_mid * lse_2 + map_out_mid * lse_1
    lse_1 = 1 / (1 + torch.exp(map_lse_tail - tail_lse) + torch.exp(head_lse_tail - tail_lse))
    lse_2 = 1 / (1 + torch.exp(tail_lse - map_lse_tail) + torch.exp(head_lse_tail - map_lse_tail))
    lse_3 = 1 / (1 + torch.exp(tail_lse - head_lse_tail) + torch.exp(map_lse_tail - head_lse_tail))
    lse_1, lse_2, lse_3 = (x.transpose(1, 2).unsqueeze(-1) for x in (lse_1, lse_2, lse_3))
    merge_out_tail = tail_out * lse_1 + map_out_tail * lse_2 + head_out_tail * lse_3
    return torch.cat([head_out_head, merge_out_mid, merge_out_tail], dim=1)


def flash_decode_merge(head_out, head_lse, map_out, map_lse, tail_out, tail_lse):  # the source's
    lse_1 = 1 / (1 + torch.exp(map_lse - head_lse) + torch.exp(tail_lse - head_lse))
    lse_2 = 1 / (1 + torch.exp(head_lse - map_lse) + torch.exp(tail_lse - map_lse))
    lse_3 = 1 / (1 + torch.exp(head_lse - tail_lse) + torch.exp(map_lse - tail_lse))
    lse_1, lse_2, lse_3 = (x.transpose(1, 2).unsqueeze(-1) for x in (lse_1, lse_2, lse_3))
    return head_out * lse_1 + map_out * lse_2 + tail_out * lse_3


class AuthorsLampe:
    """llama_cache1.py `forward` from the projections on, as an attention function: queries and keys arrive
    unrotated (`helpers.reference_attention` hands the layers cos = 1, sin = 0; the cache keeps them so, the source's
    map_cache),
    rotated here with the model's rotary at the positions the source gives each region, cos and sin x rope_scale.
    The prefill's state (prefill_len, bias_1, bias_2, re_size_2, map_len) is kept for the decoding steps, as the
    source's register_buffer calls keep it."""

    def __init__(self, rotary, head: int, tail: int, use_length: int):
        self.rotary, self.head, self.tail, self.U = rotary, head, tail, use_length

    def rot(self, x, positions):  # apply_rotary_pos_emb_map with cos, sin x rope_scale; (B, H, T, D) -> (B, T, H, D)
        return (rotate_at(x, torch.as_tensor(positions).long(), self.rotary) * T_FACTOR).transpose(1, 2)

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        B, H, q_len, D = query.shape
        groups = H // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)  # repeat_kv
        kv_seq_len, head, tail = key.shape[2], self.head, self.tail
        has_kv_cache = q_len != kv_seq_len
        position_ids = torch.arange(kv_seq_len - q_len, kv_seq_len)
        v = value.transpose(1, 2)  # (B, T, H, D), flash's layout
        if not has_kv_cache:
            mapping_ids = map_ids(position_ids[None], 0, self.U).long()
            re_size_2 = find_chunk_last_index(mapping_ids, tail)
            bias_1 = head - (int(mapping_ids[0, head]) + 1) if kv_seq_len > head else 0
            bias_2 = ((kv_seq_len - 1 - re_size_2) - int(mapping_ids[0, kv_seq_len - 1 - re_size_2]) - bias_1
                      if kv_seq_len > head else 0)
            self.prefill_len, self.map_len = kv_seq_len, kv_seq_len - head - re_size_2
            self.bias_1, self.bias_2, self.re_size_2 = bias_1, bias_2, re_size_2
        kpos = torch.arange(kv_seq_len)
        key_states = self.rot(key, kpos)  # the k cache: keys at their true positions
        if self.prefill_len < 2 * head:  # full attention
            out, _ = flash(self.rot(query, position_ids), key_states, v)
        elif not has_kv_cache:
            re_size_2, bias_1, bias_2 = self.re_size_2, self.bias_1, self.bias_2
            head_out, head_lse = flash(self.rot(query, position_ids), key_states, v, window=head)
            tail_q = self.rot(query[:, :, -re_size_2:], position_ids[-re_size_2:] - bias_2)
            tail_out, tail_lse = flash(tail_q, key_states[:, :re_size_2], v[:, :re_size_2])
            front_pos = kv_seq_len - head
            map_q = self.rot(query[:, :, -front_pos:], mapping_ids[0, -front_pos:] + bias_1)
            map_k = self.rot(key[:, :, :front_pos], mapping_ids[0, :front_pos])
            map_out, map_lse = flash(map_q, map_k, v[:, :front_pos], window=front_pos - re_size_2)
            out = flash_prefill_merge(head_out, head_lse, map_out, map_lse, tail_out, tail_lse, head, re_size_2)
        else:
            decode_len = kv_seq_len - self.prefill_len
            head_out, head_lse = flash(self.rot(query, position_ids), key_states[:, kv_seq_len - head:kv_seq_len],
                                       v[:, kv_seq_len - head:kv_seq_len])
            mapping_ids = map_ids(torch.arange(self.prefill_len)[None], 0, self.U).long()
            map_q = self.rot(query, mapping_ids[0, -1:] + self.bias_1)  # cos[:, :, -1]: the prefill's last
            lo = self.re_size_2 + decode_len
            map_k = self.rot(key[:, :, lo:lo + self.map_len], mapping_ids[0, lo:lo + self.map_len])
            map_out, map_lse = flash(map_q, map_k, v[:, lo:lo + self.map_len])
            tail_q = self.rot(query, position_ids - self.bias_2)
            tail_out, tail_lse = flash(tail_q, key_states[:, :lo], v[:, :lo])
            out = flash_decode_merge(head_out, head_lse, map_out, map_lse, tail_out, tail_lse)
        return out.contiguous(), None


def logits_prefill_then_steps(model, ids, prompt: int):
    """(the prefill's logits for every prompt token, each later token's logits through the KV cache)."""
    cache = DynamicCache()
    with torch.no_grad():
        first = model(ids[:, :prompt], cache=cache, use_cache=True).logits[0]
        steps = [model(ids[:, t:t + 1], cache=cache, use_cache=True).logits[0, -1]
                 for t in range(prompt, ids.shape[1])]
    return first, torch.stack(steps)


def against_the_source(params: dict, prompt: int, steps: int, seed: int = 3):
    """max |logits| gaps of ropecli's lampe against the transliteration: (prefill, decoding), and the prefill's gap
    to the model unmapped (the map must do something)."""
    model = build("llama")
    ids = torch.randint(0, 96, (1, prompt + steps), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        plain = model(ids[:, :prompt]).logits[0]
    checked = map_params("lampe", params)
    with mapped(model, bind("lampe", checked), block=7):
        got = logits_prefill_then_steps(model, ids, prompt)
    with reference_attention(model, lambda rotary: AuthorsLampe(rotary, int(checked["head"]), int(checked["tail"]),
                                                                int(checked["U"]))):
        want = logits_prefill_then_steps(model, ids, prompt)
    return ((got[0] - want[0]).abs().max().item(), (got[1] - want[1]).abs().max().item(),
            (got[0] - plain).abs().max().item())


@pytest.mark.parametrize("params,prompt", [({"head": 8, "tail": 3, "U": 13}, 40),  # chunks of ~3: r past tail
                                           ({"head": 6, "tail": 2, "U": 30}, 37),
                                           ({"head": 10, "tail": 4, "U": 9}, 45)])
def test_lampe_is_llama_cache1s_forward_prefill_and_decoding(params, prompt):
    """< 1e-5 on every logit: the prompt's prefill (its double-counted edges included) and each decoding step with
    U, bias_1, bias_2 and the regions fixed from the prompt (steps within `head`: the source's own slice)."""
    pre, dec, moved = against_the_source(params, prompt, steps=params["head"])
    assert pre < 1e-5 and dec < 1e-5, (pre, dec)
    assert moved > 1e-2, moved


def test_below_two_heads_is_full_attention_at_the_sources_temperature():
    """A prompt below 2 x head: full attention with cos and sin x t, in the prefill and every decoding step after
    (even past 2 x head), as the source's `if self.prefill_len < 2*head`."""
    pre, dec, moved = against_the_source({"head": 12, "tail": 3, "U": 10}, 20, steps=10)
    assert pre < 1e-5 and dec < 1e-5 and moved > 1e-3, (pre, dec, moved)


def test_without_the_initial_keys_region_it_is_not_the_source(monkeypatch):
    """The guard the test above stands on: drop the third region (the first ~tail keys the last queries see at fine
    positions, llama_cache1's `tail` attention) and the prefill's last rows and every decoding step move."""
    real = position_maps._lampe

    def two(head, tail, U, L, fit, t, length=2, prompt=None):
        return real(head, tail, U, L, fit, t, length, prompt)[:2]

    monkeypatch.setitem(MAPS, "lampe", position_maps.PositionMap(**{**vars(MAPS["lampe"]), "regions": two}))
    pre, dec, _ = against_the_source({"head": 8, "tail": 3, "U": 13}, 40, steps=4)
    assert pre > 1e-3 and dec > 1e-3, (pre, dec)


def remap_uselen(ctx_len, model_name):  # scar-on/LaMPE llama_cache1.py, verbatim
    if model_name == "llama2":
        if ctx_len < 8192:
            return 1536
        param = [8.673006440952035e-05, -0.648012322406978, 2489.1055552214357]
    elif model_name == "llama3":
        if ctx_len < 8192:
            return 1536
        param = [0.00010493097327094324, -2.466638011138158, 6204.409324666837]
    elif model_name == "mistral":
        if ctx_len < 8192:
            return 1536
        param = [0.00010493097327094324, -2.466638011138158, 24576]
    elif model_name == "llama3.1":
        param = [4.505261149632588e-05, -2.788576860718702, 82358.52413056031]
    return int(param[2] / (1 + np.exp(-(param[0] * ctx_len + param[1]))))


def mapping_length(bound, T: int) -> int:
    """U as the regions hold it: m(T - 1) with m(p) = floor(p * float32(U / (T - 1))) (U itself but for float32)."""
    far = bound.regions(T)[1]
    return int(far.key(np.array([T - 1]))[0])


@pytest.mark.parametrize("family", ["llama2", "llama3", "llama3.1", "mistral"])
def test_each_fit_is_remap_uselen(family):
    for T in (4096, 8192, 16384, 32768, 65536, 131072):
        bound = parse_map(f"lampe:head=512,fit={family}")
        U = remap_uselen(T, family)
        assert mapping_length(bound, T) in (U, U - 1)  # the float32 floor at T - 1
        assert map_label(bound) == f"lampe(head=512,tail=200,U=0,L=0,fit={family},t=1.06931)"


def test_a_llama_2_config_picks_the_llama_2_fit_and_says_so():
    """fit = auto on a Llama-2-shaped config (llama, base 10,000, L 4,096): the source's 1,702 at 16k; the Llama 3
    fit scaled by L (the two-region map's rule) would give 2,250; a model LaMPE never fitted gets the scaled fit at
    its own L, said as ropecli's own."""
    auto = parse_map("lampe:head=512")
    bound, note = auto.on_model("llama", 10000.0, 4096, None)
    assert mapping_length(bound, 16384) in (1702, 1701) and "Llama 2 fit" in note and "model's family" in note
    scaled, note2 = auto.on_model("llama", 100000.0, 8192, None)  # SmolLM2
    assert scaled.values["L"] == 8192 and "ropecli's own" in note2 and "no LaMPE fit" in note2
    assert auto.on_model("llama", 500000.0, 131072, "llama3")[0].values["fit"] == 4.0  # Llama 3.1
    assert auto.on_model("mistral", 1e6, 32768, None)[0].values["fit"] == 5.0
    assert mapping_length(auto.on_model("llama", 500000.0, 8192, None)[0], 16384) in (remap_uselen(16384, "llama3"),
                                                                                    remap_uselen(16384, "llama3") - 1)
    with pytest.raises(RopeCliError, match="fit = auto picks it on the model"):
        auto.regions(16384)  # no model, no L: one line


def test_the_presets_are_the_authors_settings():
    assert map_params("lampe-longbench", {}) == {**map_params("lampe", {"head": 512, "U": 1536})}
    assert map_params("lampe-ruler-llama3", {}) == map_params("lampe-sw", {"head": 1024, "U": 3072})
    assert map_params("lampe-ruler-mistral", {}) == map_params("lampe", {"head": 2048, "fit": "mistral"})
    assert map_params("lampe-infinitebench", {})["U"] == 4501  # each run against its script: tests/test_lampe_presets.py
    assert MAPS["lampe"].rule(8192, 32768) == {"head": 512, "tail": 200, "U": 0, "L": 8192, "fit": 0}
    with pytest.raises(RopeCliError, match="tail = 20 must be below head = 16"):
        map_regions("lampe", map_params("lampe", {"head": 16, "tail": 20, "U": 40}), 64)


@pytest.fixture(scope="module")
def lampe_folder(tmp_path_factory):
    base = tmp_path_factory.mktemp("lampe3")
    model_dir = save_arch(next(a for a in ARCHS if a.name == "llama"), base / "model")
    r = run("export", "--model", model_dir, "--method", "none", "--map", "lampe:head=8,tail=3", "--len", 96, "--to",
            "transformers", "--out", base / "out")
    assert r.exit_code == 0, r.output
    assert "LaMPE's Llama 3 fit in units of the training length (ropecli's own scaling) (L = 32)" in r.output, r.output
    return model_dir, base / "out"


def test_the_folder_decodes_as_the_source_decodes(lampe_folder):
    """The exported folder: its prefill and each decoding step through the cache are ropecli's (which the
    transliteration pins to llama_cache1.py), the regions fixed from the prompt (fit = auto resolved to the scaled
    fit at the model's L, written into config.json); greedy generation follows them; a left-padded batch is each
    prompt alone; static and dynamic caches agree."""
    model_dir, out = lampe_folder
    served = json.loads((out / "config.json").read_text())["ropecli_map"]["params"]
    assert served["fit"] == 1.0 and served["L"] == 32.0, served
    folder = AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True, dtype=torch.float32).eval()
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.randint(2, 96, (1, 90), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        gen = folder.generate(ids[:, :60], max_new_tokens=8, do_sample=False, min_new_tokens=8)
    with mapped(reference, bind("lampe", served)):
        want = logits_prefill_then_steps(reference, gen, 60)
    got = logits_prefill_then_steps(folder, gen, 60)
    assert (got[0] - want[0]).abs().max() < 1e-4 and (got[1] - want[1]).abs().max() < 1e-4, (
        (got[0] - want[0]).abs().max(), (got[1] - want[1]).abs().max())
    theirs = want[1][:-1].clone()
    theirs[:, folder.config.eos_token_id] = float("-inf")  # generate holds EOS back for min_new_tokens
    assert torch.equal(gen[0, 61:], theirs.argmax(-1)) and int(gen[0, 60]) == int(want[0][-1].argmax())
    with torch.no_grad():
        one_pass = folder(gen).logits[0, 59:-1]  # the decoding steps are not one pass over their prefix: the source's
    assert (one_pass[1:] - want[1][:-1]).abs().max() > 1e-3  # regions stay the prompt's
    folder_batches_agree(folder, [ids[0, :60], ids[0, :41]], ids[:, :60], 10)


def test_the_commands_name_the_fit():
    """`freqs` (no model) runs fit = auto as the scaled fit at the geometry's L and says so in its title; `methods`
    lists the fits by name and the presets."""
    r = CliRunner().invoke(app, ["freqs", "--d", "64", "--train-len", "256", "--k", "4", "--map", "lampe:head=16,tail=6"])
    assert r.exit_code == 0 and "lampe(head=16,tail=6,U=0,L=256,fit=scaled" in r.output.replace("\n", ""), r.output
    m = CliRunner().invoke(app, ["methods"])
    assert "fit=auto" in m.output and "lampe-ruler" in m.output and "lampe-sw" in m.output, m.output


def test_a_run_on_a_llama_2_shaped_model_names_the_llama_2_fit(tmp_path, text_file):
    """End to end: a tiny model with Llama 2's RoPE config (llama, base 10,000, L 4,096) scored under
    `lampe:head=16,tail=4` ends with the line naming LaMPE's Llama 2 fit, chosen from the model's family."""
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})).save_pretrained(tmp_path)
    char_tokenizer().save_pretrained(tmp_path)
    r = CliRunner().invoke(app, ["ppl", "--model", str(tmp_path), "--data", text_file, "--len", "64", "--samples", "1",
                                 "--method", "none", "--map", "lampe:head=16,tail=4", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "lampe: U from each prompt's length by LaMPE's Llama 2 fit: the model's family" in r.output, r.output
