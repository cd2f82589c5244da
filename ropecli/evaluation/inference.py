"""Paired inference that fits the data: from one document to many (pure numpy/scipy).

Every candidate is scored on the same windows, so a comparison of candidates x and y reads the
per-window differences d_i = x_i - y_i, window i cut from document g(i), windows of one document in
their order along it. Two things make windows differ from independent draws: windows of one
document share it (its style, names, vocabulary), and neighbouring windows of one document move
together (serial correlation). Which question the data can answer depends on how many documents
there are; ropecli picks the inference from the number of documents G among the compared windows:

``documents`` (G >= MIN_DOCUMENTS): the unit is a document. Estimate = the mean over documents of
    each document's mean difference; se = sd of those means / sqrt(G); Student t with G - 1 df. Any
    dependence inside a document (serial correlation included) is inside its mean, so nothing about
    it is assumed. Generalizes to *new documents like these* (the documents being a sample of them).
    Threshold 10: below it a document-level t at the race's corrected level (~0.002) needs t of 4.3
    (df 9) to 10 (df 4) or more, and its size depends on the shape of the document effects, which a
    handful of documents cannot show (simulated: benchmarks/bench_verdicts.py).

``windows`` (G < MIN_DOCUMENTS, one document included): the documents are fixed, and the estimand
    is the mean over *these documents* of each one's mean over every window it holds (each document
    weighted equally). The randomness is the sampling ropecli does: a document's windows are a
    stratified random sample along it (`ropecli.evaluation.data.stratified_order`). So nothing is
    assumed about how neighbouring windows correlate (no AR(1), no phi): the variance of a document's
    mean is estimated from the spread of its sampled windows as if they were a simple random sample,
        v_g = s_g^2 / n_g,  s_g^2 = sum_i (z_i - mean z)^2 / (n_g - 1),  z_i = t_i (d_i - R_g) / mean t
    (R_g the document's estimate, t_i its tokens: the linearized variance of a ratio; t_i = 1 for
    PPL), which over-states the variance of a stratified sample (the spread between strata counts
    as noise: conservative; a text whose loss drifts along it makes it more so, never less), and
    Var(estimate) = sum_g v_g / G^2 with Satterthwaite's df, (sum v_g)^2 / sum v_g^2 / (n_g - 1).
    Where the data cannot say it, the fallback is conservative and said: a document with one window
    borrows the largest per-window variance of the others (and its df: in Satterthwaite's sum it is
    the donor's estimate again, not a new one); when no document has two windows, the
    documents themselves are the units (the t-test over document values, G - 1 df), which needs no
    within-document variance. Checked by simulation with serial correlation up to 0.99 and drift
    along the documents (benchmarks/bench_verdicts.py).

``units`` (no documents: passkey prompts, each with its own key and filler): independent units,
    the ordinary paired t-test with n - 1 df.

Several lengths: window i's objective is the mean over lengths of its values, and window i at two
lengths may come from different documents. Each length gets its own inference, and the mean over
lengths gets se = the mean of the per-length se's (an upper bound whatever the correlation between
lengths: the sd of a mean is at most the mean of the sd's) and the smallest df; it generalizes as
far as its least general length.

Decisions, each at a stated one-sided level a (a race corrects a for its looks and leaders):
    equivalent  both one-sided (1 - a) bounds inside (-margin, +margin) (TOST); checked first
    worse       lower (1 - a) bound of the difference > 0
    undecided   neither
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ropecli.deferred import deferred

stats = deferred("scipy.stats")

CONFIDENCE = 0.95
MIN_DOCUMENTS = 10  # documents from which inference is over documents (generalizes to new ones)
MARGIN = 0.01  # nats of mean log-PPL within which two candidates count as equivalent (PPL within 1.0 %)
POWER = 0.80  # of the units-needed answer

GENERALITY = ["documents", "units", "document units", "windows"]  # the inferences, most general first
GENERALIZES = {"documents": "new documents like these", "windows": "every window of these documents",
               "document units": "the documents of this text", "units": "new prompts drawn the same way"}


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t critical value, e.g. 2.776 for df = 4 at 95%."""
    return float(stats.t.ppf(0.5 + confidence / 2, df))


def t_upper(df: float, a: float) -> float:
    """One-sided critical value: P(T > t) = a."""
    return float(stats.t.isf(a, df))


