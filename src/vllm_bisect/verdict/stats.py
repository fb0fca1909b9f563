"""Pure statistics for reports: the effect of a culprit with its 95% confidence interval,
from the requests (a bootstrap), from the servers' means (a t interval: a two-level
measurement's unit is the server), or none needed (no spread on either side)."""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from vllm_bisect.text import plural

MIN_CI = 5   # requests a side before a bootstrap interval means anything (issue 42: none from 2)


class Interval(StrEnum):
    """What the effect's interval rests on."""

    BOOTSTRAP = "bootstrap"   # the requests, resampled (MIN_CI a side at least)
    SERVERS = "servers"       # the servers' means (log scale), a pooled-variance t interval
    EXACT = "exact"           # every request of each side the same: the change itself
    NONE = "none"             # too few requests and servers for any


@dataclass(frozen=True)
class Effect:
    metric: str
    before: float
    after: float
    change: float            # relative: +6.12 means +612%
    ci_low: float | None     # None when there is no interval (``Interval.NONE``)
    ci_high: float | None
    n_before: int            # requests
    n_after: int
    servers_before: int = 1
    servers_after: int = 1
    interval: Interval = Interval.BOOTSTRAP

    def over(self) -> str:
        """The requests, and the servers, it rests on: ``10 requests a side on one server
        each``, ``3 vs 4 requests on 2 vs 3 servers``."""
        b, a, sb, sa = self.n_before, self.n_after, self.servers_before, self.servers_after
        n = plural(b, "request") + " a side" if b == a else f"{b} vs {a} requests"
        if sb <= 1 and sa <= 1:
            return f"{n} on one server each"
        return f"{n} on {sb} servers a side" if sb == sa else f"{n} on {sb} vs {sa} servers"

    def describe(self, unit: str = "", sides: tuple[str, str] = ("before", "after")) -> str:
        """One line: the change, its interval and what it rests on; ``sides`` names the two
        (the parent and the culprit)."""
        b, a = _num(self.before), _num(self.after)
        head = f"{self.metric} {b} -> {a}{unit}"
        pct = f"{self.change * 100:+.0f}%"
        if self.interval is Interval.EXACT:
            return (f"{head} ({pct}, the same on every request: {b} on each of "
                    f"{sides[0]}'s {_runs(self.n_before, self.servers_before)}, "
                    f"{a} on each of {sides[1]}'s "
                    f"{_runs(self.n_after, self.servers_after)}; no spread, so no interval "
                    "to give)")
        if self.ci_low is None or self.ci_high is None:
            return f"{head} ({pct}; no CI from {self.over()}: {MIN_CI} requests a side at least)"
        ci = f"[{self.ci_low * 100:+.0f}%, {self.ci_high * 100:+.0f}%]"
        if self.interval is Interval.SERVERS:
            return (f"{head} ({pct} {ci}, 95% t interval over the servers' means: "
                    f"{self.over()})")
        return f"{head} ({pct} {ci}, 95% bootstrap CI over {self.over()})"


def _num(x: float) -> str:
    """3 significant digits, never an exponent (1000 tokens, not 1e+03)."""
    return f"{x:.0f}" if abs(x) >= 999.5 else f"{x:.3g}"


def _runs(n: int, servers: int) -> str:
    return plural(n, "request") + (f" on {servers} servers" if servers > 1 else "")


def bootstrap_change(before: list[float], after: list[float], metric: str,
                     resamples: int = 4000, seed: int = 0, servers: tuple[int, int] = (1, 1)
                     ) -> Effect | None:
    """Relative change of the mean, after vs before, with a 95% BCa bootstrap CI
    (``scipy.stats.bootstrap``, the two samples resampled independently); no spread on
    either side (3 requests in all at least): the change itself (``Interval.EXACT``).
    ``servers``: the servers each side's requests came from (said, not used:
    :func:`server_change` uses them)."""
    if not before or not after or statistics.fmean(before) == 0:
        return None
    b, a = statistics.fmean(before), statistics.fmean(after)
    change = a / b - 1.0
    sides = (len(before), len(after), servers[0], servers[1])
    if len(set(before)) == 1 and len(set(after)) == 1 and len(before) + len(after) >= 3:
        return Effect(metric, b, a, change, change, change, *sides, Interval.EXACT)
    if len(before) >= MIN_CI and len(after) >= MIN_CI:
        lo, hi = _ci(before, after, change, resamples, seed)
        return Effect(metric, b, a, change, lo, hi, *sides)
    return Effect(metric, b, a, change, None, None, *sides, Interval.NONE)


def server_change(before: list[list[float]], after: list[list[float]], metric: str
                  ) -> Effect | None:
    """The change of a two-level measurement (a level per server plus per-request noise)
    with its interval over the servers: each server's mean of the logs is one unit, a
    Student t interval on the difference of the two sides' means with the pooled variance
    (one server-to-server spread, as the two-level model assumes), so 1 server on a side
    is enough when the other has 2. None when fewer than 3 servers in all, or a value is
    not positive."""
    b_groups = [g for g in before if g]
    a_groups = [g for g in after if g]
    if (len(b_groups) + len(a_groups) < 3 or not b_groups or not a_groups
            or any(x <= 0 for g in (*b_groups, *a_groups) for x in g)):
        return None
    from scipy.stats import t as student_t

    bm = [statistics.fmean(math.log(x) for x in g) for g in b_groups]
    am = [statistics.fmean(math.log(x) for x in g) for g in a_groups]
    diff = statistics.fmean(am) - statistics.fmean(bm)
    df = len(bm) + len(am) - 2
    ss = sum((x - statistics.fmean(bm)) ** 2 for x in bm) + sum(
        (x - statistics.fmean(am)) ** 2 for x in am)
    half = float(student_t.ppf(0.975, df)) * math.sqrt(ss / df * (1 / len(bm) + 1 / len(am)))
    return Effect(metric, math.exp(statistics.fmean(bm)), math.exp(statistics.fmean(am)),
                  math.exp(diff) - 1.0, math.exp(diff - half) - 1.0, math.exp(diff + half) - 1.0,
                  sum(map(len, b_groups)), sum(map(len, a_groups)), len(b_groups),
                  len(a_groups), Interval.SERVERS)


def _ci(before: list[float], after: list[float], change: float, resamples: int,
        seed: int) -> tuple[float, float]:
    if len(set(before)) == 1 and len(set(after)) == 1:
        return change, change  # no spread: every resample gives the same change
    import numpy as np
    from scipy.stats import bootstrap

    def ratio(x: Any, y: Any, axis: int = -1) -> Any:
        den = np.mean(x, axis=axis)
        return np.mean(y, axis=axis) / np.where(den == 0, np.nan, den) - 1.0

    for method in ("BCa", "percentile"):  # BCa is undefined when a jackknife degenerates
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bootstrap((before, after), ratio, n_resamples=resamples, vectorized=True,
                            method=method, confidence_level=0.95,
                            rng=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi
    return change, change
