"""LaMPE: the registered map against an independent transliteration of
the authors' construction (scar-on/LaMPE llama_sw_map.py `forward`, `map_ids`, `flash_prefill_merge`), its regions per
length (a decoding step equals one pass over its prefix, in ropecli and in the exported folder, padded rows each at
their own length), its rule, and the commands that take any map (compare, search --vary, advise, export, verify)."""

import json
import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import MAPS, bind, map_params, map_regions

from architectures import L0, VOCAB
from helpers import arch_folder, reference_attention, rotate_at
from tiny_models import build, folder_batches_agree

T_FACTOR = 0.1 * math.log(2) + 1


class AuthorsLampe:
    """llama_sw_map.py's prefill, transliterated with explicit scores where the source calls flash attention: cos and
    sin x attention_factor; the window (flash causal, window_size=[head, 0]: keys i - head … i) at true positions; the
    far triangle (the last T - head queries at map_ids + bias_1 against the first T - head keys at map_ids, causal) ;
    merged by `flash_prefill_merge` (the first `head` queries the window's alone). `once`: the window without the pair
    d = head the far triangle also counts (the source's decoding window, keys T - head … T - 1)."""

    def __init__(self, rotary, head: int, use_length: int, once: bool):
        self.rotary, self.head, self.U, self.once = rotary, head, use_length, once

    @staticmethod
    def map_ids(X, to_min, to_max):  # the source's, verbatim
        x_min, x_max = X.min(), X.max()
        return torch.floor((to_min + ((to_max - to_min) / (x_max - x_min)) * (X - x_min)))

    def __call__(self, module, query, key, value, attention_mask=None, scaling=None, dropout=0.0, **kwargs):
        B, H, T, D = query.shape
        groups = H // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        head, t = self.head, T_FACTOR
        pos = torch.arange(T)
        mapping = self.map_ids(pos[None], 0, self.U)[0].long()
        bias_1 = head - (int(mapping[head]) + 1) if T > head else 0
        q, k = rotate_at(query, pos, self.rotary) * t, rotate_at(key, pos, self.rotary) * t
        i, j = pos[:, None], pos[None, :]
        reach = head - 1 if self.once else head
        s = torch.matmul(q, k.transpose(-1, -2)) * scaling
        s = s.masked_fill(~((j <= i) & (i - j <= reach)), float("-inf"))
        head_lse = torch.logsumexp(s, -1)
        head_out = torch.matmul(torch.softmax(s, -1), value)
        if T <= head:
            return head_out.transpose(1, 2).contiguous(), None
        front = T - head
        mq = rotate_at(query[:, :, -front:], mapping[-front:] + bias_1, self.rotary) * t
        mk = rotate_at(key[:, :, :front], mapping[:front], self.rotary) * t
        ms = torch.matmul(mq, mk.transpose(-1, -2)) * scaling
        a = torch.arange(front)
        ms = ms.masked_fill(~(a[None, :] <= a[:, None]), float("-inf"))  # flash causal over the two slices
        map_lse = torch.logsumexp(ms, -1)
        map_out = torch.matmul(torch.softmax(ms, -1), value[:, :, :front])
        # flash_prefill_merge(head_out, head_lse, map_out, map_lse, head): the first `head` rows as they are
        lse_1 = 1 / (1 + torch.exp(head_lse[:, :, head:] - map_lse))
        lse_2 = 1 / (1 + torch.exp(map_lse - head_lse[:, :, head:]))
        mid = head_out[:, :, head:] * lse_2[..., None] + map_out * lse_1[..., None]
        return torch.cat([head_out[:, :, :head], mid], dim=2).transpose(1, 2).contiguous(), None


def nll(model, ids):
    with torch.no_grad():
        return model(ids, labels=ids).loss.item()


@pytest.mark.parametrize("use_length", [10, 23])
def test_lampe_is_the_authors_construction(use_length):
    """ropecli's regions equal the source's prefill where each pair is counted once (< 1e-5 in the loss); the source's
    own window, which also counts d = head, moves it (the one difference the map's docstring names)."""
    model, ids = build("llama"), torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(3))
    params = {"head": 6, "U": use_length}
    with mapped(model, bind("lampe-sw", params), block=7):
        got = nll(model, ids)
    with reference_attention(model, lambda rotary: AuthorsLampe(rotary, 6, use_length, once=True)):
        want = nll(model, ids)
    with reference_attention(model, lambda rotary: AuthorsLampe(rotary, 6, use_length, once=False)):
        twice = nll(model, ids)
    assert abs(got - want) < 1e-5, (got, want)
    assert abs(got - nll(model, ids)) > 1e-3 and abs(twice - want) > 1e-6, (got, twice)


