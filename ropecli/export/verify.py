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
import json
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ropecli.errors import RopeCliError
from ropecli.export.expected import Expected
from ropecli.export.manifest import manifest_path
from ropecli.export.plan import installed_lines, replaces_shipped, works_with_line
from ropecli.export.readback import CONSISTENT, UNREADABLE, Applied, Check, read_json, rope_blocks, unreadable
from ropecli.export.registry import PER_FORWARD, Runtime, RuntimeHooks, names, resolve_runtime
from ropecli.export.switching import decode_check

FACTOR_RTOL = 1e-4  # float32 in every runtime: their factors agree with ropecli's float64 to ~1e-7
ATTENTION_RTOL = 1e-4


@dataclass
class Verdict:
    runtime: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)  # checks planned and not run, each with why: never said OK

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def line(self) -> str:
        """ERROR where a runtime failed to run (nothing learned of the export), else MISMATCH at the first check that
        failed, else OK where every planned check ran and passed; checks that did not run are named "not run"."""
        failed = [c for c in self.checks if c.error]
        if failed:
            c = failed[0]
            return f"{self.runtime}: ERROR: {c.what}: the runtime failed: {c.found}"
        bad = [c for c in self.checks if not c.ok]
        if bad:
            c = bad[0]
            where = f" [{c.layer_type}]" if c.layer_type else ""
            more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
            return f"{self.runtime}: MISMATCH{where}: {c.what}: expected {c.expected}, found {c.found}{more}"
        if self.not_run:
            ran = f"{len(self.checks)} checks pass" if self.checks else "nothing checked"
            return f"{self.runtime}: {ran}; not run: {'; '.join(self.not_run)}"
        return f"{self.runtime}: OK ({len(self.checks)} checks)"


def compare(applied: list[Applied], exp: Expected, rec: Runtime) -> list[Check]:
    """`applied` (read back from `rec`'s artefact) against what was measured, check by check."""
    checks = []
    if not applied:
        want = ", ".join(t for t in exp.rope.scaled_types) or "its RoPE"
        return [Check(rec.name, None, "scaled layer types", want, "none scaled in the artefact", False)]
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
        if a.max_len is not None:  # dynamic NTK keeps L there where the runtime grows from max_position_embeddings
            want_len = exp.rope.train_len if a.how.startswith("dynamic") and rec.dynamic_keeps_L else exp.target_len
            add("declared length", str(want_len), str(a.max_len), a.max_len == want_len)
    return checks




def run_skipped(exp: Expected, run_len: int, consistent: bool) -> str | None:
    """Why a run could not compare like with like, or None."""
    if exp.spec.log_n:
        return ("the export applies log-n as one constant, sqrt(log_L T), where ropecli measured it per "
                "position; their PPLs differ by design")
    switch = exp.switch_len("longrope")
    if run_len <= switch and not consistent:
        return (f"--run-len {run_len} is within L = {switch}, where transformers uses short_factor; "
                f"give a length above L")
    return None


def kind_of(path: Path, runtime: str | None) -> RuntimeHooks:
    """The runtime that reads `path` (`ropecli.export.runtimes`), resolved once into its record and hooks: given, else
    the one its export manifest names, else the first whose module claims the file (a model folder, an Ollama folder, a
    .gguf, a .json block or overrides)."""
    if runtime:
        return resolve_runtime(runtime)

    made = manifest_path(path)
    if made.is_file():
        try:
            named = json.loads(made.read_text()).get("runtime")
            if isinstance(named, str):
                return resolve_runtime(named)
        except (OSError, ValueError, RopeCliError):
            pass
    for name in names():
        if (hooks := resolve_runtime(name)).claims(path):
            return hooks
    if path.is_dir():
        raise RopeCliError(f"{path}: not a model folder (no config.json); pass what `ropecli export` wrote")
    raise RopeCliError(f"{path}: not a model folder, a .json block or a .gguf; pass what `ropecli export` wrote")


