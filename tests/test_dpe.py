"""A position map whose positions differ per group of rotary pairs (DPE, Lu et al. 2025).
The map is Self-Extend per pair group; the mapped attention rotates each group's columns at that group's positions,
exactly: equal groups are Self-Extend, groups of 1 the model itself, and mixed groups the authors' own construction
(dpe_for_llama.py: per-factor cos and sin concatenated by dimension range, window and scaled attention merged)."""

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import rotate_half
from typer.testing import CliRunner

from ropecli.cli.app import app
from ropecli.errors import RopeCliError
from ropecli.maps.flex_regions import flex_available
from ropecli.maps.map_pairs import relative_positions
from ropecli.maps.map_rules import dpe_budget, dpe_ladder, dpe_ranges, dpe_rule
from ropecli.maps.map_run import rotary_modules, rotation_of
from ropecli.maps.map_spelling import map_label, map_text, parse_map
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.pair_contributions import pair_contributions
from ropecli.maps.pair_selection import kept_pairs, select_pairs
from ropecli.maps.position_maps import bind, map_params, map_regions
from ropecli.tuning.candidates import candidate_names, default_candidates, search_plans
from ropecli.tuning.optimizers import optimize
from ropecli.tuning.search_verdicts import parse_reference
from ropecli.tuning.space import Dim

from architectures import ARCHS, L0, VOCAB, save_arch
from helpers import map_attention_on

T = 3 * L0


def dpe(W, *G):
    return {"W": W, **{f"G{g + 1}": v for g, v in enumerate(G)}}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = save_arch(next(a for a in ARCHS if a.name == "llama"), tmp_path_factory.mktemp("llama"))
    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def test_dpe_is_self_extend_per_pair_group():
    """Every group at Self-Extend's positions with its own G: group g's relative positions are Self-Extend's at G_g."""
    G = (1, 2, 4, 8, 2, 16, 3, 1)
    rel = relative_positions("dpe", dpe(12, *G), 80)
    assert rel.shape == (80, 80, 8)
    for g, Gg in enumerate(G):
        assert np.array_equal(rel[..., g], relative_positions("selfextend", {"G": Gg, "W": 12}, 80), equal_nan=True)
    with pytest.raises(RopeCliError, match="dpe needs G3"):
        map_params("dpe", {"W": 12, "G1": 2, "G2": 2})


def test_equal_groups_are_self_extend_and_groups_of_one_the_model(llama):
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = llama(ids).logits
        with mapped(llama, bind("dpe", dpe(8, *[1] * 8))):
            ones = llama(ids).logits
        with mapped(llama, bind("selfextend", {"G": 4, "W": 8})):
            se = llama(ids).logits
        with mapped(llama, bind("dpe", dpe(8, *[4] * 8))):
            fours = llama(ids).logits
        with mapped(llama, bind("dpe", dpe(8, 1, 1, 1, 1, 4, 4, 4, 4))):
            mixed = llama(ids).logits
    assert (ones - plain).abs().max() < 1e-4 and (fours - se).abs().max() < 1e-4
    assert (mixed - se).abs().max() > 1e-3 and (mixed - plain).abs().max() > 1e-3  # the groups matter, each way


