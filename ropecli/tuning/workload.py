"""What a schedule costs over the request lengths a user serves, in the runtime that serves it.

A workload is a mix of request lengths with shares (`--workload 2048:0.6,8192:0.3,16384:0.1`, or a file
of request lengths, one per line, histogrammed to the nearest power of two). Its expected loss under a
candidate served by runtime R is

    E = sum_n t_n * NLL_n(the schedule R applies at n)        (nats per served token)
    t_n = w_n n / sum_m w_m m                                  (the share of served tokens in n-token requests)

(a mix of 2048:0.6, 8192:0.3, 16384:0.1 requests is 23/46/31% of tokens: every served token weighs the
same, so the label "nats per token" is what E is)

where NLL_n is the mean NLL per token of an n-token request: the first n tokens of the same windows for
every candidate and length (prefix scoring: `Inputs.spanning`), so E pairs window by window
(e_i = sum_n w_n nll_{i,n}) and candidates are ranked by the verdicts rule (`stats.rank_against_best`).
What R applies at n is `ropecli.export.served` (the rule `verify` reads artefacts with). Each static
candidate is offered to transformers twice: as exported by default (short_factor = 1: switching to the
schedule past L, per forward pass) and `--consistent` (the schedule at every length); vLLM and llama.cpp
apply one schedule to every request, so a switch cannot be served there.
The default workload is the target length alone (the question ropecli always answered): a mix ropecli
invented would weigh short requests by a guess; pass yours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ropecli.errors import RopeCliError


@dataclass(frozen=True)
class Workload:
    shares: dict  # request length -> share of requests (sum 1), lengths ascending
    source: str  # how it was given, in words

    @property
    def lengths(self) -> list[int]:
        return list(self.shares)

    @property
    def longest(self) -> int:
        return max(self.shares)

    @property
    def token_shares(self) -> dict:
        """request length -> its share of the served tokens (w_n n / sum w_m m): E's weights."""
        total = sum(w * n for n, w in self.shares.items())
        return {n: w * n / total for n, w in self.shares.items()}


def parse_workload(text: str | None, target: int | None) -> Workload:
    """--workload: 'N:SHARE,…' (shares normalized), a file of request lengths, or None (the target alone);
    `target` None: the longest request is the target."""
    if not text:
        return Workload({target: 1.0}, f"the target length {target} alone (default)")
    path = Path(text)
    if path.is_file():
        return _from_file(path, target)
    shares: dict[int, float] = {}
    for part in text.split(","):
        try:
            n, w = part.split(":")
            n, w = int(n), float(w)
        except ValueError:
            raise RopeCliError(f"--workload {text!r}: write LENGTH:SHARE pairs, e.g. 2048:0.6,8192:0.3,16384:0.1, "
                               "or name a file of request lengths") from None
        if n < 2 or not (w > 0 and math.isfinite(w)):
            raise RopeCliError(f"--workload {part!r}: a length of at least 2 tokens and a positive share")
        shares[n] = shares.get(n, 0.0) + w
    return _normalized(shares, text, target)


def _from_file(path: Path, target: int) -> Workload:
    lengths = []
    for i, line in enumerate(path.read_text().split(), 1):
        try:
            lengths.append(int(float(line)))
        except (ValueError, OverflowError):  # inf: int() overflows
            raise RopeCliError(f"--workload {path}: entry {i} ({line!r}) is not a request length; one number per line") from None
    if not lengths or min(lengths) < 2:
        raise RopeCliError(f"--workload {path}: no request lengths of at least 2 tokens")
    shares: dict[int, float] = {}
    for n in lengths:  # the nearest power of two (log scale), at most the target
        b = min(2 ** round(math.log2(n)), target or 2 ** 62)
        shares[b] = shares.get(b, 0) + 1
    return _normalized(shares, f"{path} ({len(lengths)} requests, histogrammed to powers of two)", target)


def _normalized(shares: dict[int, float], source: str, target: int | None) -> Workload:
    if target is not None and max(shares) > target:
        raise RopeCliError(f"--workload asks for {max(shares)}-token requests, past the target length {target}; "
                           f"pass --len {max(shares)} (the schedules' target) or shorter requests")
    total = sum(shares.values())
    return Workload({n: shares[n] / total for n in sorted(shares)}, source)
