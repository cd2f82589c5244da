"""From command-line flags to what gets computed: the one path every command takes (no torch).

- `specs_from_flags`: methods, b values, `--param KEY=VALUE` and `--factors FILE` become `Spec`s,
  one per method (one per b for methods taking b, one per log-n mode). Every given parameter must
  fit at least one chosen method.
- `geometry_from_flags`: d, base and L from the flags, read from `--model`'s config where given
  (explicit flags win), and k from `--k` / `--target-len`.
"""

from __future__ import annotations

from ropecli.errors import RopeCliError
from ropecli.rope.geometry import Geometry
from ropecli.rope.methods import REGISTRY, Method, resolve_method
from ropecli.rope.spec import Spec, make_spec

DEFAULT_FACTOR = 8.0  # k when neither --k nor a target length is given
DEFAULT_GEOMETRY = {"rotary_dim": 128, "base": 10000.0, "train_len": 4096}  # LLaMA-2-7B's, without --model


def parse_params(pairs: list[str] | None) -> dict[str, float]:
    """`--param KEY=VALUE` (repeatable) as a dict of floats; dashes in keys become underscores."""
    out: dict[str, float] = {}
    for item in pairs or []:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise RopeCliError(f"--param '{item}' is not KEY=VALUE; write e.g. --param beta_fast=32")
        try:
            out[key] = float(value)
        except ValueError:
            raise RopeCliError(f"--param {key}: '{value}' is not a number; write e.g. --param {key}=1.5") from None
    return out


def split_methods(methods: list[str] | None, default: str) -> list[str]:
    """Repeated and comma-separated `--method` values as one list; `default` when none is given."""
    names = [n.strip() for item in (methods or [default]) for n in item.split(",") if n.strip()]
    if not names:
        raise RopeCliError(f"no method given; pass e.g. --method {default}")
    return names


def check_params_fit(methods: list[Method], keys: list[str]) -> None:
    """Every given parameter must belong to at least one of the chosen methods."""
    accepted = {p.name for m in methods for p in m.params}
    for key in keys:
        if key not in accepted:
            owners = [m.name for m in REGISTRY.values() if any(p.name == key for p in m.params)]
            hint = f"it belongs to {', '.join(owners)}" if owners else "no method takes it"
            raise RopeCliError(f"parameter '{key}' does not apply: it fits none of the chosen methods "
                               f"({', '.join(m.name for m in methods)}); {hint}")


def specs_from_flags(methods: list[str] | None, bs: list[float] | None = None, param: list[str] | None = None,
                     factors_file: str | None = None, *, default: str = "mixed", factor: float | None = None,
                     log_n_modes: tuple[bool, ...] = (False,)) -> list[Spec]:
    """One Spec per method, per b for methods that take b, per log-n mode, in that order."""
    params = parse_params(param)
    chosen = [resolve_method(n) for n in split_methods(methods, default)]
    check_params_fit(chosen, [*params, *(["b"] if bs else []), *(["factors"] if factors_file else [])])
    factors = None
    if factors_file:
        from ropecli.rope.factor_files import read_factors

        factors = read_factors(factors_file)
    specs = []
    for method in chosen:
        takes = {p.name for p in method.params}
        kwargs = {k: v for k, v in params.items() if k in takes}
        if "factors" in takes:
            kwargs["factors"] = factors
        for b in (bs or [None]) if "b" in takes else [None]:
            for log_n in log_n_modes:
                specs.append(make_spec(method.name, {**kwargs, **({"b": b} if b is not None else {})},
                                       factor=factor, log_n=log_n))
    return specs


def resolve_factor(train_len: int, k: float | None, target_len: int | None, default: float = DEFAULT_FACTOR) -> float:
    """k from `--k` or `--target-len` (target / L); `default` when neither is given."""
    if k is not None and target_len is not None:
        raise RopeCliError("--k and --target-len both set the factor; pass only one of them")
    if target_len is not None:
        if target_len < train_len:
            raise RopeCliError(f"--target-len {target_len} is below --train-len {train_len}; nothing to extend (k would be < 1)")
        return target_len / train_len
    return default if k is None else k


def geometry_from_flags(rotary_dim: int | None, base: float | None, train_len: int | None, k: float | None,
                        target_len: int | None, model: str | None = None, gguf_file: str | None = None,
                        rope_layers: str | None = None):
    """(Geometry, ModelRope or None): d, base, L from `model`'s config where given, else the defaults
    of DEFAULT_GEOMETRY; an explicit flag overrides either."""
    rope = None
    fallback = dict(DEFAULT_GEOMETRY)
    if model is not None or gguf_file is not None:
        from ropecli.models.config import read_rope_config

        rope = read_rope_config(model, gguf_file=gguf_file, rope_layers=rope_layers)
        fallback = {"rotary_dim": rope.rotary_dim, "base": rope.base, "train_len": rope.train_len}
    elif rope_layers is not None:
        raise RopeCliError("--rope-layers chooses among a model's RoPE layer types; pass --model too")
    d = fallback["rotary_dim"] if rotary_dim is None else rotary_dim
    b = fallback["base"] if base is None else base
    L = fallback["train_len"] if train_len is None else train_len
    if L <= 0:
        raise RopeCliError(f"training length L={L} must be positive; pass e.g. --train-len 4096")
    return Geometry(d, b, L, resolve_factor(L, k, target_len)), rope