def verify_artefact(artefact: Path, hooks: RuntimeHooks, exp: Expected, model: str | None, gguf_file: str | None, *,
                    run: bool = True, run_len: int | None = None, cache_dir: str | None = None,
                    runtime_given: bool = False, status=None) -> Verdict:
    """Read `artefact` back as the runtime `hooks` (resolved once, `kind_of`) reads it, check it against `exp`, and run
    the runtime where ropecli can (`status(text)`: a context manager the CLI shows while a run takes seconds)."""
    rec = hooks.record
    verdict = Verdict(rec.name)
    if exp.spec.position_map and hooks.verify_map is not None:  # a map in the runtime's own config (SGLang: DCA)
        verdict.checks += hooks.verify_map(artefact, exp)
        verdict.notes += [works_with_line(rec, position_map=True), *installed_lines(rec)]
        if rec.map_output == "folder" and hooks.run is not None:  # vLLM serves the folder: run its engine
            why = "--no-run" if not run else run_unavailable(hooks, artefact, None, model, exp,
                                                             run_len or exp.target_len)
            if why:
                verdict.not_run.append(f"{rec.label}'s engine ({why})")
                return verdict
            with (status or (lambda text: nullcontext()))(f"{verdict.runtime}: scoring a window in its engine …"):
                verdict.checks.append(hooks.run(artefact, None, model, exp, run_len or exp.target_len, cache_dir,
                                                gguf_file))
        return verdict
    if exp.spec.position_map:  # llama.cpp's Self-Extend: its flags, not the file
        verdict.notes.append(f"the position map ({exp.spec.position_map.name}) is the runtime's launch flags, not in the "
                             "file: checked here is the schedule the file carries")
        exp = dataclasses.replace(exp, spec=exp.spec.but(position_map=None))
    try:
        applied, block = hooks.read_back(artefact, exp)
    except UNREADABLE as exc:  # a malformed artefact fails in one line
        raise unreadable(artefact, exc) from None
    verdict.checks += compare(applied, exp, rec)
    if rec.output in ("json", "folder-or-json"):
        verdict.checks += both_forms_agree(artefact, block, verdict.runtime)
    if exp.rope.shipped is not None:  # a model that ships a schedule: is it kept within Ls?
        kept = shipped_within_Ls(artefact, rec, block, exp)
        verdict.checks += [kept] if isinstance(kept, Check) else []
        verdict.notes += [kept] if isinstance(kept, str) else []

    verdict.notes += [works_with_line(rec), *installed_lines(rec)]
    if not runtime_given and hooks.claim_note is not None and (note := hooks.claim_note(artefact)):
        verdict.notes.append(note)
    why = "--no-run" if not run else run_unavailable(hooks, artefact, block, model, exp, run_len or exp.target_len)
    if why:
        verdict.not_run.append(f"{rec.label} itself ({why})")
        return verdict
    with (status or (lambda text: nullcontext()))(f"{verdict.runtime}: scoring a window with the export …"):
        verdict.checks.append(hooks.run(artefact, block, model, exp, run_len or exp.target_len, cache_dir, gguf_file))
    if rec.decode_checked and exp.target_len > exp.rope.shipped_len and not exp.spec.log_n:
        with (status or (lambda text: nullcontext()))(f"{rec.name}: decoding across L through the KV cache …"):
            verdict.checks.append(decode_check(rec, model, gguf_file, exp, consistent_export(artefact, block), cache_dir))
    return verdict


def run_unavailable(hooks: RuntimeHooks, artefact: Path, block, model: str | None, exp: Expected, run_len: int) -> str | None:
    """Why the runtime itself is not run here (a note), or None."""
    rec = hooks.record
    if hooks.run is None:
        return (f"ropecli does not run {rec.label}; the checks above follow its code (cited in "
                f"ropecli/export/runtimes/{rec.name}.py)")
    if model is None:
        return "the run compares with the model the export was made from: pass --model"
    why = run_skipped(exp, run_len, rec.rule != PER_FORWARD or consistent_export(artefact, block))
    return why or (hooks.unavailable() if hooks.unavailable is not None else None)


def shipped_within_Ls(artefact: Path, rec: Runtime, block, exp: Expected) -> Check | str | None:
    """For a model that ships a schedule: a per-forward runtime's short_factor must be the shipped schedule (a check);
    an export that replaces it within Ls (vLLM, llama.cpp, --consistent) is flagged (a note)."""
    if rec.rule != PER_FORWARD or consistent_export(artefact, block):
        flag = replaces_shipped(exp.rope, rec, True)
        return f"flag: {flag}" if flag else None
    cfg = block or read_json(artefact / "config.json")
    text = cfg.get("text_config") or cfg
    blocks = rope_blocks(text.get("rope_parameters") or {})
    b = blocks.get(exp.rope.layer_type) or next(iter(blocks.values()), {})
    if b.get("rope_type") != "longrope":
        return None  # dynamic NTK: its own type, no short variant
    want = exp.rope.shipped.at(exp.rope.rotary_dim, exp.base_of(exp.rope.layer_type))[0]
    short = np.asarray(b.get("short_factor") or [], dtype=np.float64)
    ok = short.shape == want.shape and bool(np.allclose(short, want, rtol=FACTOR_RTOL))
    found = f"max relative difference {float(np.max(np.abs(short / want - 1))):.2g}" if short.shape == want.shape else f"{short.size} factors"
    return Check(rec.name, exp.rope.layer_type, f"within Ls = {exp.rope.shipped_len}: short_factor",
                 f"the shipped {exp.rope.shipped.label}", found if ok else found + " (replaces the shipped schedule within Ls)", ok)


def both_forms_agree(artefact: Path, block, runtime: str) -> list[Check]:
    """Where an artefact carries `rope_scaling` beside `rope_parameters` (for transformers-4 readers and older vLLM),
    the two must be the same block: transformers 5 takes rope_scaling over rope_parameters
    (`convert_rope_params_to_dict`), older vLLM reads only rope_scaling. One check, or none without rope_scaling."""
    cfg = block if block is not None else read_json(artefact / "config.json")
    text = cfg.get("text_config") or cfg
    v4, v5 = text.get("rope_scaling"), text.get("rope_parameters")
    if not isinstance(v4, dict) or not isinstance(v5, dict) or "rope_type" not in v5:
        return []
    differ = sorted(k for k in set(v4) | set(v5) if v4.get(k) != v5.get(k))
    return [Check(runtime, None, "rope_scaling (transformers 4, older vLLM) = rope_parameters", "the same block",
                  "the same block" if not differ else f"they differ in {', '.join(differ)}", not differ)]


def consistent_export(artefact: Path, block) -> bool:
    """True when the export's short_factor equals its long_factor (--consistent): scaled at every length."""
    if not artefact.is_dir() and block is None:  # a GGUF (llama.cpp, Ollama): one schedule at every length
        return True
    cfg = block or read_json(artefact / "config.json")
    text = cfg.get("text_config") or cfg
    blocks = rope_blocks(text.get("rope_parameters") or {}).values()
    return all(b.get("short_factor") == b.get("long_factor") for b in blocks if b.get("rope_type") == "longrope")
