"""Per-pair scaling schedules: one small function per method, behind one registry.

Every method maps a `Geometry` (d, base, L, k) and its own parameters to a `Schedule`: the
per-pair factors Lambda_m (m = 1 … d/2, shape (d/2,)) that divide the original inverse
frequencies, theta'_m = theta_m / Lambda_m with theta_m = base^(-2(m-1)/d), and the attention
factor that multiplies cos and sin (so attention logits scale by its square).

The formulas, all in this file (each method's function below carries its own in its summary):
    none        Lambda_m = 1                                 direct extrapolation
    pi          Lambda_m = k                                 position interpolation (transformers 'linear')
    ntk-old     Lambda_m = k^(2(m-1)/d)                      base -> base*k (Su, "RoPE is a beta-base encoding")
    ntk-aware   Lambda_m = k^(2(m-1)/(d-2))                  base -> base*k^(d/(d-2)) (bloc97)
    ntk-fixed   Lambda_m = k^(2m/d)                          Su, "Transformer Upgrade Road 11" (kexue.fm/archives/9706)
    mixed       Lambda_m = min(k, exp(a*m^b)), a*m_c^b = ln k  same article with m_c = d/2 (default): b=1 is ntk-fixed,
                                                             b=0 is pi; m_c < d/2 clamps the slow pairs at k
    dynamic     ntk-aware with k' = k*n/L - (k-1)            transformers 'dynamic', n = current length
    yarn        ramp 1 -> k by turns within L                transformers 'yarn' (Peng et al. 2023)
    llama3      1 / blend / k by wavelength against L        transformers 'llama3'
    longrope    any explicit list of d/2 factors             transformers 'longrope' long_factor
Test oracles: transformers' `ROPE_INIT_FUNCTIONS` (linear, dynamic, yarn, llama3, longrope); b=0 -> pi, b=1 -> ntk-fixed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.rope.geometry import TWO_PI, Geometry, wavelength
from ropecli.rope.schedule import REQUIRED, Param, Schedule


@dataclass(frozen=True)
class Method:
    name: str
    fn: Callable[..., tuple[np.ndarray, float]]  # (geom, **params) -> (factors, attention_factor)
    summary: str
    params: tuple[Param, ...] = ()
    current_length: str | None = None  # the parameter that is the current sequence length (dynamic NTK), if any:
    #                                    left unset, a window of n tokens runs with it set to n (as transformers does)
    title: str | None = None  # what the field calls it in prose (YaRN, NTK-aware); None: not a scaling method (none, native)


REGISTRY: dict[str, Method] = {}
ALIASES = {"linear": "pi", "ntk": "ntk-aware", "ntk-mixed": "mixed", "default": "none"}


def register(name: str, summary: str, *params: Param, current_length: str | None = None, title: str | None = None):
    """Register a method's schedule function; `title`: its name in prose (the docs' lists are made from it)."""
    def wrap(fn):
        REGISTRY[name] = Method(name, fn, summary, params, current_length, title)
        return fn

    return wrap


def _ones(geom: Geometry) -> np.ndarray:
    return np.ones(geom.n_pairs)


# --- the methods ---------------------------------------------------------------------------

@register("none", "direct extrapolation: Lambda_m = 1")
def none_schedule(geom: Geometry) -> tuple[np.ndarray, float]:
    return _ones(geom), 1.0


@register("pi", "position interpolation (transformers 'linear'): Lambda_m = k", title="PI")
def pi_schedule(geom: Geometry) -> tuple[np.ndarray, float]:
    return np.full(geom.n_pairs, geom.factor), 1.0


@register("ntk-old", "NTK-RoPE-old, base*k (Su, 'RoPE is a beta-base encoding'): Lambda_m = k^(2(m-1)/d)", title="NTK-RoPE-old")
def ntk_old_schedule(geom: Geometry) -> tuple[np.ndarray, float]:
    m = geom.pair_index()
    return geom.factor ** (2.0 * (m - 1) / geom.rotary_dim), 1.0


@register("ntk-aware", "NTK-aware (bloc97), base*k^(d/(d-2)): Lambda_m = k^(2(m-1)/(d-2)), lowest pair divided by exactly k", title="NTK-aware")
def ntk_aware_schedule(geom: Geometry) -> tuple[np.ndarray, float]:
    _need_two_pairs(geom, "ntk-aware")
    m = geom.pair_index()
    return geom.factor ** (2.0 * (m - 1) / (geom.rotary_dim - 2)), 1.0


@register("ntk-fixed", "NTK-RoPE-fixed (Su, 'Transformer Upgrade Road 11'): Lambda_m = k^(2m/d)", title="NTK-RoPE-fixed")
def ntk_fixed_schedule(geom: Geometry) -> tuple[np.ndarray, float]:
    m = geom.pair_index()
    return geom.factor ** (2.0 * m / geom.rotary_dim), 1.0


B_MAX = 16.0  # the mixed exponent's upper bound: above 1 only the clamp (critical < d/2) makes it useful


@register(
    "mixed",
    "NTK-RoPE-mixed (Su, 'Transformer Upgrade Road 11'): Lambda_m = min(k, exp(a*m^b)), a*m_c^b = ln k; with "
    "critical m_c = d/2 (default) the seed's schedule: b=1 is ntk-fixed, b=0 is pi. A smaller m_c reaches k at pair "
    "m_c and stays there (slow pairs fully interpolated, as YaRN and llama3 do); b > 1 is only meaningful with it",
    Param("b", 0.625, "exponent b in Lambda_m = exp(a*m^b)", lo=0.0, hi=B_MAX),
    Param("critical", None, "pair m_c at which Lambda reaches k and stays (default d/2)", lo=1.0),
    title="NTK-RoPE-mixed",
)
def mixed_schedule(geom: Geometry, b: float, critical: float | None) -> tuple[np.ndarray, float]:
    m = geom.pair_index()
    m_c = geom.n_pairs if critical is None else critical
    if m_c > geom.n_pairs:
        raise RopeCliError(f"mixed parameter critical={m_c:g} is beyond the last pair d/2 = {geom.n_pairs}; pick 1..{geom.n_pairs}")
    a = math.log(geom.factor) / (m_c**b)
    # a*m^b is capped at ln k before exp: past m_c it would overflow for large b (the value is k there anyway)
    return np.where(m >= m_c, geom.factor, np.exp(np.minimum(math.log(geom.factor), a * m**b))), 1.0  # exactly k from m_c on


@register(
    "dynamic",
    "dynamic NTK (transformers 'dynamic'): ntk-aware with k' = k*n/L - (k-1) at current length n",
    Param("seq_len", None, "current sequence length n (default: the target length k*L)", lo=1),
    current_length="seq_len",
    title="dynamic NTK",
)
def dynamic_schedule(geom: Geometry, seq_len: float | None) -> tuple[np.ndarray, float]:
    _need_two_pairs(geom, "dynamic")
    n = max(geom.target_len if seq_len is None else seq_len, geom.train_len)
    k_now = geom.factor * n / geom.train_len - (geom.factor - 1)
    m = geom.pair_index()
    return k_now ** (2.0 * (m - 1) / (geom.rotary_dim - 2)), 1.0


@register(
    "yarn",
    "YaRN: ramp from 1 (fast pairs) to k (slow pairs) by turns within L; attention factor 0.1*ln k + 1",
    Param("beta_fast", 32.0, "turns within L above which a pair is left alone", lo=0.0),
    Param("beta_slow", 1.0, "turns within L below which a pair is fully interpolated", lo=0.0),
    Param("mscale", None, "DeepSeek-style mscale (with mscale_all_dim)", lo=0.0),
    Param("mscale_all_dim", None, "DeepSeek-style mscale_all_dim (with mscale)", lo=0.0),
    Param("attention_factor", None, "override the attention factor", lo=0.0),
    Param("truncate", None, "0: keep the ramp's ends fractional (gpt-oss); default 1, floor/ceil as transformers", lo=0.0, hi=1.0),
    title="YaRN",
)
def yarn_schedule(geom: Geometry, beta_fast: float, beta_slow: float, mscale: float | None,
                  mscale_all_dim: float | None, attention_factor: float | None,
                  truncate: float | None) -> tuple[np.ndarray, float]:
    d, base, k = geom.rotary_dim, geom.base, geom.factor

    def correction_dim(rotations: float) -> float:  # pair index (0-based) that turns `rotations` times within L
        return d * math.log(geom.train_len / (rotations * TWO_PI)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate is None or truncate >= 0.5:  # transformers' `truncate` (default True)
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # as transformers: avoid a zero-width ramp
    ramp = np.clip((np.arange(geom.n_pairs, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    # theta' = theta * (ramp / k + (1 - ramp)): ramp 0 keeps the pair, ramp 1 divides it by k
    factors = 1.0 / (ramp / k + (1.0 - ramp))
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(k, mscale) / _yarn_mscale(k, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(k)
    return factors, float(attention_factor)


def _yarn_mscale(k: float, mscale: float = 1.0) -> float:
    return 1.0 if k <= 1 else 0.1 * mscale * math.log(k) + 1.0


@register(
    "llama3",
    "Llama 3.1: keep pairs with wavelength < L/high_freq_factor, divide those > L/low_freq_factor by k, blend between",
    Param("low_freq_factor", 1.0, "wavelengths above L/low_freq_factor are divided by k", lo=0.0),
    Param("high_freq_factor", 4.0, "wavelengths below L/high_freq_factor are kept", lo=0.0),
    title="llama3",
)
def llama3_schedule(geom: Geometry, low_freq_factor: float, high_freq_factor: float) -> tuple[np.ndarray, float]:
    if not high_freq_factor > low_freq_factor:
        raise RopeCliError(f"llama3 needs high_freq_factor > low_freq_factor (got {high_freq_factor} <= {low_freq_factor}); pass e.g. --param low_freq_factor=1 --param high_freq_factor=4")
    k, L = geom.factor, geom.train_len
    wl = wavelength(geom.inv_freq())
    smooth = (L / wl - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = 1.0 / ((1.0 - smooth) / k + smooth)
    factors = np.where(wl > L / low_freq_factor, k, np.where(wl < L / high_freq_factor, 1.0, blended))
    return factors, 1.0


@register(
    "longrope",
    "explicit per-pair factors (transformers 'longrope' long_factor), read from a JSON or CSV file",
    Param("factors", REQUIRED, "d/2 factors Lambda_m (use --factors FILE)"),
    Param("attention_factor", None, "attention factor (default sqrt(1 + ln k / ln L), as transformers)", lo=0.0),
    title="LongRoPE",
)
def longrope_schedule(geom: Geometry, factors: Any, attention_factor: float | None) -> tuple[np.ndarray, float]:
    arr = np.asarray(factors, dtype=np.float64).reshape(-1)
    if arr.size != geom.n_pairs:
        raise RopeCliError(f"longrope needs d/2 = {geom.n_pairs} factors, the file has {arr.size}; export one with `ropecli schedule --d {geom.rotary_dim} --csv`")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise RopeCliError("longrope factors must be finite and positive; check the factor file")
    if attention_factor is None:
        k = geom.factor
        attention_factor = 1.0 if k <= 1 else math.sqrt(1 + math.log(k) / math.log(geom.train_len))
    return arr, float(attention_factor)


@register(
    "native",
    "the model as shipped: the schedule its config carries (llama3, yarn, longrope, linear, dynamic …), unpatched; "
    "plain RoPE (Lambda_m = 1) for a model that ships none",
    Param("seq_len", None, "request length n (default: the target length)", lo=1),
    current_length="seq_len",
)
def native_schedule(geom: Geometry, seq_len: float | None) -> tuple[np.ndarray, float]:
    return (_ones(geom), 1.0) if geom.shipped is None else geom.shipped.at(geom.rotary_dim, geom.base, int(seq_len or geom.target_len))


def _need_two_pairs(geom: Geometry, name: str) -> None:
    if geom.rotary_dim < 4:
        raise RopeCliError(f"{name} divides by d-2 and needs d >= 4 (got d={geom.rotary_dim}); pass a larger --d")

# --- lookup and evaluation ------------------------------------------------------------------
def method_names() -> list[str]:
    return list(REGISTRY)


def resolve_method(name: str) -> Method:
    """The method of a name or alias; `native+METHOD` (composed on the shipped schedule) is METHOD's."""
    key = name.strip().lower().removeprefix("native+")
    key = ALIASES.get(key, key)
    if key not in REGISTRY:
        raise RopeCliError(f"unknown method '{name}'; choose one of: {', '.join(REGISTRY)} (aliases: {', '.join(ALIASES)})")
    return REGISTRY[key]