@dataclass(frozen=True)
class Paired:
    """x - y over paired windows (nats when x, y are NLLs): the estimate (`ropecli.evaluation.estimand`),
    its se and df, and how far it generalizes. `sigma2`, `tau2`, `counts`: the variance model, for
    projecting to more windows (sigma2: the per-window variance inside a document, pooled; tau2: the
    variance of documents' true means)."""
    diff: float | None
    se: float | None
    df: float | None
    n: int
    inference: str  # documents | windows | units | none (nothing to estimate from)
    documents: int | None = None
    counts: tuple = ()  # windows per document
    sigma2: float | None = None  # per-window variance inside a document (pooled over documents)
    tau2: float | None = None  # variance of a document's true mean difference (documents inference)
    doc_var: tuple = ()  # per-window variance of each document (windows inference; projections)
    lengths: int = 1

    @property
    def generalizes_to(self) -> str | None:
        return GENERALIZES.get(self.inference)

    def lower(self, a: float) -> float | None:
        """One-sided (1 - a) lower bound of the difference."""
        if self.diff is None or self.se is None:
            return None
        return self.diff - (t_upper(self.df, a) * self.se if self.se > 0 else 0.0)

    def upper(self, a: float) -> float | None:
        if self.diff is None or self.se is None:
            return None
        return self.diff + (t_upper(self.df, a) * self.se if self.se > 0 else 0.0)

    def half_width(self, confidence: float = CONFIDENCE) -> float | None:
        if self.se is None:
            return None
        return t_quantile(self.df, confidence) * self.se if self.se > 0 else 0.0

    def worse(self, a: float) -> bool:
        """x significantly worse (higher) than y, one-sided at level a."""
        lo = self.lower(a)
        return lo is not None and lo > 0

    def better(self, a: float) -> bool:
        hi = self.upper(a)
        return hi is not None and hi < 0

    def equivalent(self, margin: float, a: float) -> bool:
        """TOST at level a: both one-sided bounds inside (-margin, margin)."""
        lo, hi = self.lower(a), self.upper(a)
        return lo is not None and hi is not None and -margin < lo and hi < margin

    def verdict(self, margin: float, a: float) -> str:
        """'equivalent', 'worse', 'better' or 'undecided' at one-sided level a. Equivalence comes first: a
        gap shown to lie inside ±margin is equivalent even when it is also shown to be non-zero (the
        tie-break is about practical equivalence, and a race keeps such a candidate)."""
        if self.equivalent(margin, a):
            return "equivalent"
        if self.worse(a):
            return "worse"
        return "better" if self.better(a) else "undecided"


def _documents(n: int, docs: list) -> list[np.ndarray]:
    """Window indices grouped by document in order of first appearance (each group in window order)."""
    order: dict = {}
    for i, g in enumerate(docs[:n]):
        order.setdefault(g, []).append(i)
    return [np.array(idx) for idx in order.values()]


