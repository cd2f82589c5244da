"""The sample-size answer: what would decide an undecided comparison, in the unit that helps (more
windows of these documents, or more documents), under the variance model the inference used
(`ropecli.evaluation.inference`). Decided means shown worse when the true gap is the observed one, or
shown equivalent when it is smaller, each with 80% power at the comparison's level; the t quantiles
use the df the model would have with that many units (Satterthwaite's for the windows inference).
Projections keep each document's per-window variance; windows spread round-robin over the documents.
"""

from __future__ import annotations

import math

from ropecli.evaluation.inference import MARGIN, POWER, Paired, t_upper


def projected(p: Paired, windows: int | None = None, documents: int | None = None) -> tuple[float | None, float | None]:
    """(se, df) the same variance model gives with `windows` in all (round-robin over the documents)
    and, for the documents inference, `documents` documents."""
    if p.se is None:
        return None, None
    n = windows or p.n
    if p.inference == "units":
        return p.se * math.sqrt(p.n / max(n, 1)), n - 1.0
    if p.inference == "windows" and p.doc_var:
        G = p.documents or 1
        counts = [max(m, 1) for m in _spread(n, G)]
        v = [s2 / m for s2, m in zip(p.doc_var, counts)]
        dof = sum(x * x / max(m - 1, 1) for x, m in zip(v, counts))
        return math.sqrt(sum(v)) / G, (sum(v) ** 2 / dof if dof > 0 else float(n - G))
    if p.inference in ("documents", "document units"):
        G = documents or p.documents
        if p.sigma2 is None or p.tau2 is None:
            return p.se * math.sqrt((p.documents or 1) / G), G - 1.0
        per_doc = max(1, n // G)
        return math.sqrt((p.tau2 + p.sigma2 / per_doc) / G), G - 1.0
    return None, None


def projected_se(p: Paired, windows: int | None = None, documents: int | None = None) -> float | None:
    return projected(p, windows, documents)[0]


def _spread(n: int, G: int) -> list[int]:
    return [n // G + (1 if g < n % G else 0) for g in range(G)]


def units_needed(p: Paired, a: float, margin: float = MARGIN, power: float = POWER, limit: int = 1 << 16) -> dict:
    """{'windows': N} (more windows of these documents), {'documents': N} (the documents inference:
    new documents needed, more windows of these cannot shrink the spread between them), or
    {'reachable': False, 'why': ...}."""
    if p.diff is None or p.se is None or p.se <= 0:
        return {"reachable": False, "why": "no spread to size from"}
    gap = abs(p.diff)

    def decides(se_df: tuple) -> bool:  # showing it worse, or equivalent: whichever comes first
        se, df = se_df
        if se is None or df is None or df <= 0:
            return False
        return max(gap, margin - gap) >= (t_upper(df, a) + t_upper(df, 1 - power)) * se

    if p.inference in ("documents", "document units"):
        if not decides(projected(p, windows=10 ** 6)):  # more windows of these documents: the document spread stays
            G = p.documents
            while G < limit and not decides(projected(p, windows=p.n * G // p.documents, documents=G)):
                G *= 2
            return {"documents": G, "reachable": G < limit}
    hi = p.n + 1  # double until decided, then bisect: the fewest windows that decide it
    while hi < limit and not decides(projected(p, windows=hi)):
        hi *= 2
    if hi >= limit:
        return {"reachable": False, "why": f"more than {limit} windows"}
    lo = max(p.n, hi // 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if decides(projected(p, windows=mid)) else (mid, hi)
    return {"windows": hi, "reachable": True}
