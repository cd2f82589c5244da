"""`ropecli verify`: does an exported artefact make its runtime apply what ropecli measured?

Expected: a Spec at factor k on the source model's geometry (d, base per layer type, L) and the
target length T, from `advice.json` or from flags. Found: what the runtime applies at T, read back
from the artefact by each runtime's own rules (`ropecli.export.readback`). Checked per runtime and
scaled layer type: the d/2 factors (relative 1e-4), the attention factor (cos/sin multiplier,
relative 1e-4), the base, the original length L the artefact states, the length it declares (T).
Where the runtime is installed it also runs (transformers: the artefact reloaded with plain
from_pretrained scores a window at T with ropecli's patched PPL within 1e-4).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


from ropecli.export.check import Check
from ropecli.export.expected import Expected
from ropecli.export.readback import Applied, CONSISTENT, read_json, rope_blocks, UNREADABLE, unreadable
from ropecli.evaluation.cache import EvalCache
from ropecli.evaluation.evaluator import Evaluator
from ropecli.export.plan import installed_lines, replaces_shipped, works_with_line
from ropecli.export.runtimes import PER_FORWARD, canonical, module, record
from ropecli.export.switching import decode_check
from ropecli.models.config import BUILTIN, BUILTIN_DIR
from ropecli.models.packaged import resolve_model
from ropecli.rope.spec import make_spec

FACTOR_RTOL = 1e-4  # float32 in every runtime: their factors agree with ropecli's float64 to ~1e-7
ATTENTION_RTOL = 1e-4
PPL_RTOL = 1e-4  # transformers reload vs ropecli's patched model, same weights and window


@dataclass
class Verdict:
    runtime: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def line(self) -> str:
        bad = [c for c in self.checks if not c.ok]
        if not bad:
            return f"{self.runtime}: OK ({len(self.checks)} checks)"
        c = bad[0]
        where = f" [{c.layer_type}]" if c.layer_type else ""
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return f"{self.runtime}: MISMATCH{where}: {c.what}: expected {c.expected}, found {c.found}{more}"


def compare(applied: list[Applied], exp: Expected, runtime: str) -> list[Check]:
    checks = []
    if not applied:
        want = ", ".join(t for t in exp.rope.scaled_types) or "its RoPE"
        return [Check(runtime, None, "scaled layer types", want, "none scaled in the artefact", False)]
    for a in applied:
        add = lambda what, e, f, ok: checks.append(Check(a.runtime, a.layer_type, what, e, f, ok))  # noqa: E731
        want, attention = exp.schedule(a.layer_type)
        if a.factors is None:
            add("schedule", exp.spec.label, f"{a.how}: ropecli cannot reconstruct it", False)
        elif np.ndim(a.factors) != 1 or len(a.factors) != len(want):  # a hand-edited block can read back as one number
            add("factors", f"{len(want)} (d/2)", f"{np.size(a.factors)}", False)
        else:
            rel = float(np.max(np.abs(a.factors / want - 1)))
            detail = f"max relative difference {rel:.2g} ({a.how})"
            if rel > FACTOR_RTOL:
                detail += f"; last pair {a.factors[-1]:.6g} vs {want[-1]:.6g}, first {a.factors[0]:.6g} vs {want[0]:.6g}"
            add("factors", f"{exp.spec.label} at k = {exp.factor:g}", detail, rel <= FACTOR_RTOL)
        add("attention factor", f"{attention:.6g}", f"{a.attention_factor:.6g}",
            abs(a.attention_factor / attention - 1) <= ATTENTION_RTOL)
        base = exp.base_of(a.layer_type)
        add("base (rope_theta)", f"{base:g}", f"{a.rope_theta:g}", abs(a.rope_theta / base - 1) <= 1e-6)
        if a.train_len is not None and not a.how.endswith(CONSISTENT):  # (a consistent block switches nothing)
            switch = exp.switch_len(a.how)
            add("original length L" if switch == exp.rope.train_len else "switch length Ls (shipped up to it)",
                str(switch), str(a.train_len), a.train_len == switch)
        if a.max_len is not None:  # dynamic NTK keeps L there: both runtimes scale from max_position_embeddings
            want_len = exp.rope.train_len if a.how.startswith("dynamic") and a.runtime == "transformers" else exp.target_len
            add("declared length", str(want_len), str(a.max_len), a.max_len == want_len)
    return checks


def run_transformers(artefact: Path, block: dict | None, model: str | None, exp: Expected, run_len: int,
                     cache_dir: str | None, gguf_file: str | None = None) -> Check:
    """The artefact reloaded by transformers alone (a folder: from_pretrained(folder); a block:
    from_pretrained(model, **block)) scores the first held-out window of `run_len` tokens; ropecli's
    patched source model scores the same window (through the evaluation cache)."""
    import torch

    from ropecli.models.load import causal_lm_from_pretrained, load_model
    from ropecli.models.scoring import window_nll

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
    return Check("transformers", None, f"PPL of one {run_len}-token window, reloaded vs ropecli",
                 f"{mine:.6g} (ropecli, patched)", f"{theirs:.6g} (relative {rel:.2g})", rel <= PPL_RTOL)


EFFECT_TOL = 2e-3  # |effect in llama.cpp - effect in transformers|, in log-PPL (nats per token): ~0.2 %


def run_skipped(exp: Expected, run_len: int, consistent: bool) -> str | None:
    """Why a run could not compare like with like, or None."""
    if exp.spec.log_n:
        return ("not run: the export applies log-n as one constant, sqrt(log_L T), where ropecli measured it per "
                "position; their PPLs differ by design")
    switch = exp.switch_len("longrope")
    if run_len <= switch and not consistent:
        return (f"not run: --run-len {run_len} is within L = {switch}, where transformers uses short_factor; "
                f"give a length above L")
    return None


def run_llamacpp(artefact: Path, model: str | None, exp: Expected, run_len: int, cache_dir: str | None,
                 gguf_file: str | None = None) -> Check:
    """The exported GGUF served by llama.cpp as it is, against the source GGUF unscaled in llama.cpp: the
    effect log(PPL_export / PPL_source) on one window of `run_len` tokens, compared with the effect
    of the measured schedule in ropecli's transformers backend on the same window (llama.cpp computes with
    the quantized weights, transformers with their dequantized copy: levels differ, effects agree)."""
    from ropecli.models.llamacpp_open import load_llamacpp, open_gguf
    from ropecli.models.load import load_model

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
    return Check("llamacpp", None, f"effect log(PPL scaled / unscaled), one {run_len}-token window",
                 f"{hf:+.5f} (transformers: {ppl['hf_none']:.5g} -> {ppl['hf_scaled']:.5g})",
                 f"{cpp:+.5f} (llama.cpp: {ppl['source']:.5g} -> {ppl['export']:.5g}; difference {abs(cpp - hf):.2g})",
                 abs(cpp - hf) <= EFFECT_TOL)


def verify_artefact(target: Path, kind: str, exp: Expected, model: str | None, gguf_file: str | None, *,
                    run: bool = True, run_len: int | None = None, cache_dir: str | None = None,
                    runtime_given: bool = False, status=None) -> Verdict:
    """Read `target` back as runtime `kind` reads it, check it against `exp`, and run the runtime where
    ropecli can (`status(text)`: a context manager the CLI shows while a run takes seconds)."""
    from contextlib import nullcontext

    kind = canonical(kind)
    verdict = Verdict(kind)
    if exp.spec.position_map and hasattr(module(kind), "verify_map"):  # a map in the runtime's own config (SGLang: DCA)
        verdict.checks += module(kind).verify_map(target, exp)
        verdict.notes += [works_with_line(kind), *installed_lines(kind)]
        return verdict
    if exp.spec.position_map:  # llama.cpp's Self-Extend: its flags, not the file
        verdict.notes.append(f"the position map ({exp.spec.position_map.name}) is the runtime's launch flags, not in the "
                             "file: checked here is the schedule the file carries")
        exp = dataclasses.replace(exp, spec=exp.spec.but(position_map=()))
    try:
        applied, block = module(kind).read_back(target, exp)
    except UNREADABLE as exc:  # a malformed artefact fails in one line
        raise unreadable(target, exc) from None
    verdict.checks += compare(applied, exp, verdict.runtime)
    if record(kind).output in ("json", "folder-or-json"):
        verdict.checks += both_forms_agree(target, block, verdict.runtime)
    if exp.rope.shipped is not None:  # a model that ships a schedule: is it kept within Ls?
        kept = shipped_within_Ls(target, kind, block, exp, verdict.runtime)
        verdict.checks += [kept] if isinstance(kept, Check) else []
        verdict.notes += [kept] if isinstance(kept, str) else []

    verdict.notes += [works_with_line(kind), *installed_lines(kind)]
    if kind == "transformers" and target.suffix == ".json" and not runtime_given:
        verdict.notes.append("read as a transformers block (no vLLM mscale or ntk in it); a vLLM overrides file: --runtime vllm")
    if not run:
        return verdict
    why = run_unavailable(kind, target, block, model, exp, run_len or exp.target_len)
    if why:
        verdict.notes.append(why)
        return verdict
    with (status or (lambda text: nullcontext()))(f"{verdict.runtime}: scoring a window with the export …"):
        verdict.checks.append(module(kind).run(target, block, model, exp, run_len or exp.target_len, cache_dir, gguf_file))
    if kind == "transformers" and exp.target_len > exp.rope.shipped_len and not exp.spec.log_n:
        with (status or (lambda text: nullcontext()))("transformers: decoding across L through the KV cache …"):
            verdict.checks.append(decode_check(model, gguf_file, exp, consistent_export(target, block), cache_dir))
    return verdict


def run_unavailable(kind: str, target: Path, block, model: str | None, exp: Expected, run_len: int) -> str | None:
    """Why the runtime itself is not run here (a note), or None."""
    rec, mod = record(kind), module(kind)
    if not hasattr(mod, "run"):
        return (f"not run: {rec.label} is not run by ropecli; the checks above follow its code (cited in "
                f"ropecli/export/runtimes/{kind}.py)")
    if model is None:
        return "not run: the run compares with the model the export was made from: pass --model"
    why = run_skipped(exp, run_len, rec.rule != PER_FORWARD or consistent_export(target, block))
    return why or (mod.unavailable() if hasattr(mod, "unavailable") else None)


def shipped_within_Ls(target: Path, kind: str, block, exp: Expected, runtime: str) -> Check | str | None:
    """For a model that ships a schedule: transformers' short_factor must be the shipped schedule (a check); an
    export that replaces it within Ls (vLLM, llama.cpp, --consistent) is flagged (a note)."""
    if record(kind).rule != PER_FORWARD or consistent_export(target, block):
        flag = replaces_shipped(exp.rope, kind, True)
        return f"flag: {flag}" if flag else None
    cfg = block or read_json(target / "config.json")
    text = cfg.get("text_config") or cfg
    blocks = rope_blocks(text.get("rope_parameters") or {})
    b = blocks.get(exp.rope.layer_type) or next(iter(blocks.values()), {})
    if b.get("rope_type") != "longrope":
        return None  # dynamic NTK: its own type, no short variant
    want = exp.rope.shipped.at(exp.rope.rotary_dim, exp.base_of(exp.rope.layer_type))[0]
    short = np.asarray(b.get("short_factor") or [], dtype=np.float64)
    ok = short.shape == want.shape and bool(np.allclose(short, want, rtol=FACTOR_RTOL))
    found = f"max relative difference {float(np.max(np.abs(short / want - 1))):.2g}" if short.shape == want.shape else f"{short.size} factors"
    return Check(runtime, exp.rope.layer_type, f"within Ls = {exp.rope.shipped_len}: short_factor",
                 f"the shipped {exp.rope.shipped.label}", found if ok else found + " (replaces the shipped schedule within Ls)", ok)


def both_forms_agree(target: Path, block, runtime: str) -> list[Check]:
    """Where an artefact carries `rope_scaling` beside `rope_parameters` (for transformers-4 readers and older vLLM),
    the two must be the same block: transformers 5 takes rope_scaling over rope_parameters
    (`convert_rope_params_to_dict`), older vLLM reads only rope_scaling. One check, or none without rope_scaling."""
    cfg = block if block is not None else read_json(target / "config.json")
    text = cfg.get("text_config") or cfg
    v4, v5 = text.get("rope_scaling"), text.get("rope_parameters")
    if not isinstance(v4, dict) or not isinstance(v5, dict) or "rope_type" not in v5:
        return []
    differ = sorted(k for k in set(v4) | set(v5) if v4.get(k) != v5.get(k))
    return [Check(runtime, None, "rope_scaling (transformers 4, older vLLM) = rope_parameters", "the same block",
                  "the same block" if not differ else f"they differ in {', '.join(differ)}", not differ)]


def consistent_export(target: Path, block) -> bool:
    """True when the export's short_factor equals its long_factor (--consistent): scaled at every length."""
    if not target.is_dir() and block is None:  # a GGUF (llama.cpp, Ollama): one schedule at every length
        return True
    cfg = block or read_json(target / "config.json")
    text = cfg.get("text_config") or cfg
    blocks = rope_blocks(text.get("rope_parameters") or {}).values()
    return all(b.get("short_factor") == b.get("long_factor") for b in blocks if b.get("rope_type") == "longrope")
