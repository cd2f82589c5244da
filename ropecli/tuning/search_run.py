"""`ropecli search-b` and `ropecli search` end to end on an open session (`Bench`): the checks that need no
model (before it loads: `check_search`), the pre-flight (lengths, enough text before the first forward
pass), the one search engine (`ropecli.tuning.search`), and what the run delivers on the main rank: the
winner's transformers block (--export-config) and the picture (--plot). Returns the command's JSON; the
files written are listed in its `written` (the command says so on stderr)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ropecli.errors import RopeCliError
from ropecli.evaluation.metrics import PPL, Metric
from ropecli.export.hf import write_hf_block
from ropecli.export.hf_folder import check_writable
from ropecli.export.registry import record
from ropecli.maps.position_maps import BoundMap
from ropecli.models.config import BUILTIN
from ropecli.report.plots import check_out
from ropecli.report.result_plots import plot_param_search, plot_search
from ropecli.rope.methods import resolve_method
from ropecli.rope.target import Target
from ropecli.spec import COMPOSED_PREFIX, make_spec, parse_params, standard_specs_for
from ropecli.tuning.objective import Bench
from ropecli.tuning.optimizers import golden_evaluations, min_budget
from ropecli.tuning.search import run_search, scorer, search_b
from ropecli.tuning.search_verdicts import parse_reference
from ropecli.tuning.space import ANY_GEOMETRY, Effort, SearchSpace, parse_vary


@dataclass
class SearchPlan:
    """The flags search-b and search share (their Search panel) and where the results go."""
    objective: Metric = PPL  # the record (the command resolves --objective once)
    max_short_regression: float | None = None
    max_short_kl: float | None = None
    export_config: str | None = None  # the winner's transformers rope_parameters block, written here
    race: bool = True  # stop hopeless points early (--no-race: score every point on every window)
    plot: str | None = None
    log_n: bool = False
    factor: float | None = None  # --k as given: the references are checked with it before the model loads
    position_map: BoundMap | None = None  # search: every point under this map (maps.position_maps); its parameters may be --vary
    consistent: bool = True  # --export-config: short_factor = long_factor (generation-safe); --switching: the shipped one
    force: bool = False  # --plot and --export-config may replace an existing file
    source: tuple = (None, None)  # (--model, --gguf-file) as given: the --export-config manifest names them

    @property
    def prompted(self) -> bool:
        """The objective scores prompts (passkey or a RULER task): --depths places their needles."""
        return self.objective.prompted

    def check_paths(self) -> None:
        """--plot and --export-config must be writable: checked before the model loads."""
        if self.position_map and (self.export_config or self.max_short_kl is not None):
            raise RopeCliError("--map: --export-config writes a transformers block, which holds no map (export it to llama.cpp "
                               "with `ropecli export --map`), and --max-short-kl is not measured under a map; leave them out")
        if self.plot:
            check_out(self.plot, self.force, "--plot")
        if self.export_config:
            check_writable(self.export_config, "--export-config", self.force)


def preflight(session: Bench, plan: SearchPlan, target: Target, *sessions: Bench) -> None:
    """Enough text at every length for the session and `sessions` (the held-out one), before any forward pass."""
    for n in target.lengths:
        for s in (session, *sessions):
            s.check(plan.objective.unit_record, n)


def check_something_to_extend(L: int, target: Target) -> None:
    """search-b's refusal where every length is within the training length L (k = 1: every b is the same schedule);
    the command asks it of the model's config before loading, `search_b_on` of the loaded model."""
    if all(n <= L for n in target.lengths) and target.factor is None:
        raise RopeCliError(f"--len {max(target.lengths)} is within the training length L={L}: k = 1, nothing to extend "
                           f"(every b gives the same perplexity); give a --len above {L}, e.g. --len {8 * L}")


def search_b_on(session: Bench, plan: SearchPlan, target: Target, lo: float, hi: float, tol: float) -> dict:
    """search-b: golden-section over the mixed b, then the standard methods on the same windows; refused before any
    forward pass where every length is within the training length (k = 1: every b is the same schedule)."""
    check_something_to_extend(session.rope.train_len, target)
    preflight(session, plan, target)
    lengths, geom = list(target.lengths), target.geom
    windows = session.inputs.count(plan.objective)
    # the golden section, then the references: an upper bound (a screened point stops early; b = 0, 1 are PI and
    # NTK-fixed, reused); a guard's passes within L tick beyond it and grow the bar
    planned = (golden_evaluations(lo, hi, tol) + len(standard_specs_for(geom))) * session.inputs.units(plan.objective) \
        * len(lengths)
    with session.progress.task(planned, "search-b"):
        out = search_b(session.run, target, lo=lo, hi=hi, tol=tol, log_n=plan.log_n,
                       max_short_regression=plan.max_short_regression, max_short_kl=plan.max_short_kl,
                       objective=plan.objective, windows=windows, screen=plan.race)
    out = {**session.header(), **out, "screened": plan.race, **session.tally()}
    title = f"search-b on {session.rope.name}: lengths {', '.join(map(str, lengths))}" + (" (log-n)" if plan.log_n else "")
    deliver(session, plan, out, ("mixed", {"b": out["best_b"]}), geom.factor,
            lambda path: plot_search(out["evaluations"], out["references"], out["best_b"], path, plan.objective.name, title))
    if plan.export_config and out["written"] and out.get("references_beating_best_b"):
        out["written"].append(preferred_export_line(plan, out["references_beating_best_b"][0], target))
    return out