def test_the_far_positions_are_the_sources_map_ids_in_float32():
    """m(p) = floor(p (U / (T - 1))) with the source's float32 rounding, numpy and torch alike, at lengths and mapping
    lengths where float32 and exact division disagree somewhere (10 positions in ~460k)."""
    for T, U in [(1023, 1536), (8192, 1036), (16384, 3072), (300, 96)]:
        far = map_regions("lampe-sw", map_params("lampe-sw", {"head": 4, "U": U}), T)[1]
        src = AuthorsLampe.map_ids(torch.arange(T)[None], 0, U)[0].long()
        assert torch.equal(far.key(torch.arange(T)), src)
        assert np.array_equal(far.key(np.arange(T)), src.numpy())
        bias = 4 - (int(src[4]) + 1)
        assert np.array_equal(far.query(np.arange(T)), src.numpy() + bias)


def test_the_length_aware_mapping_length_is_the_papers_sigmoid():
    """U = 0: remap_uselen's Llama 3 fit at L = 8,192, 1536 below it; in units of L elsewhere."""
    def remap_uselen(ctx_len):  # scar-on/LaMPE llama_cache1.py, model_name == "llama3"
        if ctx_len < 8192:
            return 1536
        param = [0.00010493097327094324, -2.466638011138158, 6204.409324666837]
        return int(param[2] / (1 + np.exp(-(param[0] * ctx_len + param[1]))))

    for T in (4096, 8192, 12000, 16384, 32768, 65536, 131072):
        far = map_regions("lampe-sw", map_params("lampe-sw", {"head": 512, "L": 8192}), T)[1]
        U = remap_uselen(T)
        assert int(far.key(np.array([T - 1]))[0]) == int(AuthorsLampe.map_ids(torch.arange(T)[None], 0, U)[0, -1])
    half = map_regions("lampe-sw", map_params("lampe-sw", {"head": 256, "L": 4096}), 8192)[1]
    full = map_regions("lampe-sw", map_params("lampe-sw", {"head": 512, "L": 8192}), 16384)[1]
    assert int(half.key(np.array([8191]))[0]) * 2 in range(int(full.key(np.array([16383]))[0]) - 2,
                                                           int(full.key(np.array([16383]))[0]) + 3)
    assert MAPS["lampe-sw"].rule(8192, 32768) == {"head": 512, "U": 0, "L": 8192}


def cached_steps(model, ids, prompt: int):
    """The last row's logits of a prefill of `prompt` tokens, then of each later token through the KV cache."""
    cache = DynamicCache()
    steps = [model(ids[:, :prompt], cache=cache, use_cache=True).logits[0, -1]]
    for t in range(prompt, ids.shape[1]):
        steps.append(model(ids[:, t:t + 1], cache=cache, use_cache=True).logits[0, -1])
    return torch.stack(steps)


def test_a_decoding_step_has_the_regions_of_its_own_length():
    """A per-length map: each decoding step scores its query with the regions at its own length (its bias too), so
    in a one-layer model it is the last row of one pass over its prefix, from below L to past it. With more layers
    the cached keys and values of the later layers were made at the lengths of their own steps (as the source's cache
    holds them), so a step is not its prefix's pass: the drift `decode-across` measures for this map."""
    torch.manual_seed(0)
    one = LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       max_position_embeddings=64)).eval()
    ids = torch.randint(0, 96, (1, 80), generator=torch.Generator().manual_seed(2))
    params = {"head": 8, "L": 64}
    for model, equal in ((one, True), (build("llama"), False)):
        with mapped(model, bind("lampe-sw", params)), torch.no_grad():
            steps = cached_steps(model, ids, 56)
            want = torch.stack([model(ids[:, :t]).logits[0, -1] for t in range(56, 81)])
        gap = (steps - want).abs().max()
        assert (gap < 1e-4) if equal else (gap > 1e-3), (equal, gap)


