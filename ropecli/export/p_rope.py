"""What a runtime can serve on a p-RoPE model (Gemma 4's global layers, `rope_type: proportional`).

transformers' `_compute_proportional_rope_parameters` (modeling_rope_utils.py) builds the layer's inv_freq as
base^(-2i/head_dim) for the first int(partial x head_dim) // 2 pairs and 0 for the rest, then divides every entry
by the block's one `factor`: the only schedule its config can carry there is a uniform one (PI). A longrope block
cannot stand in (transformers sizes it by head_dim x partial and runs the exponent over that: other frequencies,
and Gemma 4's config refuses the global head_dim lookup it needs). So on a p-RoPE model ropecli serves, and
exports, `pi` (and anything that is uniform on the rotating pairs with no attention factor) to transformers as
`proportional` with that factor; every other schedule is measured but refused for export in one line. The other
runtimes serve a p-RoPE model only as shipped (each record's `p_rope` says where): their exports are refused, but
llama.cpp's: its GGUF carries p-RoPE as rope_freqs with 1e30 past the rotating pairs, read by the global layers only,
so any per-pair schedule without an attention factor rides on it (`models.gguf_rope.export_gguf`).
"""

from __future__ import annotations

import numpy as np

from ropecli.export.runtimes.record import Runtime
from ropecli.models.model_rope import ModelRope
from ropecli.rope.geometry import Geometry
from ropecli.spec import Spec


def p_rope_refusal(spec: Spec, geom: Geometry, rope: ModelRope, rec: Runtime | None = None) -> str | None:
    """Why the runtime `rec` cannot serve `spec` on this p-RoPE model (None: it can, or the model is not p-RoPE);
    `rec` None: transformers' own 'proportional' block, one factor for every rotating pair."""
    if rope.rotating_pairs is None or spec.native:
        return None
    if rope.shipped is None and uniform_factor(spec, geom) == 1.0:
        return None  # the unscaled model is the model as shipped: every runtime serves it
    if rec and rec.p_rope_schedules == "per-pair":  # llama.cpp: rope_freqs on the rotating pairs, 1e30 kept past them
        if spec.log_n or spec.position_map or abs(spec.schedule(geom).attention_factor - 1.0) > 1e-12:
            return f"{rec.name}: {rec.p_rope}; {spec.label} scales the logits or maps positions: export it --to hf"
        return None
    if rec and rec.p_rope_schedules != "uniform":
        said = rec.p_rope or "ropecli has not read how it serves p-RoPE (Gemma 4's 'proportional' layers)"
        return f"{rec.name}: {said}; --to hf writes transformers' own block"
    factor = uniform_factor(spec, geom)
    if factor is None:
        return (f"transformers' 'proportional' RoPE (Gemma 4's global layers) divides every pair by one factor; "
                f"{spec.label} is not one factor with no attention factor: only pi is served (the measurement stands)")
    return None


def uniform_factor(spec: Spec, geom: Geometry) -> float | None:
    """The one factor `spec` divides every rotating pair by, None where it varies by pair or scales the logits."""
    if spec.log_n or spec.position_map:
        return None
    s = spec.schedule(geom)
    rotating = s.factors[: geom.rotating_pairs]
    if not np.allclose(rotating, rotating[0], rtol=1e-12, atol=0) or abs(s.attention_factor - 1.0) > 1e-12:
        return None
    return float(rotating[0])


def proportional_block(rope: ModelRope, base: float, factor: float) -> dict:
    """transformers' own p-RoPE block at `factor` (the model's partial_rotary_factor kept)."""
    return {"rope_type": "proportional", "partial_rotary_factor": rope.partial_rotary_factor, "rope_theta": base,
            "factor": factor}
