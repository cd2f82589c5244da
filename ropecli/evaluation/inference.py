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

``windows`` (G < MIN_DOCUMENTS, one document included): the unit is a window, the documents are
    fixed. Estimate = the same mean over documents of document means; the estimand is the mean
    difference over windows of *these documents* (each weighted equally), so a document's own effect
    is part of the estimand, not noise. Windows along a document are modelled as a stationary AR(1)
    series with correlation phi = MAX_SERIAL_CORRELATION (0.8, the most the guarantee is stated
    for; a smaller true phi makes the test conservative):
        Var(estimate) = s^2 / G^2 * sum_g c(n_g) / n_g^2,  c(m) = sum_{s,t<m} phi^|s-t|
    with s^2 = sum_i (d_i - mean d)^2 / (n - sum_g c(n_g) / n), unbiased under that model (the
    spread between documents counts as noise in it: conservative), and df from Satterthwaite's
    rule for that quadratic form, tr(A S)^2 / tr((A S)^2). With one window per document this is the
    ordinary paired t-test.

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
from functools import lru_cache

import numpy as np

CONFIDENCE = 0.95
MIN_DOCUMENTS = 10  # documents from which inference is over documents (generalizes to new ones)
MAX_SERIAL_CORRELATION = 0.8  # AR(1) correlation of neighbouring windows the windows inference is valid up to
MARGIN = 0.01  # nats of mean log-PPL within which two candidates count as equivalent (PPL within 1.0 %)
POWER = 0.80  # of the units-needed answer

GENERALIZES = {"documents": "new documents like these", "windows": "windows of these documents",
               "units": "new prompts drawn the same way"}


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t critical value, e.g. 2.776 for df = 4 at 95%."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


def t_upper(df: float, a: float) -> float:
    """One-sided critical value: P(T > t) = a."""
    from scipy.stats import t

    return float(t.isf(a, df))


@lru_cache(maxsize=4096)
def corr_sum(m: int, phi: float) -> float:
    """c(m) = sum over s, t < m of phi^|s - t|: m times the variance inflation of an AR(1) mean."""
    k = np.arange(1, m)
    return float(m + 2.0 * np.sum((m - k) * phi ** k))


@lru_cache(maxsize=4096)
def _row_sums_sq(m: int, phi: float) -> float:
    """sum over s of (sum over t of phi^|s-t|)^2 for one AR(1) block of m windows."""
    s = np.arange(m)
    if phi == 0:
        return float(m)
    rows = (1 - phi ** (s + 1)) / (1 - phi) + (1 - phi ** (m - s)) / (1 - phi) - 1
    return float(np.sum(rows ** 2))


@lru_cache(maxsize=1024)
def satterthwaite_traces(counts: tuple[int, ...], phi: float) -> tuple[float, float]:
    """(tr(A S), tr((A S)^2)) for A = I - J/n over all windows and S block-diagonal AR(1) per document,
    in closed form: tr(AS) = n - 1'S1/n, tr((AS)^2) = tr(S^2) - 2 |S1|^2/n + (1'S1/n)^2."""
    n = sum(counts)
    one_s_one = sum(corr_sum(m, phi) for m in counts)
    tr_s2 = sum(corr_sum(m, phi * phi) for m in counts)
    s1_sq = sum(_row_sums_sq(m, phi) for m in counts)
    return n - one_s_one / n, tr_s2 - 2 * s1_sq / n + (one_s_one / n) ** 2


@dataclass(frozen=True)
class Paired:
    """x - y over paired windows (nats when x, y are NLLs): the estimate, its se and df, and how far it
    generalizes. `sigma2`, `tau2`, `counts`: the variance model, for projecting to more windows."""
    diff: float | None
    se: float | None
    df: float | None
    n: int
    inference: str  # documents | windows | units | none (nothing to estimate from)
    documents: int | None = None
    counts: tuple = ()  # windows per document (windows inference) or per document (documents inference)
    sigma2: float | None = None  # per-window variance (windows inference)
    tau2: float | None = None  # variance of a document's true mean difference (documents inference)
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