@pytest.fixture(scope="module")
def lampe_folder(tmp_path_factory):
    return arch_folder(tmp_path_factory.mktemp("lampe-sw"), "llama", f"lampe-sw:head=8,L={L0}", 3 * L0)


def test_the_folder_is_ropecli_lampe_and_each_decoded_token_its_prefixs(lampe_folder):
    model_dir, out = lampe_folder
    folder = AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True, dtype=torch.float32).eval()
    reference = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    ids = torch.randint(2, VOCAB, (1, 3 * L0), generator=torch.Generator().manual_seed(0))
    params = {"head": 8, "L": L0}
    with torch.no_grad():
        got = folder(ids).logits
        with mapped(reference, bind("lampe-sw", params)):
            want = reference(ids).logits
        gen = folder.generate(ids[:, :L0 - 8], max_new_tokens=2 * L0, do_sample=False, min_new_tokens=2 * L0)
        with mapped(reference, bind("lampe-sw", params)):
            theirs = cached_steps(reference, gen, L0 - 8)[:-1]  # ropecli's decoding of the same tokens
        ours = cached_steps(folder, gen, L0 - 8)[:-1]
    assert (got - want).abs().max() < 1e-4, (got - want).abs().max()
    assert (ours - theirs).abs().max() < 1e-4, (ours - theirs).abs().max()
    theirs[:, folder.config.eos_token_id] = float("-inf")  # generate holds EOS back for min_new_tokens
    assert torch.equal(gen[0, L0 - 8:], theirs.argmax(-1))  # every token from below L to 2L past it: ropecli's
    # a left-padded batch: each row at its own length, the prompt alone
    folder_batches_agree(folder, [ids[0, :40], ids[0, :27]], ids[:, :40], 24)


def test_lampe_through_the_commands(lampe_folder, tiny_dir, text_file, tmp_path):
    """--map, methods, compare, search --vary, advise (by name, its rule), verify of the folder."""
    run = CliRunner().invoke
    assert "lampe-sw" in run(app, ["methods"]).output
    common = ["--model", tiny_dir, "--data", text_file, "--samples", "2", "--len", "128"]
    r = run(app, ["compare", *common, "--method", "none", "--map", "none", "--map", "lampe-sw:head=8,U=24"])
    assert r.exit_code == 0 and "lampe-sw(head=8,U=24" in r.output, r.output
    s = run(app, ["search", *common, "--method", "none", "--map", "lampe-sw:head=8,U=24", "--vary", "U=8:48",
                  "--budget", "4", "--json"])
    assert s.exit_code == 0 and 8 <= json.loads(s.stdout)["best_params"]["U"] <= 48, s.output
    a = run(app, ["advise", *common, "--budget", "4", "--candidates", "none,lampe-sw", "--out", str(tmp_path / "a"),
                  "--json"])
    assert a.exit_code == 0, a.output
    rows = {row["candidate"]: row for row in json.loads(a.stdout)["rows"]}
    assert rows["lampe-sw"]["position_map"]["name"] == "lampe-sw" and rows["lampe-sw"]["position_map"]["params"]["U"] == 0
    model_dir, out = lampe_folder
    v = run(app, ["verify", str(out)])
    assert v.exit_code == 0 and "ropecli_map.params.head" in v.output, v.output
    cfg = json.loads((out / "config.json").read_text())
    cfg["ropecli_map"]["params"]["head"] = 9
    (out / "config.json").write_text(json.dumps(cfg))
    bad = run(app, ["verify", str(out)])
    cfg["ropecli_map"]["params"]["head"] = 8
    (out / "config.json").write_text(json.dumps(cfg))
    assert bad.exit_code == 1 and "ropecli_map.params.head" in bad.output, bad.output


def test_lampe_sw_without_u_or_l_takes_the_models_training_length():
    """lampe-sw's sigmoid runs in units of the model's L once on the model (lampe's scaled fit does the same); before,
    a run refused it mid-way, after the maps before it had computed."""
    bound, note = bind("lampe-sw", {"head": 64}).on_model("llama", 1e5, 8192, None)
    assert bound.values["L"] == 8192 and "L = 8192" in note
    kept, none = bind("lampe-sw", {"head": 64, "U": 900}).on_model("llama", 1e5, 8192, None)
    assert kept.values["L"] == 0 and none is None  # a fixed U needs no L
