"""The rules by which advise sets a map's parameters for a target, as each map's source sets them, and the ranges it
searches around them (`register_map(rule=, ranges=)` in `ropecli.rope.position_maps`): `rule(Ls, T)` for a model
shipped at Ls and a longest target T."""

from __future__ import annotations

from ropecli.errors import RopeCliError


def selfextend_rule(Ls: int, T: int) -> dict[str, float]:
    """W = Ls/4 rounded down to a multiple of G (llama.cpp's -gaw must be one), G the smallest group with
    floor((T - 1)/G) + W - floor(W/G) <= Ls - 1: the farthest pair's rotation distance within the trained range (Jin et
    al. 2024, section 3: "the group size G ... such that the maximum relative position after grouping does not exceed
    the pretraining context window")."""
    for G in range(2, T + 1):
        W = max(G, (Ls // 4) // G * G)
        if (T - 1) // G + W - W // G <= Ls - 1:
            return {"G": G, "W": W}
    raise RopeCliError(f"selfextend: no group size keeps a {T}-token window within Ls = {Ls}")


def selfextend_ranges(Ls: int, T: int) -> dict[str, tuple[float, float]]:
    """G in [2, 4 G_rule], W in [Ls/16, Ls/2]."""
    return {"G": (2, max(4, 4 * selfextend_rule(Ls, T)["G"])), "W": (max(1, Ls // 16), Ls // 2)}


def dca_rule(Ls: int, T: int) -> dict[str, float]:
    """HKUNLP/ChunkLlama's defaults: chunk = 3 Ls/4, local = Ls/16 (every rotation distance below chunk)."""
    return {"chunk": 3 * Ls // 4, "local": max(1, Ls // 16)}