def document_values(d: np.ndarray, t: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Each document's estimate: its token-weighted mean of d (a ratio: sum t d / sum t)."""
    return np.array([float(np.dot(t[g], d[g]) / t[g].sum()) for g in groups])


def paired_one(d: np.ndarray, docs: list | None, tokens=None, min_documents: int | None = None) -> Paired:
    """The inference for one length's differences `d`, with the document of each window (None: units)
    and its scored predictions `tokens` (None: equal; key PPL: key predictions, windows with none left out)."""
    min_documents = MIN_DOCUMENTS if min_documents is None else min_documents
    t = np.ones(d.size) if tokens is None else np.asarray(tokens, dtype=np.float64)[:d.size]
    if t.size < d.size:
        raise ValueError(f"{d.size} windows but {t.size} token counts")
    keep = t > 0
    d, t = d[keep], t[keep]
    docs = None if docs is None else [g for g, k in zip(docs, keep) if k]
    n = d.size
    if n == 0:
        return Paired(None, None, None, 0, "none")
    if not np.all(np.isfinite(d)):
        return Paired(None, None, None, n, "diverged")
    if docs is None:
        if n < 2:
            return Paired(float(d.mean()), None, None, n, "none")
        return Paired(float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n - 1.0, n, "units", sigma2=float(d.var(ddof=1)),
                      counts=(1,) * n)
    groups = _documents(n, docs)
    G = len(groups)
    means = document_values(d, t, groups)
    est = float(means.mean())
    counts = tuple(g.size for g in groups)
    within = _within(d, t, groups, means)
    replicated = [v for v, m in zip(within, counts) if m > 1]
    sigma2 = float(np.mean(replicated)) if replicated else None
    if G >= min_documents or (not replicated and G >= 2):  # documents as the units
        se = float(means.std(ddof=1) / math.sqrt(G))
        tau2 = max(0.0, float(means.var(ddof=1)) - (sigma2 or 0.0) * float(np.mean([1 / m for m in counts])))
        return Paired(est, se, G - 1.0, n, "documents" if G >= min_documents else "document units", G, counts, sigma2, tau2)
    if not replicated:
        return Paired(est, None, None, n, "none", G, counts)
    donor = max((i for i, m in enumerate(counts) if m > 1), key=lambda i: within[i])
    per_doc = [v if m > 1 else within[donor] for v, m in zip(within, counts)]
    # Satterthwaite over the independent variance estimates: a borrowing document's term is the donor's
    # estimate again, so it joins the donor's term (its df), not a term of its own
    terms = [within[i] / m for i, m in enumerate(counts) if m > 1]
    dof = [m - 1.0 for m in counts if m > 1]
    terms[[i for i, m in enumerate(counts) if m > 1].index(donor)] += sum(within[donor] / m for m in counts if m == 1)
    var = sum(terms) / G ** 2
    df = sum(terms) ** 2 / sum(t * t / f for t, f in zip(terms, dof)) if var > 0 else float(sum(dof))
    return Paired(est, math.sqrt(var), max(df, 1.0), n, "windows", G, counts, sigma2, doc_var=tuple(per_doc))


def _within(d: np.ndarray, t: np.ndarray, groups: list[np.ndarray], means: np.ndarray) -> list[float]:
    """Per document, the per-window variance of the linearized ratio z_i = t_i (d_i - R_g) / mean t (0 with one window)."""
    out = []
    for g, r in zip(groups, means):
        if g.size < 2:
            out.append(0.0)
            continue
        z = t[g] * (d[g] - r) / t[g].mean()
        out.append(float(z.var(ddof=1)))
    return out


def paired(x, y, docs=None, *, tokens=None, min_documents: int | None = None) -> Paired:
    """x - y, paired. x, y: per-window values (1-D), or per length ([length][window]); docs: the
    document of each window (1-D or per length; None: independent units); tokens: each window's
    scored predictions (the same shapes; None: equal). Windows the two do not share (a race's dropped
    candidate has fewer) are left out: the first min(len) are paired."""
    xs, ys = _per_length(x), _per_length(y)
    if len(xs) != len(ys):
        raise ValueError(f"paired values need the same lengths, got {len(xs)} and {len(ys)}")
    ds = _per_length(docs, len(xs), labels=True) if docs is not None else [None] * len(xs)
    ts = _per_length(tokens, len(xs), labels=True) if tokens is not None else [None] * len(xs)
    parts = []
    for a, b, g, t in zip(xs, ys, ds, ts):
        n = min(a.size, b.size)
        parts.append(paired_one(a[:n] - b[:n], list(g[:n]) if g is not None else None,
                                None if t is None else list(t[:n]), min_documents))
    if len(parts) == 1:
        return parts[0]
    return combine(parts)


def combine(parts: list[Paired]) -> Paired:
    """The mean over lengths of per-length differences: se the mean of the se's (an upper bound), df the
    smallest. A length without units (no key predictions there) is left out, as the estimand leaves it out."""
    parts = [p for p in parts if p.n > 0] or parts
    if len(parts) == 1:
        return parts[0]
    n = min(p.n for p in parts)
    if any(p.diff is None for p in parts):
        return Paired(None, None, None, n, "diverged" if any(p.inference == "diverged" for p in parts) else "none",
                      lengths=len(parts))
    diff = float(np.mean([p.diff for p in parts]))
    if any(p.se is None for p in parts):
        return Paired(diff, None, None, n, "none", lengths=len(parts))
    inference = max((p.inference for p in parts), key=GENERALITY.index)
    return Paired(diff, float(np.mean([p.se for p in parts])), float(min(p.df for p in parts)), n, inference,
                  min(p.documents or 0 for p in parts) or None, lengths=len(parts))


def _per_length(v, k: int | None = None, labels: bool = False) -> list:
    if labels:
        if v is None:
            return [None] * (k or 1)
        if len(v) and isinstance(v[0], (list, tuple)):
            return [list(r) if r is not None else None for r in v]
        return [list(v)] * (k or 1)  # one document list for every length
    arr = [np.asarray(r, dtype=np.float64) for r in v] if len(v) and np.ndim(v[0]) == 1 else [np.asarray(v, dtype=np.float64)]
    return arr
