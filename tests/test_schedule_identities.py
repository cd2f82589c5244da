"""The seeds' identities between methods, and the mixed family's constraints."""

import numpy as np
import pytest

from ropecli.errors import RopeCliError
from ropecli.rope.geometry import Geometry, critical_pair
from ropecli.rope.methods import compute_schedule, method_names

GEOMS = [Geometry(d, base, L, k) for d in (4, 64, 128) for base in (1e4, 1e6) for L in (512, 4096) for k in (1.0, 2.0, 8.0, 32.0)]


@pytest.mark.parametrize("geom", GEOMS, ids=str)
def test_mixed_endpoints(geom):
    np.testing.assert_allclose(compute_schedule("mixed", geom, b=1.0).factors, compute_schedule("ntk-fixed", geom).factors, rtol=1e-12)
    np.testing.assert_allclose(compute_schedule("mixed", geom, b=0.0).factors, compute_schedule("pi", geom).factors, rtol=1e-12)


@pytest.mark.parametrize("geom", GEOMS, ids=str)
@pytest.mark.parametrize("b", [0.0, 0.1, 0.3, 0.625, 0.9, 1.0])
def test_mixed_constraints(geom, b):
    s = compute_schedule("mixed", geom, b=b)
    assert s.factors[-1] == pytest.approx(geom.factor, rel=1e-12)  # Lambda_{d/2} = k
    lam = s.lambdas
    assert np.all(np.diff(lam) <= 1e-12)  # lambda_1 >= lambda_2 >= ...
    assert np.all(lam >= 1 - 1e-12)
    np.testing.assert_allclose(np.cumprod(lam), s.factors, rtol=1e-12)  # Lambda_m = lambda_1 ... lambda_m


def test_mixed_default_b_is_the_papers():
    assert compute_schedule("mixed", Geometry(128, 1e4, 4096, 8)).params["b"] == 0.625


@pytest.mark.parametrize("geom", [g for g in GEOMS if g.rotary_dim >= 4], ids=str)
def test_ntk_aware_divides_lowest_pair_by_k(geom):
    s = compute_schedule("ntk-aware", geom)
    assert s.factors[0] == 1.0
    assert s.factors[-1] == pytest.approx(geom.factor, rel=1e-12)
    # base * k^(d/(d-2)) in closed form
    new_base = geom.base * geom.factor ** (geom.rotary_dim / (geom.rotary_dim - 2))
    np.testing.assert_allclose(s.scaled_inv_freq(geom), new_base ** (-np.arange(0, geom.rotary_dim, 2) / geom.rotary_dim), rtol=1e-12)


def test_ntk_old_is_base_times_k():
    geom = Geometry(128, 1e4, 4096, 8)
    s = compute_schedule("ntk-old", geom)
    np.testing.assert_allclose(s.scaled_inv_freq(geom), (1e4 * 8) ** (-np.arange(0, 128, 2) / 128), rtol=1e-12)


def test_ntk_fixed_has_the_extra_lambda():
    geom = Geometry(128, 1e4, 4096, 8)
    lam = 8 ** (2 / 128)
    np.testing.assert_allclose(compute_schedule("ntk-fixed", geom).factors, compute_schedule("ntk-old", geom).factors * lam, rtol=1e-12)


def test_dynamic_equals_ntk_aware_when_k_prime_is_k():
    geom = Geometry(64, 1e4, 2048, 4)
    # k' = k*n/L - (k-1) = 4 when n = L*(2k-1)/k
    n = 2048 * 7 / 4
    np.testing.assert_allclose(compute_schedule("dynamic", geom, seq_len=n).factors, compute_schedule("ntk-aware", geom).factors, rtol=1e-12)
    assert np.all(compute_schedule("dynamic", geom, seq_len=1000).factors == 1.0)  # within L nothing changes


@pytest.mark.parametrize("name", method_names())
def test_k_one_changes_nothing(name):
    geom = Geometry(64, 1e4, 2048, 1.0)
    kwargs = {"factors": np.ones(32)} if name == "longrope" else {}
    s = compute_schedule(name, geom, **kwargs)
    np.testing.assert_allclose(s.factors, 1.0, rtol=1e-12)
    assert s.attention_factor == 1.0


def test_critical_pair():
    geom = Geometry(128, 1e4, 4096, 8)
    inv = geom.inv_freq()
    m = critical_pair(geom)
    assert 4096 * inv[m - 1] < 2 * np.pi <= 4096 * inv[m - 2]


@pytest.mark.parametrize("kwargs,fragment", [
    ({"rotary_dim": 127}, "even"), ({"rotary_dim": 0}, "even"), ({"factor": 0.5}, ">= 1"), ({"base": 1.0}, "greater than 1"),
    ({"train_len": 0}, "positive"),
])
def test_bad_geometry(kwargs, fragment):
    args = {"rotary_dim": 128, "base": 1e4, "train_len": 4096, "factor": 8.0, **kwargs}
    with pytest.raises(RopeCliError, match=fragment):
        Geometry(**args)


def test_bad_method_inputs():
    geom = Geometry(128, 1e4, 4096, 8)
    with pytest.raises(RopeCliError, match="unknown method"):
        compute_schedule("ntk-magic", geom)
    with pytest.raises(RopeCliError, match=r"outside \[0, 16\]"):
        compute_schedule("mixed", geom, b=17)
    with pytest.raises(RopeCliError, match="beyond the last pair"):
        compute_schedule("mixed", geom, b=2, critical=65)
    with pytest.raises(RopeCliError, match="needs its parameter 'factors'"):
        compute_schedule("longrope", geom)
    with pytest.raises(RopeCliError, match="takes no parameter"):
        compute_schedule("pi", geom, b=0.5)
    with pytest.raises(RopeCliError, match="64 factors"):
        compute_schedule("longrope", geom, factors=[1.0, 2.0])


# --- the clamped mixed family: Lambda_m = min(k, exp(a*m^b)), a*m_c^b = ln k ----------------------

@pytest.mark.parametrize("geom", GEOMS[::3], ids=str)
def test_clamped_mixed_with_critical_d_over_2_is_the_seeds_schedule(geom):
    for b in (0.0, 0.3, 0.625, 1.0):
        np.testing.assert_array_equal(compute_schedule("mixed", geom, b=b, critical=geom.n_pairs).factors,
                                      compute_schedule("mixed", geom, b=b).factors)
    np.testing.assert_allclose(compute_schedule("mixed", geom, b=1.0, critical=geom.n_pairs).factors,
                               compute_schedule("ntk-fixed", geom).factors, rtol=1e-12)
    np.testing.assert_allclose(compute_schedule("mixed", geom, b=0.0, critical=2).factors,
                               compute_schedule("pi", geom).factors, rtol=1e-12)  # b = 0 is PI whatever m_c


def test_clamped_mixed_reaches_k_at_the_critical_pair_and_stays():
    geom = Geometry(64, 1e4, 256, 8.0)  # the built-in model's geometry at 8 L
    lam = compute_schedule("mixed", geom, b=4.0, critical=16).factors
    # hand computed: a = ln 8 / 16^4 = 3.1728e-05; Lambda_8 = exp(a * 8^4) = 8^(1/16) = 1.1387886347566916
    assert lam[7] == pytest.approx(1.1387886347566916, rel=1e-12)
    assert lam[15] == pytest.approx(8.0, rel=1e-12) and np.all(lam[15:] == 8.0)
    assert np.all(np.diff(lam) >= 0) and lam[0] == pytest.approx(8 ** (1 / 16**4), rel=1e-12)