def resolve_params(name: str, params: dict[str, Any]) -> tuple[Method, dict[str, Any]]:
    """The method and its full parameter dict in the method's order: given values checked against its parameters
    and bounds, missing ones filled with their defaults (None = optional); `compute_schedule` and spec call it."""
    method = resolve_method(name)
    known = {p.name: p for p in method.params}
    if unknown := set(k for k, v in params.items() if v is not None) - set(known):
        raise RopeCliError(f"method '{method.name}' takes no parameter {', '.join(sorted(unknown))} "
                           f"(it accepts: {', '.join(known) or 'none'})")
    resolved: dict[str, Any] = {}
    for p in method.params:
        value = params.get(p.name)
        if value is None:
            if p.default is REQUIRED:
                raise RopeCliError(f"method '{method.name}' needs its parameter '{p.name}' ({p.help}); pass "
                                   + ("--factors FILE" if p.name == "factors" else f"--{p.name.replace('_', '-')}"))
            value = p.default
        if value is not None and p.name != "factors":
            value = float(value)
            if (p.lo is not None and value < p.lo) or (p.hi is not None and value > p.hi):
                lo, hi = ("-inf" if p.lo is None else f"{p.lo:g}"), ("inf" if p.hi is None else f"{p.hi:g}")
                raise RopeCliError(f"{method.name} parameter {p.name}={value:g} is outside [{lo}, {hi}]; pick a value in that range")
        resolved[p.name] = value
    return method, resolved


def compute_schedule(name: str, geom: Geometry, **params: Any) -> Schedule:
    """Validate `params` against the method's parameter list, fill defaults, then run it."""
    method, resolved = resolve_params(name, params)
    with np.errstate(divide="ignore", invalid="ignore"):  # p-RoPE's zero pairs: infinite wavelengths; shown unscaled
        factors, attention = method.fn(geom, **resolved)
    (factors := np.array(factors, dtype=np.float64))[geom.zero_pairs] = 1.0
    return Schedule(method.name, factors, float(attention), resolved)
