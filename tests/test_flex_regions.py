"""The GPU path of a position map, tested through its CPU twin: flex attention run eagerly on the CPU, each
region under a BlockMask cut to the blocks it reaches, the regions merged by log-sum-exp. It must give the fused CPU
blocks' logits (and, under the identity map, the unpatched model's) on every map, in a prefill and through the KV cache;
on CUDA the same code runs compiled (tests/test_gpu.py, benchmarks/bench_gpu_maps.py)."""

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask
from transformers import DynamicCache

import ropecli.maps.flex_regions as fr
from ropecli.errors import RopeCliError
from ropecli.maps.flex_regions import FLEX_BLOCK, as_block_mask, block_classes, extent, flex_available
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import bind

from architectures import ARCHS, L0, VOCAB, build_arch
from tiny_models import build

pytestmark = pytest.mark.skipif(not flex_available(), reason="this torch has no flex attention")

MAPS = [("none", {}), ("selfextend", {"G": 4, "W": 16}), ("rerope", {"w": 24}), ("leaky-rerope", {"w": 24, "k": 4}),
        ("dca", {"chunk": 48, "local": 8}), ("string", {"S": 40, "W": 8}), ("selfextend-llamacpp", {"G": 4, "W": 32}),
        ("dpe", {"W": 16, "G1": 1, "G2": 2, "G3": 8, "G4": 4, "G5": 1, "G6": 16, "G7": 2, "G8": 4})]


@pytest.fixture(scope="module")
def model_and_ids():
    return build("llama"), torch.randint(0, 96, (1, 300), generator=torch.Generator().manual_seed(5))  # GQA: 4 / 2 heads


@pytest.mark.parametrize("triangles", [True, False], ids=["triangles-fused", "all-flex"])
@pytest.mark.parametrize(("name", "params"), MAPS)
def test_flex_and_the_fused_blocks_agree(model_and_ids, name, params, triangles, monkeypatch):
    """300 tokens: three flex blocks of 128, so every region is cut (DCA's chunks, Self-Extend's window, llama.cpp's
    batches start inside blocks); the shifted causal triangles (the identity's, Self-Extend's, ReRoPE's, STRING's far
    region) in the fused causal kernel or in flex attention."""
    monkeypatch.setattr(fr, "TRIANGLES_FUSED", triangles)
    model, ids = model_and_ids
    with torch.no_grad():
        with mapped(model, bind(name, params), kernel="flex"):
            flex = model(ids).logits
        with mapped(model, bind(name, params), kernel="blocks"):
            blocks = model(ids).logits
        plain = model(ids).logits
    assert torch.allclose(flex, blocks, atol=2e-5), (flex - blocks).abs().max()
    if name == "none":
        assert torch.allclose(flex, plain, atol=2e-5), (flex - plain).abs().max()
    else:
        assert (flex - plain).abs().max() > 1e-3  # the map changed something: the test can tell them apart


@pytest.mark.parametrize(("name", "params"), [("selfextend", {"G": 2, "W": 8}), ("dca", {"chunk": 12, "local": 2})])
def test_flex_decodes_through_the_cache(name, params):
    model, ids = build("llama"), torch.randint(0, 96, (1, 80), generator=torch.Generator().manual_seed(2))
    with mapped(model, bind(name, params), kernel="flex"), torch.no_grad():
        whole = model(ids).logits[0]
        cache = DynamicCache()
        steps = [model(ids[:, :56], cache=cache, use_cache=True).logits[0]]
        for t in range(56, 60):
            steps.append(model(ids[:, t:t + 1], cache=cache, use_cache=True).logits[0])
    assert torch.allclose(torch.cat(steps), whole[:60], atol=1e-4), (torch.cat(steps) - whole[:60]).abs().max()


