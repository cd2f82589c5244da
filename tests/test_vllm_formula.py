"""vLLM's NTK-RoPE (`rope_type: "ntk"`, with and without `mixed_b`) against ropecli's ntk-fixed and mixed(b).

`vllm_inv_freq` is vLLM's code as written in vllm/model_executor/layers/rotary_embedding/ntk_scaling_rope.py
(`NTKScalingRotaryEmbedding._compute_inv_freq`, with `RotaryEmbedding._compute_inv_freq` for the base
part), in torch like the original; vLLM itself is not installed here (it needs CUDA to import its kernels)."""

import math

import numpy as np
import pytest
import torch

from ropecli.export.runtimes.vllm import ntk_factors
from ropecli.rope.geometry import Geometry
from ropecli.spec import make_spec


def vllm_inv_freq(base: float, rotary_dim: int, scaling_factor: float, mixed_b: float | None) -> torch.Tensor:
    def base_inv_freq(b):  # RotaryEmbedding._compute_inv_freq
        return 1.0 / (b ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))

    b = base * (scaling_factor if mixed_b is None else 1)
    inv_freq = base_inv_freq(b)
    if mixed_b is None:
        inv_freq = inv_freq / scaling_factor ** (2 / rotary_dim)
    else:
        a = torch.tensor(scaling_factor).log() / (rotary_dim / 2) ** mixed_b
        lambda_1_m = (a * torch.arange(1, rotary_dim // 2 + 1).float() ** mixed_b).exp()
        inv_freq = inv_freq / lambda_1_m
    return inv_freq


@pytest.mark.parametrize("d, base, k", [(64, 1e5, 2.0), (128, 1e4, 8.0), (128, 5e5, 4.0), (80, 1e4, 16.0)])
@pytest.mark.parametrize("mixed_b", [None, 0.0, 0.5, 0.625, 1.0])
def test_vllm_ntk_is_ropecli_ntk_fixed_or_mixed(d, base, k, mixed_b):
    geom = Geometry(d, base, 4096, k)
    spec = make_spec("ntk-fixed") if mixed_b is None else make_spec("mixed", {"b": mixed_b})
    ours = spec.schedule(geom).factors
    unscaled = 1.0 / (base ** (np.arange(0, d, 2) / d))
    theirs = unscaled / vllm_inv_freq(base, d, k, mixed_b).double().numpy()  # float32 in vLLM: compare at 1e-5
    np.testing.assert_allclose(theirs, ours, rtol=2e-5)
    np.testing.assert_allclose(ntk_factors(d, k, mixed_b), ours, rtol=1e-12)  # verify's twin, float64
    assert ours[-1] == pytest.approx(k) and (mixed_b != 0.0 or np.allclose(ours, k))
    assert math.isclose(ours[0], k ** (2 / d)) or mixed_b is not None
