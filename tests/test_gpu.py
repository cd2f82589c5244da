"""The CUDA path: the same numbers as the CPU twin (skipped without CUDA; CI has none)."""

import numpy as np
import pytest
import torch

import ropecli.maps.flex_regions as fr
from ropecli.maps.mapped_attention import mapped
from ropecli.maps.position_maps import bind
from ropecli.models.chunked_scoring import naive_window_nll, window_nll
from ropecli.models.patch import apply_schedule, find_rotary_slots, restore

from tiny_models import VOCAB, L, build

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_cuda_matches_cpu(family):
    model = build(family)
    ids = torch.randint(0, VOCAB, (1, 3 * L), generator=torch.Generator().manual_seed(0))
    slots = find_rotary_slots(model)
    factors = np.linspace(1.0, 4.0, slots[0].rotary_dim // 2)
    for s in slots:
        apply_schedule(s, factors, 1.1)
    cpu, n, _ = window_nll(model, ids, chunk_tokens=17)
    model.cuda()
    gpu, _, _ = window_nll(model, ids.cuda(), chunk_tokens=17)
    ref, _ = naive_window_nll(model, ids.cuda())
    assert gpu / n == pytest.approx(cpu / n, rel=1e-4)
    assert gpu == pytest.approx(ref, rel=1e-4)
    for s in slots:
        restore(s)


@pytest.mark.parametrize(("name", "params"), [("none", {}), ("selfextend", {"G": 4, "W": 16}), ("dca", {"chunk": 48, "local": 8}),
                                              ("rerope", {"w": 24}), ("selfextend-llamacpp", {"G": 4, "W": 32}),
                                              ("dpe", {"W": 16, **{f"G{g}": 2 ** (g % 4) for g in range(1, 9)}})])
def test_a_map_on_cuda_is_its_cpu_twin(name, params):
    """On CUDA a map runs compiled flex attention (kernel auto); its logits are the CPU blocks' (fp32)."""
    model, ids = build("llama"), torch.randint(0, VOCAB, (1, 300), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        with mapped(model, bind(name, params), kernel="blocks"):
            cpu = model(ids).logits
        model.cuda()
        with mapped(model, bind(name, params), kernel="auto"):
            gpu = model(ids.cuda()).logits.cpu()
    assert torch.allclose(gpu, cpu, atol=1e-3), (gpu - cpu).abs().max()


def test_dpes_key_pairs_on_cuda_are_their_cpu_twin():
    """DPE with half of each head's pairs selected (keys repeated per query head) in compiled flex on CUDA
    against the CPU blocks."""
    model, ids = build("llama"), torch.randint(0, VOCAB, (1, 300), generator=torch.Generator().manual_seed(6))
    cfg = model.config
    P = cfg.hidden_size // cfg.num_attention_heads // 2
    gen = torch.Generator().manual_seed(7)
    selection = {n: (torch.rand(cfg.num_attention_heads, P, generator=gen).argsort(dim=1) < P // 2).numpy()
                 for n in range(cfg.num_hidden_layers)}
    params = {"W": 16, **{f"G{g}": 2 ** (g % 4) for g in range(1, 9)}, "top": 0.5}
    with torch.no_grad():
        with mapped(model, bind("dpe", params), kernel="blocks", selection=selection):
            cpu = model(ids).logits
        model.cuda()
        with mapped(model, bind("dpe", params), kernel="auto", selection=selection):
            gpu = model(ids.cuda()).logits.cpu()
    assert torch.allclose(gpu, cpu, atol=1e-3), (gpu - cpu).abs().max()


@pytest.mark.parametrize(("name", "params"), [("none", {}), ("selfextend", {"G": 4, "W": 16}), ("rerope", {"w": 24}),
                                              ("string", {"S": 40, "W": 8}), ("dca", {"chunk": 48, "local": 8})])
@pytest.mark.parametrize("triangles", [True, False], ids=["triangles-fused", "all-flex"])
def test_a_map_in_bf16_on_cuda_is_its_fp32_cpu_twin(name, params, triangles, monkeypatch):
    """Bf16 on CUDA, the shifted causal triangles in FlashAttention-2 (its
    log-sum-exp merged with flex's) or in flex. Off the fp32 CPU blocks by no more than 3x what bf16 costs the unpatched
    model (measured here), while the map itself moves the logits far more than that."""
    monkeypatch.setattr(fr, "TRIANGLES_FUSED", triangles)
    model, ids = build("llama"), torch.randint(0, VOCAB, (1, 300), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        plain32 = model(ids).logits
        with mapped(model, bind(name, params), kernel="blocks"):
            cpu = model(ids).logits
        model.to(torch.bfloat16).cuda()
        plain16 = model(ids.cuda()).logits.float().cpu()
        with mapped(model, bind(name, params), kernel="auto"):
            gpu = model(ids.cuda()).logits.float().cpu()
    noise = (plain16 - plain32).abs().max()
    assert (gpu - cpu).abs().max() <= 3 * noise + 1e-3, ((gpu - cpu).abs().max(), noise)
    if name != "none":
        assert (cpu - plain32).abs().max() > 3 * noise  # the map moves the logits more than the tolerance