def preferred_export_line(plan: SearchPlan, label: str, target: Target) -> str:
    """search-b's --export-config holds the best b, as the flag says; where its verdict prefers a reference (one shown
    better than the best b, paired 95 %), the line that says so and the export of that one instead (the reference's
    spec as the search made it: `reference_rows`)."""
    specs = standard_specs_for(target.geom, factor=target.factor, log_n=plan.log_n)
    spec = next((s for s in specs if s.label == label), None)
    said = (f"note: {plan.export_config} holds mixed(b), as --export-config writes; the verdict prefers {label} (shown "
            "better than the best b, paired 95 %)")
    if spec is None:
        return f"{said}: export it with `ropecli export --method …` (`ropecli export --help`)"
    model, gguf_file = plan.source
    flags = [f"--model {shlex.quote(model or BUILTIN)}"]  # search-b's default model; export's is a geometry by hand
    flags += [f"--gguf-file {shlex.quote(gguf_file)}"] if gguf_file else []
    flags += [f"--method {COMPOSED_PREFIX if spec.composed else ''}{spec.method}",
              *[f"--param {k}={v:g}" for k, v in spec.params], f"--len {target.longest}"]
    flags += [f"--k {target.factor:g}"] if target.factor is not None else []
    flags += ["--log-n"] if plan.log_n else []
    flags += [] if plan.consistent else ["--switching"]
    return (f"{said}: to export it instead, ropecli export {' '.join(flags)} --to transformers --out "
            f"{shlex.quote(plan.export_config)} --force")


def check_search(method: str, vary: list[str] | None, param: list[str] | None, budget: int, optimizer: str,
                 references: list[str] | None, plan: SearchPlan):
    """What `ropecli search` can check before the model loads: (method, fixed parameters, reference specs)."""
    method, fixed = resolve_method(method).name, parse_params(param)
    dims = parse_vary(vary, method, ANY_GEOMETRY, plan.position_map)  # now; critical's bound d/2 once the model is read
    clash = [d.name for d in dims if d.name in fixed]
    if clash:
        raise RopeCliError(f"{clash[0]} is both varied (--vary) and fixed (--param); pass it once")
    if budget < min_budget(len(dims)):
        raise RopeCliError(f"--budget {budget} is below the minimum {min_budget(len(dims))} for {len(dims)} parameter(s)")
    if optimizer == "golden" and len(dims) != 1:
        raise RopeCliError("--optimizer golden searches one parameter; pass one --vary, or use powell")
    make_spec(method, fixed)  # a fixed value outside the domain fails before the model loads
    return method, fixed, [parse_reference(r, plan.factor, plan.log_n) for r in references or []]


def search_on(session: Bench, plan: SearchPlan, target: Target, method: str, vary: list[str] | None,
              fixed: dict, refs: list, budget: int, optimizer: str, held_out: int | None) -> dict:
    """search: any method's parameters on the searched windows, the verdict on held-out ones (other documents)."""
    held = session.held_out(held_out)  # splits the documents: the searched windows are checked again
    preflight(session, plan, target, held)
    lengths, geom = list(target.lengths), target.geom
    dims = parse_vary(vary, method, geom, plan.position_map)  # default bounds from the model's geometry (critical: 1 … d/2)
    space = SearchSpace(method, tuple(dims), fixed, plan.log_n, plan.position_map)
    effort = Effort(budget, optimizer, windows=session.inputs.count(plan.objective), screen=plan.race)
    score = scorer(session.run, target, plan.objective, plan.max_short_regression, plan.max_short_kl)
    references = 1 + (len(refs) or len(standard_specs_for(geom)))  # the winner and the references, held out
    units, held_units = session.inputs.units(plan.objective), held.inputs.units(plan.objective)
    planned = (budget * units + references * (units + held_units)) * len(lengths)  # an upper bound, as search-b's
    with session.progress.task(planned, "search"):
        out = run_search(session.run, target, space, effort, score, held_out_run=held.run, references=refs)
    out = {**session.header(), **out, "held_out_windows": held.inputs.samples,
           "held_out_first_window": held.inputs.first_window_at(target.longest),
           "held_out_split": held.inputs.split_note(target.longest), "screened": plan.race, **session.tally(held)}
    if plan.prompted:  # a passkey or task objective: what was searched and held out are prompts per depth
        out.update(searched_prompts=[session.inputs.prompt_start, session.inputs.per_depth],
                   held_out_prompts=[held.inputs.prompt_start, held.inputs.per_depth],
                   held_out_split="held out by prompt: prompts of their own seeds (needles, keys, haystack cuts) "
                                  "from the same text; the windows' split by document does not apply to prompts")
    title = f"search {method} on {session.rope.name}: lengths {', '.join(map(str, lengths))}"
    deliver(session, plan, out, (method, {**fixed, **out["best_params"]}), geom.factor,
            lambda path: plot_param_search(out, path, title))
    return out


def deliver(session: Bench, plan: SearchPlan, out: dict, winner: tuple, factor: float, draw) -> None:
    """On the main rank: the winner's transformers block to --export-config, the picture to --plot."""
    out["written"] = []
    if not session.is_main:
        return
    if plan.export_config:
        out["export_config"] = write_hf_block(plan.export_config, session.rope, make_spec(*winner, log_n=plan.log_n), factor,
                                             record("transformers"), plan.consistent, *plan.source)
        out["written"].append(f"wrote {plan.export_config}: {out['export_config']['note']}")
    if plan.plot:
        draw(plan.plot)
        out["written"].append(f"wrote {plan.plot}")