def authors_attention(q, k, v, cos_sin, W, G, scaling):
    """dpe_for_llama.py's prefill (select_topk_dim off), on the CPU: each factor's cos and sin at its positions
    (query // s + w - w / s, key // s), `concat_tensors` by dimension range, the window's attention (d < w, true
    positions) and the scaled one (d >= w) under one softmax (what `atten_merge_forward` merges by log-sum-exp)."""
    n, D = q.shape[2], q.shape[3]
    half, pos = D // 2, torch.arange(n, dtype=torch.float32)
    rng = [g * half // len(G) for g in range(len(G) + 1)]  # dimension_groups_range

    def concat(parts):  # concat_tensors: each factor's columns of its range, in both halves
        return torch.cat([p[..., rng[g]:rng[g + 1]] for g, p in enumerate(parts)]
                         + [p[..., half + rng[g]:half + rng[g + 1]] for g, p in enumerate(parts)], dim=-1)

    qc = [cos_sin(pos // s + W - W / s) for s in G]
    kc = [cos_sin(pos // s) for s in G]
    rot = lambda x, cs: x * cs[0] + rotate_half(x) * cs[1]  # noqa: E731
    normal = cos_sin(pos)
    near = rot(q, normal) @ rot(k, normal).transpose(-1, -2)
    far = rot(q, (concat([c[0] for c in qc]), concat([c[1] for c in qc]))) @ \
        rot(k, (concat([c[0] for c in kc]), concat([c[1] for c in kc]))).transpose(-1, -2)
    d = pos[:, None] - pos[None, :]
    s = torch.where(d < W, near, far).mul(scaling).masked_fill(d < 0, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def test_the_mapped_attention_is_the_authors_construction():
    """One attention call of ropecli's mapped attention (the fused CPU blocks) against the authors' per-dimension
    cos/sin concatenation, at head size 32 (16 pairs, 2 per group) and factors as their configs have them."""
    D, n, W, G = 32, 300, 64, (2, 8, 2, 8, 32, 32, 32, 4)  # Llama-3-8B-Instruct's scale_factors; W / 32 whole
    inv = 1.0 / 10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)

    def cos_sin(p):  # (T, D) in rotate-half layout
        ang = p[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        return ang.cos(), ang.sin()

    def rotary(x, positions):  # the rotary module's forward: (1, T) positions -> (1, T, D) cos, sin
        c, s = cos_sin(positions[0])
        return c[None], s[None]

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, D, generator=gen) for _ in range(3))
    params = map_params("dpe", dpe(W, *G))
    got = map_attention_on(map_regions("dpe", params, n), q, k, v, rotary, D ** -0.5)
    want = authors_attention(q, k, v, cos_sin, W, G, D ** -0.5).transpose(1, 2)
    assert (got - want).abs().max() < 1e-4
    uniform = authors_attention(q, k, v, cos_sin, W, (4,) * 8, D ** -0.5).transpose(1, 2)
    assert (got - uniform).abs().max() > 1e-2  # the groups' factors matter


def test_one_at_a_time_is_dpes_detection():
    """Each coordinate alone over its grid from the start (the others held there), then the bests together; on a
    log range of powers of two the grid is the powers themselves (DPE's detecting factors)."""
    dims = [Dim(f"G{g}", 1, 32, log=True) for g in range(1, 4)]
    want = (4, 1, 32)
    seen = []

    def f(x, above=None):
        G = [round(d.value(u)) for d, u in zip(dims, x)]
        seen.append(tuple(G))
        return sum((np.log2(g) - np.log2(w)) ** 2 for g, w in zip(G, want))

    x0 = [d.unit(8) for d in dims]
    trace = optimize(f, 3, 2 + 3 * 6, "one-at-a-time", x0=x0, bounded=True)
    assert seen[0] == (8, 8, 8) and seen[-1] == want and min(v for _, v in trace.points) == 0
    assert {g[0] for g in seen if g[1:] == (8, 8)} == {1, 2, 4, 8, 16, 32}  # the first group over every power of two
    assert len(seen) == 2 + 3 * 5  # the start's own grid point is not evaluated twice
    with pytest.raises(RopeCliError, match="below the minimum"):
        optimize(f, 3, 7, "one-at-a-time", x0=x0, bounded=True)


def test_dpe_rule_and_detection_budget_follow_the_source():
    """The window is DPE's config's 1,024 (config/dpe_config.yaml, the same for every model it ships: not Ls/8), capped
    at Ls/2 where Ls does not allow it; every group at 2T/Ls to start on 48 of 64 key pairs; the ladder is
    run_niah_detect.sh's T/len for len = T, T/2, … down to the window, each group searched over it."""
    assert dpe_rule(8192, 131072) == {"W": 1024, **{f"G{g}": 32 for g in range(1, 9)}, "top": 0.75}  # its factor, TOPK=48
    assert dpe_ladder(8192, 131072) == [1, 2, 4, 8, 16, 32, 64, 128]  # the script's detecting_factor at its defaults
    assert dpe_ranges(8192, 131072)["G3"] == (1, 128)
    assert dpe_rule(32768, 131072)["W"] == 1024 and dpe_ladder(32768, 131072)[-1] == 128  # Mistral/Qwen at 32k: 1,024
    assert dpe_rule(256, 1024)["W"] == 128 and dpe_ladder(256, 1024) == [1, 2, 4, 8]  # the built-in model: capped
    assert dpe_budget(256, 1024) == 2 + 8 * 4
    assert dpe_ranges(4096, 512)["G1"] == (1, 2)  # a target under the window: no ladder, the smallest range


DETECTED = "dpe:W=32,G1=16,G2=32,G3=8,G4=16,G5=16,G6=16,G7=32,G8=1"  # found at 4L on the built-in model (docs/methods.md)


def test_freqs_shows_each_pairs_distance_under_a_per_pair_map(tmp_path):
    """`freqs --map`: per pair its group and the farthest rotation distance at the target, its angle checked against
    training; a uniform map gives every pair the same distance. `plot freqs --map` draws it."""
    geo = ["--d", "64", "-L", "256", "--k", "4", "--method", "none"]
    r = CliRunner().invoke(app, ["freqs", *geo, "--map", DETECTED, "--json"])
    assert r.exit_code == 0, r.output
    pairs = json.loads(r.stdout)["pairs"]
    assert [p["map_group"] for p in pairs] == [m // 4 + 1 for m in range(32)]
    # group g at G_g: (T - 1) // G + W - W // G (Self-Extend's farthest), group 8 at G = 1: every true distance
    assert [pairs[4 * g]["map_distance"] for g in range(8)] == [93, 62, 155, 93, 93, 93, 62, 1023]
    assert [p["m"] for p in pairs if not p["map_in_range"]] == [29, 30, 31, 32]
    r = CliRunner().invoke(app, ["freqs", *geo, "--map", "selfextend:G=8,W=32", "--json"])
    assert {p["map_distance"] for p in json.loads(r.stdout)["pairs"]} == {155} and r.exit_code == 0
    r = CliRunner().invoke(app, ["freqs", *geo, "--map", "selfextend:G=8,W=32", "--map", DETECTED])
    assert r.exit_code == 1 and "under one --map" in r.output
    r = CliRunner().invoke(app, ["freqs", *geo, "--map", DETECTED + ",top=0.75"])
    assert r.exit_code == 0 and "each head moves only its 24 of 32 pairs" in " ".join(r.output.split()), r.output
    r = CliRunner().invoke(app, ["plot", "freqs", *geo, "--map", DETECTED, "--out", str(tmp_path / "f.png")])
    assert r.exit_code == 0 and (tmp_path / "f.png").stat().st_size > 10_000, r.output


def test_a_reference_may_run_under_a_map():
    """`search --reference none@selfextend:G=4,W=2048`: the held-out verdict puts a map beside the searched winner."""
    spec = parse_reference("none@selfextend:G=4,W=2048", 2.0, False)
    assert spec.method == "none" and spec.position_map == bind("selfextend", {"G": 4, "W": 2048})
    assert parse_reference("yarn:beta_fast=16", 2.0, False).position_map is None


def test_advise_races_dpe_by_name_only():
    """At its rule DPE is Self-Extend with every group alike (on its key pairs): not in the default tournament; dpe and
    dpe-tuned by name, dpe-tuned searched one group at a time within its own budget."""
    assert "dpe" not in default_candidates(False, True) and "selfextend" in default_candidates(False, True)
    assert {"dpe", "dpe-tuned"} <= set(candidate_names())
    assert search_plans(7, 256, 1024)["dpe-tuned"][2] == 34 and search_plans(7)["dpe-tuned"][2] == 7


# Key-pair selection (DPE's select_topk_dim): per layer and head only the chosen pairs move, the rest at true positions.

def every(llama, value: bool) -> dict:
    cfg = llama.config
    pairs = cfg.hidden_size // cfg.num_attention_heads // 2
    return {n: np.full((cfg.num_attention_heads, pairs), value) for n in range(cfg.num_hidden_layers)}


def test_a_selection_of_every_pair_is_the_map_and_of_none_the_model(llama):
    """Selected everywhere: the map as before; selected nowhere: every pair at true positions, the model itself. And a
    share below 1 without a selection is refused in one line (the pairs are chosen on the model)."""
    ids = torch.randint(2, VOCAB, (1, T), generator=torch.Generator().manual_seed(1))
    p = {**dpe(8, 1, 2, 4, 8, 4, 4, 16, 2), "top": 0.5}
    with torch.no_grad():
        plain = llama(ids).logits
        with mapped(llama, bind("dpe", {**p, "top": 1.0})):
            whole = llama(ids).logits
        with mapped(llama, bind("dpe", p), selection=every(llama, True)):
            all_sel = llama(ids).logits
        with mapped(llama, bind("dpe", p), selection=every(llama, False)):
            none_sel = llama(ids).logits
    assert (all_sel - whole).abs().max() < 1e-5 and (none_sel - plain).abs().max() < 1e-4
    assert (whole - plain).abs().max() > 1e-3
    with pytest.raises(RopeCliError, match="top = 0.5 moves the pairs chosen on the model"):
        with mapped(llama, bind("dpe", p)):
            pass


def authors_selected_attention(q, k, v, cos_sin, W, G, scaling, dim_mask):
    """dpe_for_llama.py's prefill with select_topk_dim on: the scaled cos and sin `torch.where(dim_mask, scaled,
    normal)` per head (dim_mask (H, D): `dimension_selection`'s mask, both halves), queries and keys rotated per head
    (`apply_rotary_pos_emb_by_heads`), the window at true positions, one softmax."""
    n, D = q.shape[2], q.shape[3]
    half, pos = D // 2, torch.arange(n, dtype=torch.float32)
    rng = [g * half // len(G) for g in range(len(G) + 1)]

    def concat(parts):
        return torch.cat([p[..., rng[g]:rng[g + 1]] for g, p in enumerate(parts)]
                         + [p[..., half + rng[g]:half + rng[g + 1]] for g, p in enumerate(parts)], dim=-1)

    normal = cos_sin(pos)
    qc = [cos_sin(pos // s + W - W / s) for s in G]
    kc = [cos_sin(pos // s) for s in G]
    m = dim_mask[None, :, None, :]  # (1, H, 1, D)
    sq = [torch.where(m, concat([c[i] for c in qc]), normal[i]) for i in range(2)]
    sk = [torch.where(m, concat([c[i] for c in kc]), normal[i]) for i in range(2)]
    rot = lambda x, cs: x * cs[0] + rotate_half(x) * cs[1]  # noqa: E731
    near = rot(q, normal) @ rot(k, normal).transpose(-1, -2)
    far = rot(q, sq) @ rot(k, sk).transpose(-1, -2)
    d = pos[:, None] - pos[None, :]
    s = torch.where(d < W, near, far).mul(scaling).masked_fill(d < 0, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("kernel", ["blocks", "flex"])
def test_a_selection_is_the_authors_select_topk_dim(kernel):
    """One attention call with half of each head's pairs selected (a different half per head, keys shared by two query
    heads as in GQA) against the authors' per-head construction; the fused blocks and the flex twin alike."""
    if kernel == "flex":
        if not flex_available():
            pytest.skip("no flex attention in this torch")
    D, n, W, G, H = 32, 300, 64, (2, 8, 2, 8, 32, 32, 32, 4), 4
    inv = 1.0 / 10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)

    def cos_sin(p):
        ang = p[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        return ang.cos(), ang.sin()

    def rotary(x, positions):
        c, s = cos_sin(positions[0])
        return c[None], s[None]

    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, H, n, D, generator=gen)
    k, v = (torch.randn(1, H // 2, n, D, generator=gen) for _ in range(2))
    sel = torch.rand(H, D // 2, generator=gen).argsort(dim=1) < D // 4  # (H, pairs): half of each head's pairs
    params = map_params("dpe", {**dpe(W, *G), "top": 0.5})
    got = map_attention_on(map_regions("dpe", params, n), q, k, v, rotary, D ** -0.5, selection={0: sel.numpy()},
                           kernel=kernel)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    want = authors_selected_attention(q, kk, vv, cos_sin, W, G, D ** -0.5, torch.cat([sel, sel], dim=-1))
    assert (got - want.transpose(1, 2)).abs().max() < 1e-4
    unselected = authors_attention(q, kk, vv, cos_sin, W, G, D ** -0.5).transpose(1, 2)
    assert (got - unselected).abs().max() > 1e-2  # the selection matters


def test_contributions_are_the_mean_product_of_pair_norms(llama):
    """Layer 0's contributions from the mapped identity's observer equal |q_m| |k_m| computed from the layer's own
    projections of its input (before rotation), averaged over tokens; the selection keeps each head's top pairs."""
    cfg = llama.config
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    D = cfg.hidden_size // H
    ids = np.random.default_rng(3).integers(2, VOCAB, 40)
    got = pair_contributions(llama, [ids, ids[::-1].copy()])
    assert sorted(got) == list(range(cfg.num_hidden_layers)) and got[0].shape == (H, D // 2)
    att = llama.model.layers[0].self_attn
    want = 0
    for w in (ids, ids[::-1].copy()):
        with torch.no_grad():
            h = llama.model.layers[0].input_layernorm(llama.model.embed_tokens(torch.from_numpy(w)[None]))
            q = att.q_proj(h).view(1, len(w), H, D)
            k = att.k_proj(h).view(1, len(w), Hkv, D).repeat_interleave(H // Hkv, dim=2)
        norm = lambda x: (x[..., :D // 2] ** 2 + x[..., D // 2:] ** 2).sqrt()  # noqa: E731  rotate-half pairs
        want = want + (norm(q) * norm(k)).mean(dim=1)[0].double().numpy() / 2
    assert np.allclose(got[0], want, rtol=1e-4)
    sel = select_pairs(got, 0.75)
    k = kept_pairs(D // 2, 0.75)
    assert all(s.sum(axis=1).tolist() == [k] * H for s in sel.values())
    assert np.all(np.where(sel[0], got[0], np.inf).min(axis=1) >= np.where(sel[0], -np.inf, got[0]).max(axis=1))


def test_select_pairs_keeps_the_top_share():
    c = {0: np.array([[0.1, 0.5, 0.3, 0.5], [4.0, 3.0, 2.0, 1.0]])}
    assert select_pairs(c, 0.5)[0].tolist() == [[False, True, False, True], [True, True, False, False]]
    assert kept_pairs(64, 0.75) == 48 and kept_pairs(32, 0.01) == 1 and kept_pairs(8, 1.0) == 8


def test_every_pair_selected_keeps_the_maps_earlier_name_and_cache_key():
    """top = 1 is DPE as it was before it could select: its label, its --map spelling and its cache key's parameters
    leave top out (the evaluations cached before still serve); top < 1 names it, and the evaluator's key names the
    calibration the pairs were chosen on."""
    every, some = bind("dpe", dpe(8, *[2] * 8)), bind("dpe", {**dpe(8, *[2] * 8), "top": 0.75})
    assert "top" not in every.key_values and every.values["top"] == 1.0 and every.share == 1.0
    assert some.key_values["top"] == 0.75 and some.share == 0.75
    assert "top" not in map_label(every) and "top=0.75" in map_label(some)
    assert parse_map(map_text(some)) == some and parse_map(map_text(every)) == every
    assert bind("selfextend", {"G": 4, "W": 8}).share == 1.0


MAPPED_ROWS = ["llama", "cohere", "phi (partial)", "gpt_neox (partial)", "ernie4_5", "glm4_moe (partial 0.5)",
               "gemma4 (p-RoPE 0.25)", "qwen3_5 (hybrid, partial 0.5)"]


@pytest.mark.parametrize("row", MAPPED_ROWS)
def test_each_columns_pair_is_the_one_the_model_rotates(tmp_path, row):
    """`column_pairs` reads each column's pair off the model's own rotation (rotate-half, interleaved, ERNIE's and
    GLM's interleaved apply on a rotate-half cos, partial rotary, p-RoPE's unrotated pairs): rotated at another
    position, a column moves weight only to the other column of its pair, and the columns marked -1 do not move."""
    folder = save_arch(next(a for a in ARCHS if a.name == row), tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    seen = {}
    with torch.no_grad(), mapped(model, bind("none", {}), observe=lambda m, q, k, pair: seen.setdefault(m.layer_idx, (m, pair))):
        model(torch.randint(2, VOCAB, (1, 20), generator=torch.Generator().manual_seed(0)))
        layer, (module, pair) = next(iter(seen.items()))
        types = getattr(model.config.get_text_config(), "layer_types", None)
        found = rotary_modules(model)
        rotary, lt = found.get(types[layer] if types else "") or found[""]
        D = pair.numel()
        probe = torch.eye(D)[None, None]
        cos, sin = rotary(probe, torch.full((1, D), 7.0), **({"layer_type": lt} if lt else {}))
        out = rotation_of(module)(probe, cos.float(), sin.float())[0, 0]
    counts = torch.bincount(pair[pair >= 0])
    assert set(counts[counts > 0].tolist()) == {2}  # every pair index names two columns
    for c in range(D):
        moved = set((out[c].abs() > 1e-6).nonzero().flatten().tolist()) - {c}
        partners = set((pair == pair[c]).nonzero().flatten().tolist()) - {c} if pair[c] >= 0 else set()
        assert moved <= partners and (pair[c] < 0 or moved == partners), (c, moved, partners)
    if row.startswith("gemma4"):
        assert (pair < 0).any()  # p-RoPE: the unrotated pairs are none of the selection's