def test_flex_in_bfloat16_is_the_fused_path_within_bf16():
    model, ids = build("llama").to(torch.bfloat16), torch.randint(0, 96, (1, 160), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        with mapped(model, bind("selfextend", {"G": 4, "W": 16}), kernel="flex"):
            flex = model(ids).logits.float()
        with mapped(model, bind("selfextend", {"G": 4, "W": 16}), kernel="blocks"):
            blocks = model(ids).logits.float()
    assert (flex - blocks).abs().max() < 0.1 * blocks.abs().max(), (flex - blocks).abs().max()


def test_a_cut_keeps_only_the_blocks_a_region_reaches():
    """Self-Extend's grouped region (d >= W) at 512 tokens: no key from the first query block; a band of W keys
    dropped at the end; the neighbour region (d < W) reaches from every query block."""
    T, W = 512, 200
    far = block_classes(lambda i, j: i - j >= W, T, T, 0, "cpu")[0]
    near = block_classes(lambda i, j: i - j < W, T, T, 0, "cpu")[0]
    q0, q1, k0, k1 = extent(far, T, T)
    assert (q0, q1, k0) == (FLEX_BLOCK, T, 0) and k1 == (T - W + FLEX_BLOCK - 1) // FLEX_BLOCK * FLEX_BLOCK
    assert extent(near, T, T) == (0, T, 0, T)
    assert extent(block_classes(lambda i, j: i < 0, T, T, 0, "cpu")[0], T, T) is None


@pytest.mark.parametrize(("Tq", "Tk"), [(300, 300), (77, 300), (256, 256), (1, 130)])
def test_block_classes_are_torchs_own(Tq, Tk, monkeypatch):
    """The chunked classes (a few query blocks per pass) give torch's `create_block_mask` blocks exactly: the same
    partial and full blocks, in the same order, for queries that are the last T_q of T_k keys (a chunk, one decoded token)."""
    monkeypatch.setattr(fr, "PASS_PAIRS", FLEX_BLOCK * FLEX_BLOCK * 3)  # passes of one query block: the seams tested
    shift = Tk - Tq
    for where in (lambda i, j: i - j < 40, lambda i, j: (i // 48) >= (j // 48) + 2, lambda i, j: (i % 7) != (j % 5)):
        some, every, rows = block_classes(where, Tq, Tk, shift, "cpu")
        ref = create_block_mask(lambda b, h, q, k: where(q + shift, k) & (q + shift >= k), None, None, Tq, Tk,
                                device="cpu", BLOCK_SIZE=FLEX_BLOCK)
        ours = as_block_mask(some, every, None, Tq, Tk)
        i, j = torch.arange(shift, Tk)[:, None], torch.arange(Tk)[None, :]
        dense = where(i, j) & (i >= j)
        assert torch.equal(rows, torch.stack([dense.sum(1), (~dense[:, 0]).long(), (dense * j).amax(1)]))
        for mine, theirs in ((ours.kv_num_blocks, ref.kv_num_blocks), (ours.full_kv_num_blocks, ref.full_kv_num_blocks)):
            assert torch.equal(mine, theirs)
        for n, mine, theirs in ((ref.kv_num_blocks, ours.kv_indices, ref.kv_indices),
                                (ref.full_kv_num_blocks, ours.full_kv_indices, ref.full_kv_indices)):
            for row, count in enumerate(n[0, 0].tolist()):
                assert torch.equal(mine[0, 0, row, :count], theirs[0, 0, row, :count])


def test_a_wrong_kernel_name_is_one_line(monkeypatch):
    monkeypatch.setenv("ROPECLI_MAP_KERNEL", "triton")
    with pytest.raises(RopeCliError, match="ROPECLI_MAP_KERNEL=triton: choose auto, flex or blocks"):
        with mapped(build("llama"), bind("rerope", {"w": 8})):
            pass


@pytest.mark.parametrize("row", ["gemma2", "gpt_oss + yarn", "phi (partial)", "gemma3 + linear (v4)", "cohere",
                                 "gemma4 (p-RoPE 0.25)", "qwen3_5 (hybrid, partial 0.5)"])
def test_flex_is_the_fused_blocks_on_the_families(row):
    """Every family's attention on the GPU path's twin: soft-capping as a score_mod (Gemma 2), sinks after the merge (gpt-oss), partial
    and interleaved rotary in the model's own layout, RoPE per layer type: flex gives the blocks' logits."""
    model = build_arch(next(a for a in ARCHS if a.name == row))
    ids = torch.randint(2, VOCAB, (1, 5 * L0), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        with mapped(model, bind("selfextend", {"G": 2, "W": 8}), kernel="flex"):
            flex = model(ids).logits
        with mapped(model, bind("selfextend", {"G": 2, "W": 8}), kernel="blocks"):
            blocks = model(ids).logits
        plain = model(ids).logits
    assert torch.allclose(flex, blocks, atol=2e-5), (flex - blocks).abs().max()
    assert (flex - plain).abs().max() > 1e-3
