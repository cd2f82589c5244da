"""A switching transformers export, measured before it is written: what generation across the switch costs.

transformers picks short or long factors again at every forward pass (`longrope_frequency_update`) and grows
dynamic NTK's base token by token (`dynamic_frequency_update`); keys already in the KV cache keep their
rotation. `switching_report` measures that damage on the model being exported (`ropecli.evaluation.decode_across`:
a prompt ending 1/8 of L before the switch, decoded a quarter of L past it, on held-out windows, against one
forward pass of the same tokens) and returns the lines `ropecli export` prints. Without a model it says
that it could not measure.
"""

from __future__ import annotations

from ropecli.backends.load import load_model
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.decode_across import DecodePlan
from ropecli.evaluation.evaluator import Evaluator
from ropecli.export.readback import Check
from ropecli.export.runtimes.record import Runtime
from ropecli.export.served import decode_damage, is_dynamic, switch_length
from ropecli.models.model_rope import ModelRope
from ropecli.rope.geometry import Geometry
from ropecli.spec import Spec

SAMPLES = 4  # held-out windows: the damage is a paired mean over them, with its interval


def switching_report(spec: Spec, geom: Geometry, rope: ModelRope, model: str | None, gguf_file: str | None,
                     measure: bool, rec: Runtime) -> dict:
    """{switching: the measurement or None, switching_lines: what to print}, for a runtime `rec` that picks its
    schedule per forward pass (transformers; SGLang's longrope)."""
    dynamic = is_dynamic(spec)
    switch = rope.train_len if dynamic else switch_length(rope, spec, consistent=False)
    label = rec.label
    what = (f"dynamic NTK in {label} grows its base at every token past L = {switch}" if dynamic else
            f"--switching: {label} applies the extension only to forward passes longer than {switch} tokens")
    head = f"{what}; keys cached before the switch keep their rotation, so a prompt shorter than {switch} continued past it decodes with stale keys"
    if rope.model_type in ("phi3",):
        head += "; Phi-3's generate() drops its cache at the switch (modeling_phi3.py), a serving loop that keeps it does not"
    if not measure or model is None:
        why = "not measured: pass --model to measure it" if model is None else "not measured"
        return {"switching": None, "switching_lines": [f"warning: {head}; decode damage {why}"]}
    result = _measure(spec, geom, model, gguf_file, switch, rec)
    d = result["damage"]
    words = {"worse": "shown damaged", "equivalent": "shown harmless (within the margin)"}.get(d["verdict"], "undecided")
    line = (f"warning: {head}. Measured on {result['windows']} held-out windows ({result['prompt_len']}-token prompt decoded "
            f"to {result['total_len']}): {result['decode_nll']:.4f} nats/token through the cache against "
            f"{result['one_pass_nll']:.4f} in one forward pass, Δ {d['diff']:+.4f} ± {d['half_width'] or float('nan'):.2g} "
            f"({words}); worst token off by {result['worst_token']:.3g} nats")
    advice = ("drop --switching for an export that generates safely" if not dynamic else
              "export a static schedule (yarn, ntk-fixed …), or serve dynamic NTK in vLLM (fixed at start-up)")
    return {"switching": result, "switching_lines": [line, f"  {advice}"]}


def _measure(spec: Spec, geom: Geometry, model: str, gguf_file: str | None, switch: int, rec: Runtime) -> dict:
    """The decode damage on the first SAMPLES held-out windows of the model (through the evaluation cache)."""
    backend = load_model(model, gguf_file=gguf_file, dtype="fp32", device="cpu")
    ev = Evaluator.over(backend, samples=SAMPLES, cache=EvalCache())
    return decode_damage(ev, rec, spec, geom.factor, False, DecodePlan.across(switch, geom.target_len))


def decode_check(rec: Runtime, model: str, gguf_file: str | None, exp, consistent: bool, cache_dir: str | None):
    """verify's generation check of an export to `rec` (`Runtime.decode_checked`: transformers): a prompt 1/8 of the
    switch length before it, decoded through the KV cache a quarter past it (or to T) by the runtime's rule (transformers'
    per forward pass), against one pass; passes where the two
    agree within 1e-4 nats per token (a consistent export: one schedule at every step), fails with the damage where
    the export switches (`--switching`, dynamic NTK)."""
    ev = Evaluator.over(load_model(model, gguf_file=gguf_file, dtype="fp32", device="cpu"), samples=SAMPLES,
                        cache=EvalCache(cache_dir))
    spec = exp.spec.but(factor=exp.factor)
    switch = exp.rope.train_len if is_dynamic(spec) or consistent else switch_length(exp.rope, spec, consistent)
    r = decode_damage(ev, rec, spec, exp.factor, consistent, DecodePlan.across(switch, exp.target_len))
    d = r["damage"]
    ok = abs(d["diff"]) <= DECODE_TOL and (r["one_schedule"] or d["verdict"] == "equivalent")
    found = (f"Δ {d['diff']:+.2g} nats/token through the cache vs one pass on {r['windows']} window(s)"
             + ("" if ok else f"; worst token {r['worst_token']:.3g} nats: keys cached before the switch go stale"))
    return Check(rec.name, None, f"decode across L ({r['prompt_len']}-token prompt to {r['total_len']}, KV cache)",
                 f"= one pass within {DECODE_TOL:g}", found, ok)


DECODE_TOL = 1e-4  # nats per token: a consistent export decodes as one pass up to float rounding (~1e-7 measured)
