"""Paired comparisons: is a difference between two schedules above the noise of the windows, and
how many windows would decide it when it is not?

Every candidate is scored on the same windows (or the same passkey prompts), so differences are
paired: for candidate x and the best y, d_i = x_i - y_i per window i (per-window mean NLL for PPL,
answer NLL per prompt for passkey, mean KL per window for KL; with several lengths, x_i is the mean
over lengths of window i's values, window i being the i-th window at each length). Then

    diff = mean(d),   se = std(d, ddof=1) / sqrt(n),   half = t(0.975, df) * se,   df = n - 1

and x is *distinguishable* from y at 95% when |diff| > half (a two-sided paired t-test). With one
window there is no spread: se is None and nothing is called distinguishable. With identical values
on every window (se = 0) a non-zero diff is distinguishable. Pairing removes what every schedule
shares (how hard a window's text is), which is most of the across-window spread: a 0.003-nat gap can
be real with 4 windows when the paired spread is small, and noise when it is not.

Clustered standard errors: windows cut from one document are not independent draws (they share its
style, its names, its vocabulary), so when `clusters` (the source document of each unit) repeat, se is
the cluster-robust (CR1) one, df = G - 1 with G documents:

    se^2 = G / (G - 1) * sum_g (sum_{i in g} (d_i - diff))^2 / n^2

which is the ordinary se when every window has its own document. `se_iid` keeps the ordinary one
beside it. With every window from one document there is nothing to cluster on: the ordinary se is
used, and the result carries no `clustered` key.

Windows needed: a difference that is not distinguishable gets `windows_needed`, the n at which a
paired two-sided test at 95% has 80% power for a true difference of the observed size, with the
observed per-window spread (design effect included): n * ((z(0.975) + z(0.80)) * se / diff)^2.
"""

from __future__ import annotations

import math

import numpy as np

CONFIDENCE = 0.95
POWER = 0.80  # of the windows-needed answer


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t critical value, e.g. 2.776 for df = 4 at 95%."""
    from scipy.stats import t

    return float(t.ppf(0.5 + confidence / 2, df))


def z_quantile(p: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(p))


def windows_needed(diff: float | None, se: float | None, n: int, alpha: float = 1 - CONFIDENCE,
                   power: float = POWER) -> int | None:
    """Units a paired two-sided test at level `alpha` needs for `power` against a true difference of |diff|,
    with the per-unit spread that gives standard error `se` on n units; None when there is nothing to size."""
    if diff is None or se is None or not diff or not math.isfinite(diff) or se <= 0:
        return None
    z = z_quantile(1 - alpha / 2) + z_quantile(power)
    return max(n + 1, math.ceil(n * (z * se / diff) ** 2))


def clustered_se(d: np.ndarray, clusters: list | None) -> tuple[float, int, int | None]:
    """(se, df, G) of mean(d): cluster-robust (CR1) over the documents of `clusters` when some document
    gives several units and there are at least two; else the ordinary se (G None)."""
    n = d.size
    iid = float(d.std(ddof=1) / math.sqrt(n))
    if clusters is None or len(clusters) != n:
        return iid, n - 1, None
    labels = sorted(set(clusters), key=str)
    if len(labels) == n or len(labels) < 2:
        return iid, n - 1, None
    resid = d - d.mean()
    sums = np.array([resid[[i for i, c in enumerate(clusters) if c == g]].sum() for g in labels])
    G = len(labels)
    return float(math.sqrt(G / (G - 1) * float((sums ** 2).sum()) / n ** 2)), G - 1, G


def paired_difference(x, y, clusters: list | None = None) -> dict:
    """x - y over paired units: {diff, se, half_width, n, distinguishable, …} (nats when x, y are NLLs);
    `clusters`: the source document of each unit (windows of one document are clustered)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired values need the same non-empty 1-D shape, got {x.shape} and {y.shape}")
    d = x - y
    n = d.size
    diff = float(d.mean())
    if not np.all(np.isfinite(d)):
        return {"diff": diff if math.isfinite(diff) else None, "se": None, "half_width": None, "n": n,
                "distinguishable": bool(np.isfinite(x).sum() != np.isfinite(y).sum())}
    if n < 2:
        return {"diff": diff, "se": None, "half_width": None, "n": n, "distinguishable": False}
    se, df, G = clustered_se(d, clusters)
    half = t_quantile(df) * se
    out = {"diff": diff, "se": se, "half_width": half, "n": n,
           "distinguishable": bool(abs(diff) > half) if se > 0 else diff != 0.0}
    if G is not None:
        out.update(clustered=True, documents=G, se_iid=float(d.std(ddof=1) / math.sqrt(n)))
    if not out["distinguishable"]:
        out["windows_needed"] = windows_needed(diff, se, n)
    return out


