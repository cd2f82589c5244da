"""An export run by its runtime on one window, against ropecli's own measurement: transformers reloading the artefact
(`run_transformers`), vLLM's own engine serving it (`run_vllm`, in vLLM's environment: `export.vllm_engine`), llama.cpp
serving the exported GGUF (`run_llamacpp`). The runtime modules' `run` hooks call these;
`ropecli.export.verify` asks for them. Below the runtime registry: nothing here looks a runtime up by name."""

from __future__ import annotations

import math
from pathlib import Path

from ropecli.backends.llamacpp_open import load_llamacpp, open_gguf
from ropecli.backends.load import causal_lm_from_pretrained, load_model
from ropecli.deferred import deferred
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.evaluator import Evaluator
from ropecli.export.expected import Expected
from ropecli.export.readback import Check
from ropecli.export.vllm_engine import run_engine
from ropecli.models.chunked_scoring import window_nll
from ropecli.models.config import BUILTIN, BUILTIN_DIR
from ropecli.models.packaged import resolve_model
from ropecli.spec import make_spec

torch = deferred("torch")

PPL_RTOL = 1e-4  # transformers reload vs ropecli's patched model, same weights and window


def run_vllm(runtime: str, artefact: Path, block: dict | None, model: str | None, exp: Expected, run_len: int,
             cache_dir: str | None, gguf_file: str | None = None, python: str | None = None) -> Check:
    """vLLM's engine serving the export (a map folder through ropecli's plugin, or the model with the overrides `block`
    as --hf-overrides) scores the first held-out window of `run_len` tokens; ropecli's patched (and mapped) source model
    scores the same window (through the evaluation cache). PPL within PPL_RTOL."""
    ours = load_model(model, gguf_file=gguf_file, dtype="fp32", device="cpu")
    ev = Evaluator.over(ours, samples=1, cache=EvalCache(cache_dir))
    mine = ev.evaluate(exp.spec.but(factor=exp.factor), run_len).ppl
    ids = [int(i) for i in ev.inputs.windows(run_len).ids[0]]
    source = str(artefact) if block is None else str(BUILTIN_DIR) if model in (None, BUILTIN) else resolve_model(model)
    if Path(source).exists():  # absolute: vLLM's engine runs elsewhere and looks a name it cannot find up on the hub
        source = str(Path(source).resolve())
    engine = {"model": source, "max_model_len": run_len + 16, "phases": [[{"ids": ids}]]}
    if block is not None:
        engine["hf_overrides"] = block
    rec = run_engine({"engines": [engine]}, python)["engines"][0]
    what = f"PPL of one {run_len}-token window, vLLM's engine vs ropecli"
    if rec["error"] is not None:  # the engine failed: an error, never a mismatch of numbers it did not compute
        return Check(runtime, None, what, f"{mine:.6g} (ropecli)", f"vLLM's engine: {rec['error'][:300]}", False,
                     error=True)
    nll = rec["phases"][0]["requests"][0]["nll"]
    theirs = math.exp(sum(nll) / len(nll))
    rel = abs(theirs / mine - 1)
    return Check(runtime, None, what, f"{mine:.6g} (ropecli)", f"{theirs:.6g} (relative {rel:.2g})", rel <= PPL_RTOL)


def run_transformers(runtime: str, artefact: Path, block: dict | None, model: str | None, exp: Expected, run_len: int,
                     cache_dir: str | None, gguf_file: str | None = None) -> Check:
    """The artefact reloaded by transformers alone (a folder: from_pretrained(folder); a block:
    from_pretrained(model, **block)) scores the first held-out window of `run_len` tokens; ropecli's
    patched source model scores the same window (through the evaluation cache). `runtime`: the check's runtime (the
    calling module's record's name)."""
    ours = load_model(model, gguf_file=gguf_file, dtype="fp32", device="cpu")
    ev = Evaluator.over(ours, samples=1, cache=EvalCache(cache_dir))
    mine = ev.evaluate(exp.spec.but(factor=exp.factor), run_len).ppl
    ids = ev.inputs.windows(run_len).ids[0]
    if block is None:
        plain = causal_lm_from_pretrained(str(artefact), {"dtype": torch.float32})
    else:
        source = str(BUILTIN_DIR) if model in (None, BUILTIN) else resolve_model(model)
        if gguf_file:
            kw = {"gguf_file": gguf_file}
        elif source.endswith(".gguf"):
            source, kw = str(Path(source).parent), {"gguf_file": Path(source).name}
        else:
            kw = {}
        plain = causal_lm_from_pretrained(source, {"dtype": torch.float32, **kw, **block})
    nll, n, _ = window_nll(plain.eval(), torch.from_numpy(ids)[None])
    theirs = math.exp(nll / n)
    rel = abs(theirs / mine - 1)
    return Check(runtime, None, f"PPL of one {run_len}-token window, reloaded vs ropecli",
                 f"{mine:.6g} (ropecli, patched)", f"{theirs:.6g} (relative {rel:.2g})", rel <= PPL_RTOL)



EFFECT_TOL = 2e-3  # |effect in llama.cpp - effect in transformers|, in log-PPL (nats per token): ~0.2 %


def run_llamacpp(runtime: str, artefact: Path, model: str | None, exp: Expected, run_len: int, cache_dir: str | None,
                 gguf_file: str | None = None) -> Check:
    """The exported GGUF served by llama.cpp as it is, against the source GGUF unscaled in llama.cpp: the
    effect log(PPL_export / PPL_source) on one window of `run_len` tokens, compared with the effect
    of the measured schedule in ropecli's transformers backend on the same window (llama.cpp computes with
    the quantized weights, transformers with their dequantized copy: levels differ, effects agree). `runtime`: the
    check's runtime (the calling module's record's name)."""
    cache = EvalCache(cache_dir)
    none = make_spec("none")
    source = open_gguf(model, gguf_file)
    served = load_llamacpp(artefact, source.rope)
    served.tokenizer = source.tokenizer
    ppl = {}
    for name, backend, spec in (("source", source, none), ("export", served, none)):
        try:
            ppl[name] = Evaluator.over(backend, samples=1, cache=cache).evaluate(spec, run_len).ppl
        finally:
            backend.close()
    ours = Evaluator.over(load_model(model, gguf_file=gguf_file, dtype="fp32", device="cpu"), samples=1, cache=cache)
    ppl["hf_none"] = ours.evaluate(none, run_len).ppl
    ppl["hf_scaled"] = ours.evaluate(exp.spec.but(factor=exp.factor), run_len).ppl
    cpp, hf = math.log(ppl["export"] / ppl["source"]), math.log(ppl["hf_scaled"] / ppl["hf_none"])
    return Check(runtime, None, f"effect log(PPL scaled / unscaled), one {run_len}-token window",
                 f"{hf:+.5f} (transformers: {ppl['hf_none']:.5g} -> {ppl['hf_scaled']:.5g})",
                 f"{cpp:+.5f} (llama.cpp: {ppl['source']:.5g} -> {ppl['export']:.5g}; difference {abs(cpp - hf):.2g})",
                 abs(cpp - hf) <= EFFECT_TOL)
