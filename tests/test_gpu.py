"""The CUDA path: the same numbers as the CPU twin (skipped without CUDA; CI has none)."""

import pytest
import torch

from ropecli.models.patch import apply_schedule, find_rotary_slots, restore
from ropecli.models.scoring import naive_window_nll, window_nll
from tiny_models import L, VOCAB, build

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_cuda_matches_cpu(family):
    import numpy as np

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
                                              ("rerope", {"w": 24}), ("selfextend-llamacpp", {"G": 4, "W": 32})])
def test_a_map_on_cuda_is_its_cpu_twin(name, params):
    """Issue 58: on CUDA a map runs compiled flex attention (kernel auto); its logits are the CPU blocks' (fp32)."""
    from ropecli.models.mapped_attention import mapped

    model, ids = build("llama"), torch.randint(0, VOCAB, (1, 300), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        with mapped(model, name, params, kernel="blocks"):
            cpu = model(ids).logits
        model.cuda()
        with mapped(model, name, params, kernel="auto"):
            gpu = model(ids.cuda()).logits.cpu()
    assert torch.allclose(gpu, cpu, atol=1e-3), (gpu - cpu).abs().max()
