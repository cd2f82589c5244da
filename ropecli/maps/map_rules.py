"""The rules by which advise sets a map's parameters for a target, as each map's source sets them, and the ranges it
searches around them (`register_map(rule=, ranges=)` in `ropecli.maps.position_maps`): `rule(Ls, T)` for a model
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


DPE_GROUPS = 8  # DPE's pair groups (config/dpe_config.yaml: dimension_groups_range [0, 8, ..., 64] of head_dim 128)
# DPE's local window in tokens: config/dpe_config.yaml's local_window_size for every model it ships (Llama-3-8B at 8k,
# Mistral-7B-v0.2 and Qwen2.5-7B at 32k, Llama-3.1-8B at 128k), run_niah_detect.sh's WINDOW_SIZE and inference.py's default
DPE_WINDOW = 1024


DPE_TOP = 48 / 64  # DPE's key pairs: topk_dim 48 of Llama 3's 64 pairs per head (README, run_niah_detect.sh TOPK=48)


def dpe_window(Ls: int) -> int:
    """DPE's window: its config's 1,024 tokens, capped at Ls/2 where the shipped length does not allow it (at the
    detection's start, G = 2T/Ls, the window and the grouped far keys, W + (T - W)/G, stay within Ls only for
    W <= Ls/2; the source ships no model under 8k)."""
    return max(1, min(DPE_WINDOW, Ls // 2))


def dpe_rule(Ls: int, T: int) -> dict[str, float]:
    """DPE's detection start (LuLuLuyi/DPE effective_length_detection/run_niah_detect.sh: every group at
    factor = 2 T / Ls, the power of two at or below it here, with its key pairs selected, --use_topk --topk 48 of 64),
    its window (`dpe_window`: config/dpe_config.yaml's 1,024): Self-Extend with that group on each head's key pairs
    until the detection moves each group (`dpe_ranges`, the one-at-a-time search)."""
    G = 2 ** max(0, (2 * T // Ls).bit_length() - 1)
    return {"W": dpe_window(Ls), **{f"G{g}": G for g in range(1, DPE_GROUPS + 1)}, "top": DPE_TOP}


def dpe_ladder(Ls: int, T: int) -> list[int]:
    """run_niah_detect.sh's detecting factors: T / length for length = T, T/2, … while length >= 1,024 (the window:
    `dpe_window`, the same 1,024 wherever Ls allows it), i.e. 1, 2, 4, … T/1,024 at a power-of-two T."""
    out, length = [], T
    while length >= dpe_window(Ls):
        out.append(T // length)
        length //= 2
    return out


def dpe_ranges(Ls: int, T: int) -> dict[str, tuple[float, float]]:
    """Each group's factor over the ladder's span, [1, T/W] on a log scale (the one-at-a-time search's even grid on
    it: its powers of two, `dpe_ladder`)."""
    top = max([2, *dpe_ladder(Ls, T)])  # a target under the window: the ladder is empty
    return {f"G{g}": (1, top) for g in range(1, DPE_GROUPS + 1)}


def dpe_budget(Ls: int, T: int) -> int:
    """Forward evaluations of DPE's detection: the start, each group over every power of two of its range, the bests
    together (the one-at-a-time search's 2 + groups x points)."""
    lo, hi = next(iter(dpe_ranges(Ls, T).values()))
    return 2 + len(dpe_ranges(Ls, T)) * (int(hi / lo).bit_length())


def lampe_sw_rule(Ls: int, T: int) -> dict[str, float]:
    """LaMPE's two-region file (scar-on/LaMPE llama_sw_map.py `forward`: head = 512 at Llama 3's 8,192, so Ls/16) with
    the paper's length-aware mapping length (U = 0: from each input's length by the Llama 3 sigmoid, scaled by Ls)."""
    return {"head": max(1, Ls // 16), "U": 0, "L": Ls}


def lampe_rule(Ls: int, T: int) -> dict[str, float]:
    """LaMPE's (scar-on/LaMPE llama_cache1.py `forward`'s defaults, head = 512 and tail = 200 at Llama 3's 8,192, in
    units of Ls) with the paper's length-aware mapping length (U = 0: from each prompt's length by `remap_uselen`'s
    sigmoid of the model's family, fit = auto; the Llama 3 one in units of Ls where LaMPE fitted none)."""
    return {"head": max(2, Ls // 16), "tail": max(1, round(200 * Ls / 8192)), "U": 0, "L": Ls, "fit": 0}


# LaMPE's per-benchmark settings, as its scripts run llama_cache1.py (`--map lampe:preset` spells none: these are
# what `ropecli methods` lists and `lampe_preset` returns): LongBench run_cmd.sh (use_length 1536, head 512, tail 200;
# pred.py uses the context's length below 1,536), RULER run_cmd.sh (head 1024, tail 200; test_ruler_llama_mix.py sets
# U per prompt by remap_uselen), InfiniteBench run_cmd_llama3.sh (head 512, tail 200, map_len 4501)
LAMPE_PRESETS = {"longbench": {"head": 512, "tail": 200, "U": 1536},
                 "ruler": {"head": 1024, "tail": 200, "U": 0},
                 "infinitebench": {"head": 512, "tail": 200, "U": 4501}}


LAMPE_FIT_NAMES = {"scaled": "LaMPE's Llama 3 fit in units of the training length (ropecli's own scaling)", "llama2": "LaMPE's Llama 2 fit",
                   "llama3": "LaMPE's Llama 3 fit", "llama3.1": "LaMPE's Llama 3.1 fit", "mistral": "LaMPE's Mistral fit"}


def lampe_family(model_type: str, base: float, train_len: int, rope_type: str | None) -> str | None:
    """The family whose `remap_uselen` fit LaMPE made (llama_cache1.py: llama2, llama3, mistral, llama3.1), read from a
    model's config as those models ship (Llama 2: llama, base 10,000, L 4,096; Llama 3: base 500,000, L 8,192; Llama
    3.1: base 500,000 with its llama3 rope block; Mistral: model_type mistral); None for any other model."""
    if model_type == "mistral":
        return "mistral"
    if model_type != "llama":
        return None
    if base == 500000 and rope_type == "llama3":
        return "llama3.1"
    if base == 500000 and train_len == 8192 and not rope_type:
        return "llama3"
    if base == 10000 and train_len == 4096 and not rope_type:
        return "llama2"
    return None
