"""Position maps at the attention: for a query at position i and a key at j (d = i - j), which rotation positions each
gets, region by region. RoPE's score depends only on the difference of the two rotation positions, so a map is a
relative position rel(i, j) made of regions, and in each region the query's position depends on i alone and the key's
on j alone: one rotation of the queries and one of the keys per region, scores merged under the regions' masks before
one softmax (`ropecli.maps.mapped_attention`). A map composes with any frequency schedule (the frequencies say how
fast each pair turns, the map at which positions). The maps, with their sources:

    none         one region: (i, j), the model as it is
    selfextend   Self-Extend (Jin et al., ICML 2024, datamllab/LongLM): d < W true positions; d >= W the query at
                 floor(i/G) + W - floor(W/G), the key at floor(j/G) (reach about (L - W) G + W); floor(W/G) for every
                 G and W, as the authors' fix 715c1e3 and their decoding have it (their README's G = 5, W = 1,024 too)
    rerope       ReRoPE (Su, kexue.fm 9708): relative position min(d, w): beyond w the query at w, the key at 0
    leaky-rerope Leaky ReRoPE (Su; bojone/rerope leaky_rerope_patch.py): w + (d - w)/k beyond w: the query at
                 i/k + w - w/k, the key at j/k
    dca          Dual Chunk Attention (An et al., ICML 2024; HKUNLP/ChunkLlama): chunks of c = chunk - local positions;
                 intra-chunk, successive-chunk and inter-chunk maps keep every relative position below `chunk`
    string       STRING (An et al., ICLR 2025, HKUNLP/STRING): d < S true; d >= S shifted to d - S + W (the well-trained
                 positions overwrite the rarely trained tail), logits scaled by t^2 (t = 0.1 ln 2 + 1 on cos and sin)
    lampe        LaMPE (ACL 2026, scar-on/LaMPE llama_cache1.py): d <= head true; the far keys squeezed onto [0, U]
                 over the prompt's length (U from it by the model family's sigmoid), the last queries reading the
                 first ~tail keys at fine positions; logits x t^2; fixed from the prompt while decoding
    lampe-sw     LaMPE's two-region file (llama_sw_map.py): the window and the squeezed far keys, per length
    lampe-NAME   LaMPE's committed runs (`map_rules.LAMPE_PRESETS`): longbench, ruler-llama3 (lampe-sw),
                 ruler-mistral, infinitebench, each with its run's regions, head, U rule and fit

Each map is one small registered function of its bounded parameters returning its regions; the region functions take
integer position arrays of numpy or torch alike (the same code serves the numpy twin and the model).
A bound map's checks before any forward pass (`check_window`, `check_map`): its regions can be built for the lengths
asked, and its window does not already reach the whole sequence (where the "map" would be the model itself).
Numpy only here (`ropecli freqs` and the tests import it without torch).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.maps.map_rules import (
    DPE_GROUPS,
    LAMPE_FIT_NAMES,
    LAMPE_FITS,
    LAMPE_PRESETS,
    LAMPE_RENAMED,
    dca_rule,
    dpe_budget,
    dpe_ranges,
    dpe_rule,
    lampe_family,
    lampe_mapping_length,
    lampe_rule,
    lampe_sw_rule,
    longbench_uselen,
    selfextend_ranges,
    selfextend_rule,
)
from ropecli.rope.schedule import REQUIRED, Param


@dataclass(frozen=True)
class Region:
    name: str
    where: Callable[[Any, Any], Any]  # (i as a column, j as a row) -> bool (block, keys): the region's pairs (j <= i)
    query: Callable[[Any], Any]  # i -> the query's rotation position
    key: Callable[[Any], Any]  # j -> the key's rotation position
    scale: float = 1.0  # the region's logits multiplied by it (a map's own temperature: STRING's t^2)


@dataclass(frozen=True)
class PositionMap:
    name: str
    regions: Callable[..., tuple[Region, ...]]  # (**params) -> regions covering every d >= 0 exactly once
    summary: str
    params: tuple[Param, ...] = ()
    window: str | None = None  # the parameter below which positions are true: at or past the sequence, no map at all
    rule: Callable[[int, int], dict] | None = None  # (Ls, T) -> params: its source's rule, an advise candidate then
    ranges: Callable[[int, int], dict] | None = None  # (Ls, T) -> {param: (lo, hi)}: searched by advise as NAME-tuned
    optimizer: str = "auto"  # how NAME-tuned is searched (DPE: one-at-a-time, its source's detection)
    budget: Callable[[int, int], int] | None = None  # (Ls, T) -> NAME-tuned's evaluations (None: advise's --budget)
    in_default: bool = True  # NAME at its rule in advise's default tournament (False: by name only, --candidates)
    selects: str | None = None  # the parameter giving the share of each head's pairs the map moves, chosen on the
    # model by their attention contribution (`maps.pair_selection`); the rest stay at true positions
    title: str | None = None  # what the field calls it in prose (Self-Extend, LaMPE); a variant shares its source's

    @property
    def per_length(self) -> bool:
        """Whether its regions depend on the sequence's length (its region function takes `length`: LaMPE squeezes
        the far keys over the whole input), so the attention asks for them at each length it runs (a decoding step
        included) and a cache cannot hold its keys turned once."""
        return "length" in inspect.signature(self.regions).parameters

    @property
    def per_prompt(self) -> bool:
        """Whether its regions are fixed by the prompt, the sequence's first forward pass, and kept while decoding
        (its region function takes `prompt`: LaMPE's three regions, as its source decodes)."""
        return "prompt" in inspect.signature(self.regions).parameters


MAPS: dict[str, PositionMap] = {}


@dataclass(frozen=True)
class BoundMap:
    """A registered map with its checked parameters, made once from `--map` (`parse_map`), JSON (`map_from_json`) or a
    rule (`bind`), held by a Spec (`Spec.position_map`) and handed whole to the attention (`maps.mapped_attention.mapped`)
    and to every runtime that serves it; no map is None everywhere. Frozen: it hashes and compares by name and values."""
    name: str
    params: tuple[tuple[str, float], ...]

    @property
    def record(self) -> PositionMap:
        return resolve_map(self.name)

    @property
    def values(self) -> dict[str, float]:
        """{param: value}."""
        return dict(self.params)

    @property
    def key_values(self) -> dict[str, float]:
        """{param: value} as cache keys name the map: a selection of every pair is the map as it was before it could
        select (`PositionMap.selects`), so its key stays the one its evaluations were stored under."""
        sel = self.record.selects
        return {k: v for k, v in self.params if not (k == sel and v == 1.0)}

    @property
    def share(self) -> float:
        """The share of each head's rotary pairs the map moves (1: every pair; `PositionMap.selects`)."""
        sel = self.record.selects
        return 1.0 if sel is None else float(self.values.get(sel, 1.0))

    def regions(self, length: int, prompt: int | None = None) -> tuple[Region, ...]:
        """Its regions for `length` tokens after a `prompt`-token prefill (`map_regions`)."""
        return map_regions(self.name, self.values, length, prompt)

    def on_model(self, model_type: str, base: float, train_len: int, rope_type: str | None) -> tuple["BoundMap", str | None]:
        """The map as it runs on a model (LaMPE's fit = auto: the fit of the model's family, `map_rules.lampe_family`,
        else the scaled one at the model's L; lampe-sw without U or L: its sigmoid at the model's L) and the line that
        says which fit it used (None: nothing chosen here)."""
        if "fit" not in self.values and "L" in self.values and not self.values["U"] and not self.values["L"]:
            bound = self.but(L=float(train_len))  # lampe-sw: LaMPE's sigmoid in units of the model's L, as lampe's scaled fit
            return bound, f"{self.name}: U from each prompt's length by LaMPE's sigmoid in units of the model's L = {train_len}"
        if "fit" not in self.values or self.values["U"]:
            return self, None
        fit = LAMPE_FITS[int(self.values["fit"])]
        family = lampe_family(model_type, base, train_len, rope_type) if fit == "auto" else fit
        chosen = family or "scaled"
        L = int(self.values["L"] or train_len) if chosen == "scaled" else int(self.values["L"])
        bound = self.but(fit=float(LAMPE_FITS.index(chosen)), L=float(L))
        why = ("the model's family" if family and fit == "auto" else "no LaMPE fit for this model" if fit == "auto"
               else "as asked")
        where = f" (L = {L})" if chosen == "scaled" else ""
        return bound, f"{self.name}: U from each prompt's length by {LAMPE_FIT_NAMES[chosen]}{where}: {why}"

    def but(self, **changes: float) -> "BoundMap":
        """The same map with some parameters changed (checked again: a searched G = 7.6 runs as G = 8)."""
        return bind(self.name, {**self.values, **changes})


def bind(name: str, params: dict[str, float]) -> BoundMap:
    """`name` with `params` checked against its bounds and defaults filled, in the map's order."""
    return BoundMap(name, tuple(map_params(name, params).items()))


def register_map(name: str, summary: str, *params: Param, window: str | None = None,
                 rule: Callable[[int, int], dict] | None = None, ranges: Callable[[int, int], dict] | None = None,
                 optimizer: str = "auto", budget: Callable[[int, int], int] | None = None, in_default: bool = True,
                 selects: str | None = None, title: str | None = None):
    """Register a map's region function. `rule(Ls, T)`: its parameters for a model shipped at Ls and a longest target
    T, as its source sets them (the map is then an `advise` candidate past Ls); `ranges(Ls, T)`: {param: (lo, hi)}
    that advise searches as candidate NAME-tuned, started at the rule, by `optimizer` within `budget(Ls, T)`
    evaluations (default: advise's --budget); `selects`: the parameter giving the share of each head's pairs the map
    moves (`PositionMap.selects`); `title`: its name in prose (the docs' lists are made from it; None: not a map)."""
    if ranges and not rule:
        raise ValueError(f"{name}: a searched map starts at its rule; give rule= with ranges=")

    def wrap(fn):
        MAPS[name] = PositionMap(name, fn, summary, params, window, rule, ranges, optimizer, budget,
                                 in_default, selects, title)
        return fn

    return wrap


def _same(p):
    return p


@register_map("none", "(i, j): the positions as they are")
def _none() -> tuple[Region, ...]:
    return (Region("all", lambda i, j: i >= j, _same, _same),)


@register_map("selfextend", "d < W: (i, j); d >= W: (floor(i/G) + W - floor(W/G), floor(j/G))",
              Param("G", REQUIRED, "group size (positions beyond the window share a group)", 1, 1e9, integer=True),
              Param("W", REQUIRED, "neighbour window, tokens at their true relative positions", 1, 1e12, integer=True), window="W",
              rule=selfextend_rule, ranges=selfextend_ranges, title="Self-Extend")
def _selfextend(G: float, W: float) -> tuple[Region, ...]:
    G, W = int(G), int(W)
    # floor(W/G), as the authors fixed it (LongLM 715c1e3, "We accidentally use '/'", Llama_4_40.py:131) and as every
    # decode path (Llama_4_40.py:267) and Phi.py:77 have it; the flash prefills (Llama.py:134, Llama_4_40.py:291,
    # Gemma.py:144) still divide as floats, frac(W/G) of a position further where G does not divide W
    shift = W - W // G
    return (Region("neighbour", lambda i, j: i - j < W, _same, _same),
            Region("grouped", lambda i, j: i - j >= W, lambda i: i // G + shift, lambda j: j // G))


@register_map("rerope", "relative position min(d, w): beyond w the query at w, the key at 0",
              Param("w", REQUIRED, "window: relative positions beyond it are all w", 1, 1e12, integer=True), window="w", title="ReRoPE")
def _rerope(w: float) -> tuple[Region, ...]:
    w = int(w)
    return (Region("window", lambda i, j: i - j < w, _same, _same),
            Region("capped", lambda i, j: i - j >= w, lambda i: i * 0 + w, lambda j: j * 0))


@register_map("leaky-rerope", "w + (d - w)/k beyond w: the query at i/k + w - w/k, the key at j/k",
              Param("w", REQUIRED, "window of true relative positions", 1, 1e12, integer=True),
              Param("k", REQUIRED, "slope divisor beyond the window (k = 1: no map; large k: ReRoPE)", 1, 1e12),
              window="w", title="Leaky ReRoPE")
def _leaky(w: float, k: float) -> tuple[Region, ...]:
    w = int(w)
    return (Region("window", lambda i, j: i - j < w, _same, _same),
            Region("leaky", lambda i, j: i - j >= w, lambda i: i / k + w - w / k, lambda j: j / k))


@register_map("dca", "chunks of c = chunk - local: same chunk (i mod c, j mod c); the previous chunk "
              "(min(i mod c + c, chunk), j mod c); earlier ones (min(2c - 1, chunk), j mod c)",
              Param("chunk", REQUIRED, "chunk size s (ChunkLlama: 3/4 of the training length)", 2, 1e12, integer=True),
              Param("local", REQUIRED, "local window l, c = s - l (ChunkLlama: 1/16 of the training length)", 1, 1e12,
                    integer=True), rule=dca_rule, title="DCA")
def _dca(chunk: float, local: float) -> tuple[Region, ...]:
    """Dual Chunk Attention (An et al., ICML 2024), as HKUNLP/ChunkLlama's chunkllama_attn_replace.py computes it
    (ChunkLlamaRotaryEmbedding._set_cos_sin_cache: q_t, qc_t = (q_t + c).clamp(max=chunk_size), k_t = j % c; forward:
    intra, successive and inter-chunk attention merged by log-sum-exp). Every relative position stays below s."""
    s, c = int(chunk), int(chunk) - int(local)
    if c < 1:
        raise RopeCliError(f"dca: local = {int(local)} must be below chunk = {s} (chunk length c = chunk - local)")
    far = min(2 * c - 1, s)
    return (Region("intra", lambda i, j: i // c == j // c, lambda i: i % c, lambda j: j % c),
            Region("successive", lambda i, j: i // c == j // c + 1, lambda i: (i % c + c).clip(max=s), lambda j: j % c),
            Region("inter", lambda i, j: i // c >= j // c + 2, lambda i: i * 0 + far, lambda j: j % c))


@register_map("string", "d < S: (i, j); d >= S: (i - S + W, j), logits x t^2",
              Param("S", REQUIRED, "shifted offset (the source: 0.25-0.4 of the training length, 0.33 L by default)", 2,
                    1e12, integer=True),
              Param("W", 128, "local value: the shifted pairs start at relative position W (128, 256 or 512)", 0, 1e12,
                    integer=True),
              Param("t", 0.1 * np.log(2) + 1, "factor on cos and sin, so logits x t^2 (the source: 0.1 ln 2 + 1)", 0.5, 2),
              window="S", title="STRING")
def _string(S: float, W: float, t: float) -> tuple[Region, ...]:
    """STRING, as HKUNLP/STRING's string_for_llama.py computes it (replace_with_string(shifted_offset=S,
    small_local_value=W): the queries at position_ids - S + W against the keys d >= S, a window of S true positions,
    merged by log-sum-exp; cos and sin multiplied by attention_factor = 0.1 ln 2 + 1). The source's window is inclusive
    (flash window_size=[S, 0]) and its shifted triangle starts at d = S, so it counts the pair d = S twice; here each
    pair is counted once, as the paper's formula has it."""
    S, W = int(S), int(W)
    if W >= S:
        raise RopeCliError(f"string: W = {W} must be below S = {S} (the shifted pairs restart at W)")
    return (Region("window", lambda i, j: i - j < S, _same, _same, t * t),
            Region("shifted", lambda i, j: i - j >= S, lambda i: i - S + W, _same, t * t))


@register_map("selfextend-llamacpp", "Self-Extend as llama.cpp's completion tool serves it (-gan G -gaw W, batches of "
              "W tokens): the positions its KV cache holds while each batch is decoded",
              Param("G", REQUIRED, "group size (-gan)", 1, 1e9, integer=True),
              Param("W", REQUIRED, "group width (-gaw), a multiple of G; also the batch size (-b)", 1, 1e12, integer=True),
              window="W", title="Self-Extend")
def _selfextend_llamacpp(G: float, W: float) -> tuple[Region, ...]:
    """Two regions, read from the positions llama.cpp's cache holds while batch b = floor(i/W) is decoded
    (`ropecli.maps.llamacpp_positions`, from tools/completion/completion.cpp): the keys of the earlier batches sit at
    floor(j/G), the positions grouping gave them for good, and the batch's own tokens at j - b (W - W/G), consecutive.
    So "near" (the batch's own keys, j >= bW) keeps the true relative position, and "far" puts the query at
    i - b (W - W/G) against the key at floor(j/G): two regions whatever the length, where the loop itself decodes one
    batch at a time (the same relative positions, checked against the loop in tests/test_position_maps.py)."""
    G, W = int(G), int(W)
    if W % G:
        raise RopeCliError(f"selfextend-llamacpp: W = {W} must be a multiple of G = {G} (llama.cpp asserts ga_w % ga_n == 0)")
    moved = W - W // G  # how far each batch's grouping pulls the next batch's positions back
    return (Region("near", lambda i, j: j >= i // W * W, _same, _same),
            Region("far", lambda i, j: j < i // W * W, lambda i: i - i // W * moved, lambda j: j // G))


@register_map("dpe", "per pair group g (8 groups of the rotary pairs, fastest first): d < W true; d >= W: "
              "(floor(i/G_g) + W - floor(W/G_g), floor(j/G_g))",
              Param("W", REQUIRED, "local window of true positions (DPE: 1024)", 1, 1e12, integer=True),
              *(Param(f"G{g}", REQUIRED, f"group size of pair group {g} (1: true positions; DPE's "
                      "scale_factors, found per model)", 1, 1e9, integer=True, log=True) for g in range(1, DPE_GROUPS + 1)),
              Param("top", 1.0, "share of each head's rotary pairs moved: those with the largest mean |q|*|k| on the "
                    "model (DPE's select_topk_dim, 48 of 64 pairs = 0.75); the rest at true positions", 0.01, 1.0),
              window="W", rule=dpe_rule, ranges=dpe_ranges, optimizer="one-at-a-time", budget=dpe_budget,
              in_default=False, selects="top", title="DPE")  # at its rule: Self-Extend on the key pairs (every group alike); by name
def _dpe(W: float, top: float = 1.0, **groups: float) -> tuple[Region, ...]:
    """Dimension-wise Positional Embeddings manipulation (Lu et al. 2025, arXiv 2504.18857; LuLuLuyi/DPE), Self-Extend
    per group of rotary pairs: dpe_for_llama.py `dpe_flash_forward` splits the pairs into the groups of
    dimension_groups_range (8 equal groups), gives group g the scale factor s_g (scale_factors) and, past the local
    window w (local_window_size), puts the query at i // s_g + w - w / s_g and the key at j // s_g on that group's
    dimensions (`concat_tensors` of the per-factor cos and sin), true positions within w (`atten_merge_forward`:
    the window's and the scaled attention merged by log-sum-exp). Here group g is the pairs m with
    floor(m * 8 / pairs) = g - 1, whatever the head size; w - w // s_g where the source divides in floats (equal for
    the source's w = 1024 and power-of-two factors). `top` < 1 is the source's key-pair selection (`select_topk_dim`:
    per layer and head only the pairs with the largest q-k 2-norm moved, the rest at true positions): a choice made on
    the model (`maps.pair_selection`), not a region, so the regions here are every pair's."""
    W = int(W)
    G = [int(groups[name]) for name in sorted(groups, key=lambda name: int(name[1:]))]  # G1 … G8

    def per_group(x):  # G as x's kind (numpy or torch), against x[..., None]: positions (…, groups)
        return x.new_tensor(G) if hasattr(x, "new_tensor") else np.asarray(G)

    return (Region("window", lambda i, j: i - j < W, _same, _same),
            Region("grouped", lambda i, j: i - j >= W, lambda i: i[..., None] // per_group(i) + W - W // per_group(i),
                   lambda j: j[..., None] // per_group(j)))



def lampe_squeeze(U: int, T: int) -> Callable[[Any], Any]:
    """LaMPE's mapping function over a T-token input, m(p) = floor(p (U / (T - 1))), as its `map_ids(position_ids, 0,
    use_length)` computes it (llama_cache1.py:17-25, llama_sw_map.py:23-28), on numpy or torch positions as given.
    Its `(to_max - to_min) / (x_max - x_min)` is an int over a long tensor, which torch computes as
    `(x_max - x_min).reciprocal() * U` (Tensor.__rdiv__), each step in float32: not the float32 quotient, one ulp
    off it for about one (T, U) in five, which moves some positions by one; then each product in float32."""
    ratio = float(np.float32(1) / np.float32(T - 1) * np.float32(int(U)))

    def m(p):
        if hasattr(p, "new_tensor"):
            return (p.float() * ratio).floor().long()
        return np.floor(np.asarray(p).astype(np.float32) * np.float32(ratio)).astype(np.int64)

    return m


@register_map("lampe-sw", "d < head: (i, j); d >= head: (m(i) + head - 1 - m(head), m(j)), m(p) = floor(p U/(T - 1)) "
              "over the input's T tokens, logits x t^2 (U = 0: U from T by LaMPE's sigmoid)",
              Param("head", REQUIRED, "local window of true positions (LaMPE: 512 at Llama 3's 8,192)", 1, 1e12,
                    integer=True),
              Param("U", 0, "mapping length: the far keys' positions squeezed into [0, U] (0: length-aware, U set "
                    "from the input's length T by LaMPE's sigmoid in units of L)", 0, 1e12, integer=True),
              Param("L", 0, "the training length LaMPE's sigmoid is scaled by (with U = 0)", 0, 1e12, integer=True),
              Param("t", 0.1 * np.log(2) + 1, "factor on cos and sin, so logits x t^2 (the source: 0.1 ln 2 + 1)",
                    0.5, 2),
              window="head", rule=lampe_sw_rule, in_default=False, title="LaMPE")
def _lampe_sw(head: float, U: float, L: float, t: float, length: int = 2) -> tuple[Region, ...]:
    """LaMPE's two-region file (scar-on/LaMPE llama_sw_map.py, which its Llama 3 RULER run loads: ruler/run_cmd.sh →
    test_ruler_llama.py:232-245, the preset lampe-ruler-llama3; its other runs load llama_cache1.py's three regions,
    `lampe`), as it computes it: `forward` keeps a window of `head` keys at their true positions and squeezes every
    position of the input's T tokens linearly onto [0, U] (`map_ids(position_ids, 0, use_length)`: floor(p (U /
    (T - 1))) in float32, `lampe_squeeze`), the far keys at m(j) and the query at m(i) + bias_1,
    bias_1 = head - (m(head) + 1), so the far region starts where the window ends; the two merged by log-sum-exp
    (`flash_prefill_merge`, `flash_decode_merge`); cos and sin x attention_factor = 0.1 ln 2 + 1 in both. U = 0 is
    the paper's length-aware mapping length, a scaled sigmoid of the input length (llama_cache1.py `remap_uselen`, its
    Llama 3 fit: U = int(6204.41 / (1 + exp(-(1.0493e-4 T - 2.4666)))) past 8,192, 1536 below), here in units of the
    training length L (exactly the fit at L = 8,192, `map_rules.scaled_uselen`); the file's `forward` itself takes a
    fixed use_length (default 1,536; the Llama 3 RULER run passes 3,072) at every length, which is `U` set.
    Where this differs from the source: (1) its prefill counts the pair d = head twice (flash window_size=[head, 0]
    reaches it, and so does the far triangle); its decoding does not, and here, as there, the window is d < head.
    (2) Decoding, the source recomputes m over the current length but keeps the prefill's bias_1; here every length
    has its own (a decoding step equals one pass over its prefix). (3) With U = 0 the mapping length follows the
    current length at every step too, where the source sets it once from the prompt (modifed_forward.py:
    remap_uselen(prompt_length) before generating, then decodes with it fixed): a generation that crosses L moves
    it (1536 to 1036 at 8,192 for Llama 3); a fixed U holds it, as the source's generation does. Regions per
    length: `PositionMap.per_length`."""
    head, T = int(head), max(int(length), 2)
    U = lampe_mapping_length(T, U, L, "scaled")
    if U is None:
        raise RopeCliError("lampe-sw: U = 0 sets the mapping length from the input's length by LaMPE's sigmoid, "
                           "scaled by the training length: give L (e.g. lampe-sw:head=512,L=8192) or a fixed U")
    m = lampe_squeeze(U, T)
    bias = head - 1 - int(m(np.array([head]))[0])
    s = t * t
    return (Region("window", lambda i, j: i - j < head, _same, _same, s),
            Region("far", lambda i, j: i - j >= head, lambda i: m(i) + bias, m, s))


@register_map("lampe", "three regions (llama_cache1.py): d <= head true; the far keys squeezed onto [0, U] over the "
              "prompt's T tokens, the query at m(i) + bias_1; the last queries see the first ~tail keys at fine "
              "positions (the query at i - bias_2); logits x t^2; below 2 head full attention; U from T by the "
              "model family's sigmoid",
              Param("head", REQUIRED, "local window of true positions (LaMPE: 512 at Llama 3's 8,192; its Mistral "
                    "RULER run 2,048)", 1, 1e12, integer=True),
              Param("tail", 200, "initial keys the last queries see at fine-grained positions, extended to the end of "
                    "their mapped chunk (LaMPE: 200); below head", 1, 1e12, integer=True),
              Param("U", 0, "mapping length: the far keys squeezed onto [0, U] (0: from the prompt's length by the "
                    "fit's sigmoid)", 0, 1e12, integer=True),
              Param("L", 0, "the training length the scaled fit is in units of (fit=scaled, or auto on a model "
                    "without a fit of its own)", 0, 1e12, integer=True),
              Param("fit", 0, "U's sigmoid with U = 0: auto (the model's family where LaMPE fitted it, else "
                    "scaled), scaled (the Llama 3 fit in units of L: ropecli's own), llama2, llama3, llama3.1, mistral "
                    "(llama_cache1.py remap_uselen)", 0, len(LAMPE_FITS) - 1, integer=True, choices=LAMPE_FITS),
              Param("t", 0.1 * np.log(2) + 1, "factor on cos and sin, so logits x t^2 (the source: 0.1 ln 2 + 1)",
                    0.5, 2),
              window="head", rule=lampe_rule, in_default=False, title="LaMPE")
def _lampe(head: float, tail: float, U: float, L: float, fit: float, t: float, length: int = 2,
           prompt: int | None = None) -> tuple[Region, ...]:
    """LaMPE (Length-aware Multi-grained Positional Encoding, arXiv 2508.02308), as scar-on/LaMPE's llama_cache1.py
    `forward` runs it, the file its LongBench, InfiniteBench and LEval scripts and its Mistral RULER script
    (test_ruler_mistral.py) load; its Llama 3 RULER script loads llama_sw_map.py, `lampe-sw`. Everything is fixed from
    the prompt's T tokens (the prefill) and kept while decoding: m(p) = floor(p (U / (T - 1))) in float32
    (`map_ids`, `lampe_squeeze`), r = the last index of the mapped chunk holding index `tail` (`find_chunk_last_index`),
    bias_1 = head - (m(head) + 1), bias_2 = (T - 1 - r) - m(T - 1 - r) - bias_1, and U itself (`remap_uselen`). Three
    regions, merged by log-sum-exp (`flash_prefill_merge`, `flash_decode_merge`), cos and sin x t in all:
    - window: true positions, keys i - head … i in the prefill (flash window_size=[head, 0]), i - head + 1 … i
      while decoding (the cache's last `head` keys);
    - far: the query at m(i) + bias_1 (decoding: m(T - 1) + bias_1, the prefill's last), the key at m(j), keys
      max(0, i - T + r) … i - head in the prefill (flash causal over the two slices, window_size=[T - head - r, 0]),
      i - T + r + 1 … i - head while decoding;
    - initial: the query at i - bias_2, keys 0 … i - T + r at true positions: the last r queries of the prefill (flash
      causal over the first r keys), and every decoding step (the cache's first r + steps keys).
    So the prefill counts the pairs at d = head and at j = i - T + r in two regions each, as the source does, and
    decoding counts each once. A prompt below 2 head runs full attention (x t^2) in the prefill and every step.
    `prompt`: the prompt's length T (None: `length`, a prefill); a step's keys past the prompt's m are at m(j)
    continued (the source's slice of the prompt's positions ends `head` steps into decoding).
    U = 0: `remap_uselen(T, fit)` (Llama 2, Llama 3 and Mistral: 1536 below 8,192; Llama 3.1 none), or the Llama 3
    fit in units of the training length L (fit=scaled, ropecli's own: exactly the Llama 3 fit at L = 8,192)."""
    head, tail, fit = int(head), int(tail), int(fit)
    T = max(int(prompt or length), 2)
    s = t * t
    if tail >= head:
        raise RopeCliError(f"lampe: tail = {tail} must be below head = {head} (the initial keys are read by the last "
                           "queries beyond the window); lower tail")
    if T < 2 * head:  # the source: `if self.prefill_len < 2*head` full attention, cos and sin x t as everywhere
        return (Region("all", lambda i, j: i >= j, _same, _same, s),)
    U = lampe_mapping_length(T, U, L, LAMPE_FITS[fit])
    if U is None:
        raise RopeCliError("lampe: U = 0 sets the mapping length from the prompt's length by a sigmoid: fit = auto "
                           "picks it on the model, and the scaled fit needs the training length; give L "
                           "(lampe:head=512,L=8192), a fit (fit=llama2) or a fixed U")
    m = lampe_squeeze(U, T)
    mapped = m(np.arange(T))
    r = tail  # find_chunk_last_index(mapping_ids, tail)
    while r + 1 < T and mapped[r] == mapped[r + 1]:
        r += 1
    if T - r < head:
        raise RopeCliError(f"lampe: the initial keys reach index {r} (tail = {tail} extended to its mapped chunk at U = "
                           f"{int(U)}), past T - head = {T - head} of the {T}-token prompt; lower tail or raise U")
    bias_1 = head - (int(mapped[head]) + 1)
    bias_2 = (T - 1 - r) - int(mapped[T - 1 - r]) - bias_1
    edge = r - T  # the initial keys of query i: j <= i + edge
    return (Region("window", lambda i, j: (i - j < head) | ((i - j == head) & (i < T)), _same, _same, s),
            Region("far", lambda i, j: (i - j >= head) & ((j > i + edge) | ((j == i + edge) & (i < T))),
                   lambda i: m(i.clip(max=T - 1)) + bias_1, m, s),
            Region("initial", lambda i, j: j <= i + edge, lambda i: i - bias_2, _same, s))


def _lampe_prompt_below_U(head: float, tail: float, U: float, L: float, fit: float, t: float, length: int = 2,
                          prompt: int | None = None) -> tuple[Region, ...]:
    """`lampe` with U = min(T, U) of the prompt's T tokens (`map_rules.longbench_uselen`: LaMPE's LongBench
    pred.py:93-97 passes use_length = context_length below 1,536, 1,536 above), everything else as `_lampe`; U = 0:
    the fit, as lampe's."""
    T = max(int(prompt or length), 2)
    return _lampe(head, tail, longbench_uselen(T, int(U)) if U else 0, L, fit, t, length, prompt)


# how each committed run sets U, as the region function its preset runs (`map_rules.LampePreset.U_rule`): fixed and
# fit are the map's own U and fit; LongBench's rule needs the prompt's length
_U_RULE_REGIONS = {"min(T, U)": _lampe_prompt_below_U}

for _preset, _run in LAMPE_PRESETS.items():  # LaMPE's committed runs, each a map of its own (`map_rules.LampePreset`)
    _base = MAPS[_run.regions]
    register_map(f"lampe-{_preset}", _run.summary,
                 *(replace(p, default=_run.values.get(p.name, p.default)) for p in _base.params),
                 window="head", in_default=False, title="LaMPE")(_U_RULE_REGIONS.get(_run.U_rule, _base.regions))


def map_regions(name: str, params: dict, length: int, prompt: int | None = None) -> tuple[Region, ...]:
    """The map's regions for a sequence of `length` tokens (the keys' count: a decoding step's includes its own) whose
    prompt, its first forward pass, was `prompt` tokens (None: `length`, a prefill). Only a per-length map
    (`PositionMap.per_length`: LaMPE) is given the length, and only a per-prompt one (`PositionMap.per_prompt`:
    LaMPE's three regions) the prompt; llama.cpp's batch-by-batch Self-Extend has a closed form without either."""
    pmap = resolve_map(name)
    extra = {"length": length} if pmap.per_length else {}
    return pmap.regions(**params, **extra, **({"prompt": prompt} if pmap.per_prompt else {}))


def resolve_map(name: str) -> PositionMap:
    if name in LAMPE_RENAMED:  # a preset that was not what its runs run: one line naming what replaced it
        raise RopeCliError(f"{name} is no longer a map: {LAMPE_RENAMED[name]}")
    if name not in MAPS:
        raise RopeCliError(f"unknown position map '{name}'; choose from {', '.join(MAPS)}")
    return MAPS[name]


def map_params(name: str, given: dict[str, float]) -> dict[str, float]:
    """The map's parameters: given ones within their bounds, defaults for the rest; one line otherwise."""
    pmap = resolve_map(name)
    known = {p.name: p for p in pmap.params}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise RopeCliError(f"{name} has no parameter {unknown[0]}; it takes {', '.join(known) or 'none'}")
    out = {}
    for p in pmap.params:
        v = given.get(p.name, p.default)
        if isinstance(v, str) and p.choices:
            if v not in p.choices:
                raise RopeCliError(f"{name}: {p.name} = {v} is not one of {', '.join(p.choices)}")
            v = float(p.choices.index(v))
        if v is REQUIRED:
            raise RopeCliError(f"{name} needs {p.name} ({p.help}), e.g. {name}:{p.name}=…")
        if (p.lo is not None and v < p.lo) or (p.hi is not None and v > p.hi):
            raise RopeCliError(f"{name}: {p.name} = {v:g} is outside [{p.lo:g}, {p.hi:g}] ({p.help})")
        out[p.name] = float(round(v)) if p.integer else v  # a searched G = 7.6 runs (and is cached) as G = 8
    return out


def check_window(bound: BoundMap | None, length: int) -> None:
    """One line when a map's window reaches the whole sequence: no pair is mapped, the 'map' is the model itself."""
    if not bound:
        return
    key = bound.record.window
    if key is not None and bound.values[key] >= length:  # the farthest pair is d = length - 1
        raise RopeCliError(f"{bound.name}: {key} = {bound.values[key]:g} reaches the whole {length}-token window, so "
                           f"nothing is mapped (the model itself); pass {key} below {length}")


def check_map(position_map: BoundMap | None, lengths) -> None:
    """The map's regions can be built (DCA: local below chunk) and its window is below every length: one line otherwise."""
    if position_map:
        bound = position_map
        if bound.values.get("fit") == 0 and not bound.values.get("L"):  # LaMPE's fit = auto is chosen on the model:
            bound = bound.but(L=float(max([*lengths, 1])))  # its regions' own rules checked at some L meanwhile
        bound.regions(max([*lengths, 1]))
        for n in lengths:
            check_window(position_map, n)
