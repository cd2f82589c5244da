"""The rules by which advise sets a map's parameters for a target, as each map's source sets them, and the ranges it
searches around them (`register_map(rule=, ranges=)` in `ropecli.maps.position_maps`): `rule(Ls, T)` for a model
shipped at Ls and a longest target T. And LaMPE's rules for U, its mapping length, per prompt (its fits, its
LongBench run's cap) and its committed runs as presets (`LAMPE_PRESETS`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


# LaMPE's mapping-length sigmoids, U = int(c / (1 + exp(-(a T + b)))) of the prompt's T tokens (scar-on/LaMPE
# llama_cache1.py:724-755 `remap_uselen`, at 4e3c91f): {family: (a, b, c, the length below which U = 1,536 instead;
# 0: none, Llama 3.1's fit has no floor)}
LAMPE_SIGMOIDS = {"llama2": (8.673006440952035e-05, -0.648012322406978, 2489.1055552214357, 8192),
                  "llama3": (0.00010493097327094324, -2.466638011138158, 6204.409324666837, 8192),
                  "llama3.1": (4.505261149632588e-05, -2.788576860718702, 82358.52413056031, 0),
                  "mistral": (0.00010493097327094324, -2.466638011138158, 24576, 8192)}


def remap_uselen(T: int, family: str) -> int:
    """LaMPE's U for a T-token prompt by the sigmoid it fitted for `family` (llama_cache1.py:724-755)."""
    a, b, c, below = LAMPE_SIGMOIDS[family]
    return 1536 if T < below else int(c / (1 + np.exp(-(a * T + b))))


def scaled_uselen(T: int, L: int) -> int:
    """ropecli's own U for a model LaMPE fitted none: the Llama 3 fit in units of the training length L (T and U
    scaled by L / 8,192, so exactly the fit at Llama 3's L, its floor 1,536 = 3L/16 below L)."""
    a, b, c, _ = LAMPE_SIGMOIDS["llama3"]
    return 3 * L // 16 if T < L else int(c / 8192 * L / (1 + np.exp(-(a * 8192 * T / L + b))))


def longbench_uselen(T: int, U: int) -> int:
    """LaMPE's LongBench U for a T-token prompt: the prompt's length below U, U from there (scar-on/LaMPE
    longbench_eval/LongBench-main/pred.py:93-97: use_length = context_length below 1,536, else 1,536), so a shorter
    prompt keeps its far keys at about their true positions where a fixed U would squeeze them."""
    return min(T, U)


def lampe_mapping_length(T: int, U: float, L: float, fit: str) -> int | None:
    """U as a LaMPE map runs it on a T-token input: U where set; U = 0: the sigmoid LaMPE fitted for `fit`'s family
    (`remap_uselen`), else ropecli's scaled fit at the training length L (`scaled_uselen`); None where that needs an
    L and none was given."""
    if U:
        return int(U)
    if fit in LAMPE_SIGMOIDS:
        return remap_uselen(T, fit)
    return scaled_uselen(T, int(L)) if L else None


LAMPE_FITS = ("auto", "scaled", "llama2", "llama3", "llama3.1", "mistral")  # `lampe`'s fit, by index


@dataclass(frozen=True)
class LampePreset:
    """One committed LaMPE run (scar-on/LaMPE at 4e3c91f) as ropecli's map `lampe-NAME` (`position_maps` registers
    each): the ropecli map whose regions the run's file computes, its parameters as the run sets them, how the run
    sets U per prompt, and the run itself, its script and the lines that set them."""
    regions: str  # "lampe" (llama_cache1.py's three regions) or "lampe-sw" (llama_sw_map.py's two)
    values: dict  # the map's parameters as the run sets them (the rest at the map's defaults)
    U_rule: str  # "fixed" (U at every length), "fit" (U = 0: remap_uselen of the prompt's length), "min(T, U)"
    run: str  # "BENCHMARK run (SCRIPT → FILE:LINES, the file it runs)"

    @property
    def summary(self) -> str:
        """Its one line in `ropecli methods`: the run, then what it runs."""
        v = self.values
        U = (f"U = {v['U']:,} at every length" if self.U_rule == "fixed" else
             f"U from the prompt's length by {LAMPE_FIT_NAMES[LAMPE_FITS[v['fit']]]} (remap_uselen)"
             if self.U_rule == "fit" else
             f"U = min(T, {v['U']:,}) of the prompt's T tokens (the prompt's length below {v['U']:,})")
        return (f"LaMPE's {self.run}: {'three' if self.regions == 'lampe' else 'two'} regions ({self.regions}), "
                f"head {v['head']:,}" + (f", tail {v['tail']:,}" if "tail" in v else "") + f", {U}")


# LaMPE's committed runs, each a map of its own (`lampe-NAME`). The RULER runs differ by model: Llama 3's
# (ruler/run_cmd.sh:38, script test_ruler_llama.py) loads llama_sw_map.py, the two-region file, with use_length 3,072
# at every length (test_ruler_llama.py:232-245: `--method map` passes args.use_length and main() never remaps it; the
# --tail 200 it passes is a parameter llama_sw_map.py's forward never reads); Mistral's (ruler/run_cmd_1.sh:38,
# test_ruler_mistral.py) loads llama_cache1.py and sets U per prompt by its Mistral fit (test_ruler_mistral.py:94-99:
# remap_uselen(prompt_length, "mistral") over the --use_length 3072). Both scripts keep these as extra_args["map"]
# (their committed `methods` lists run dca and ori). LongBench (longbench_eval/LongBench-main/run_cmd.sh:12-16 →
# pred.py:93-97) and InfiniteBench (InfiniteBench/run_cmd_llama3.sh:35 → src/test_infbench_llama_cw.py:125-131) run
# llama_cache1.py at head 512, tail 200.
LAMPE_PRESETS = {
    "longbench": LampePreset("lampe", {"head": 512, "tail": 200, "U": 1536}, "min(T, U)",
                             "LongBench run (longbench_eval/LongBench-main/run_cmd.sh → pred.py:93-97, llama_cache1.py)"),
    "ruler-llama3": LampePreset("lampe-sw", {"head": 1024, "U": 3072}, "fixed",
                                "Llama 3 RULER run (ruler/run_cmd.sh:38 → test_ruler_llama.py:232-245, llama_sw_map.py)"),
    "ruler-mistral": LampePreset("lampe", {"head": 2048, "tail": 200, "U": 0, "fit": LAMPE_FITS.index("mistral")},
                                 "fit", "Mistral RULER run (ruler/run_cmd_1.sh:38 → test_ruler_mistral.py:94-99, "
                                 "llama_cache1.py)"),
    "infinitebench": LampePreset("lampe", {"head": 512, "tail": 200, "U": 4501}, "fixed",
                                 "InfiniteBench run (InfiniteBench/run_cmd_llama3.sh:35 → src/test_infbench_llama_cw.py:"
                                 "125-131, llama_cache1.py)")}

# a preset name ropecli had that no committed run matches: the one line it fails in, naming what replaced it (the
# old `lampe-ruler` was llama_cache1.py's three regions at head 1,024 with U from the model family's fit, which
# neither RULER run is)
LAMPE_RENAMED = {"lampe-ruler": "LaMPE's RULER runs differ by model: lampe-ruler-llama3 (ruler/run_cmd.sh, "
                                "llama_sw_map.py's two regions, head 1,024, U = 3,072) or lampe-ruler-mistral "
                                "(run_cmd_1.sh, three regions, head 2,048, U by the Mistral fit); its old settings are "
                                "lampe:head=1024"}


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