def tie_answer(p: dict, unit: str = "windows") -> str:
    """'tied after 4 windows; resolving a difference of this size (+0.019 nats) at 95% needs about 38
    windows (80% power)' for a pair that is not distinguishable."""
    n, need = p.get("n"), p.get("windows_needed")
    if p.get("distinguishable"):
        return f"decided after {n} {unit}"
    if need is None:
        return f"tied after {n} {unit}" + ("; no difference to resolve" if p.get("diff") == 0 else "")
    return (f"tied after {n} {unit}; resolving a difference of this size ({p['diff']:+.3g}) at 95% needs about "
            f"{need} {unit} (80% power)")


def rank_against_best(values: dict, clusters: list | None = None) -> dict:
    """label -> paired difference to the best label (the lowest mean), with `best` and `tied` (not
    distinguishable from the best at 95%; the best is tied with itself). Labels scored on fewer
    windows (dropped by a race) pair on the windows they share, the first ones; the best is chosen
    among those scored on the most."""
    finite = {k: v for k, v in values.items() if np.all(np.isfinite(v))}
    if not finite:
        return {k: {"best": False, "tied": False, "diff": None, "se": None, "half_width": None, "n": len(v),
                    "distinguishable": True} for k, v in values.items()}
    most = max(len(v) for v in finite.values())
    best = min((k for k, v in finite.items() if len(v) == most), key=lambda k: float(np.mean(finite[k])))
    out = {}
    for k, v in values.items():
        n = min(len(v), len(values[best]))
        p = paired_difference(v[:n], values[best][:n], clusters[:n] if clusters else None)
        out[k] = {**p, "best": k == best, "tied": k == best or not p["distinguishable"]}
        if k == best:
            out[k].pop("windows_needed", None)
    return out


def mean_over_lengths(per_length: list[list[float]]) -> list[float]:
    """Per-window values at several lengths -> one value per window index (the mean over lengths)."""
    arr = np.asarray([[math.inf if v is None else v for v in row] for row in per_length], dtype=np.float64)
    return [float(v) for v in arr.mean(axis=0)]


def clusters_over_lengths(per_length: list[list[str] | None]) -> list[int] | None:
    """The source documents of window i at each length -> one cluster id per window index: windows i
    and j share a cluster when they share a document at any length (connected components)."""
    rows = [r for r in per_length if r is not None]
    if not rows:
        return None
    n = len(rows[0])
    parent = list(range(n))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for names in rows:
        first: dict[str, int] = {}
        for i, name in enumerate(names[:n]):
            if name in first:
                parent[root(i)] = root(first[name])
            else:
                first[name] = i
    return [root(i) for i in range(n)]


def attach_paired(results: list) -> list[dict]:
    """The results (EvalResults) as JSON rows, each with `vs_best`: its paired difference to the best
    result of the same metric and length (the best by mean of `values`: lowest NLL, answer NLL or KL),
    and whether it is tied with it."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(results):
        groups.setdefault((r.metric, r.len), []).append(i)
    out = [r.to_json() for r in results]
    for idx in groups.values():
        widest = max(idx, key=lambda i: len(results[i].values))  # its windows' documents cover every other's
        ranked = rank_against_best({i: results[i].values for i in idx}, results[widest].clusters)
        for i in idx:
            out[i]["vs_best"] = ranked[i]
    return out


def fmt_diff(p: dict) -> str:
    """'+0.0214 ± 0.0031' (nats, ± one standard error); 'best' for the best; '—' without a number."""
    if p.get("best"):
        return "best"
    if p.get("diff") is None:
        return "—"
    se = f" ± {p['se']:.2g}" if p.get("se") is not None else ""
    return f"{p['diff']:+.4f}{se}"