def _documents(d: np.ndarray, docs: list | None) -> tuple[list, list[np.ndarray]]:
    """Windows grouped by document in order of first appearance (each group in window order)."""
    if docs is None:
        return [], []
    order: dict = {}
    for i, g in enumerate(docs):
        order.setdefault(g, []).append(i)
    return list(order), [d[idx] for idx in order.values()]


def paired_one(d: np.ndarray, docs: list | None, phi: float | None = None, min_documents: int | None = None) -> Paired:
    """The inference for one length's differences `d` with the document of each window (None: units)."""
    phi = MAX_SERIAL_CORRELATION if phi is None else phi
    min_documents = MIN_DOCUMENTS if min_documents is None else min_documents
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
    names, groups = _documents(d, docs)
    G = len(groups)
    means = np.array([g.mean() for g in groups])
    est = float(means.mean())
    counts = tuple(g.size for g in groups)
    if G >= min_documents:
        se = float(means.std(ddof=1) / math.sqrt(G))
        within = _within_variance(groups, phi)
        inflate = float(np.mean([corr_sum(m, phi) / m ** 2 for m in counts]))
        tau2 = max(0.0, float(means.var(ddof=1)) - (within or 0.0) * inflate)
        return Paired(est, se, G - 1.0, n, "documents", G, counts, within, tau2)
    trace, trace2 = satterthwaite_traces(counts, phi)
    if n < 2 or trace <= 1e-12:
        return Paired(est, None, None, n, "none", G, counts)
    s2 = float(((d - d.mean()) ** 2).sum() / trace)
    var = s2 / G ** 2 * sum(corr_sum(m, phi) / m ** 2 for m in counts)
    return Paired(est, math.sqrt(var), trace ** 2 / trace2, n, "windows", G, counts, s2)


def _within_variance(groups: list[np.ndarray], phi: float) -> float | None:
    """Per-window variance from the spread inside documents (AR(1)-unbiased); None without replicates."""
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    dof = sum(g.size - corr_sum(g.size, phi) / g.size for g in groups)
    return ss / dof if dof > 1e-12 else None


def paired(x, y, docs=None, *, phi: float | None = None, min_documents: int | None = None) -> Paired:
    """x - y, paired. x, y: per-window values (1-D), or per length ([length][window]); docs: the
    document of each window (1-D or per length; None: independent units). Windows the two do not
    share (a race's dropped candidate has fewer) are left out: the first min(len) are paired."""
    xs, ys = _per_length(x), _per_length(y)
    if len(xs) != len(ys):
        raise ValueError(f"paired values need the same lengths, got {len(xs)} and {len(ys)}")
    ds = _per_length(docs, len(xs), labels=True) if docs is not None else [None] * len(xs)
    parts = []
    for a, b, g in zip(xs, ys, ds):
        n = min(a.size, b.size)
        parts.append(paired_one(a[:n] - b[:n], list(g[:n]) if g is not None else None, phi, min_documents))
    if len(parts) == 1:
        return parts[0]
    return combine(parts)


def combine(parts: list[Paired]) -> Paired:
    """The mean over lengths of per-length differences: se the mean of the se's (an upper bound), df the smallest."""
    n = min(p.n for p in parts)
    if any(p.diff is None for p in parts):
        return Paired(None, None, None, n, "diverged" if any(p.inference == "diverged" for p in parts) else "none",
                      lengths=len(parts))
    diff = float(np.mean([p.diff for p in parts]))
    if any(p.se is None for p in parts):
        return Paired(diff, None, None, n, "none", lengths=len(parts))
    order = ["documents", "units", "windows"]  # least general last
    inference = max((p.inference for p in parts), key=order.index)
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
