"""Pure statistics for reports: the effect of a culprit with its 95% confidence interval,
from the requests (a bootstrap), from the servers' means (a t interval: a two-level
measurement's unit is the server), or none needed (no spread on either side)."""

from __future__ import annotations

import math
import statistics
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
    spread: Spread | None = None   # SERVERS: the noise it rests on (the session's servers)

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
            sp = self.spread
            pooled = (f"; server level ~{math.sqrt(sp.tau2) * 100:.1f}%, request noise "
                      f"~{math.sqrt(sp.sigma2) * 100:.1f}%, from "
                      f"{plural(sp.servers, 'server')} of {plural(sp.commits, 'commit')}"
                      if sp else "")
            return (f"{head} ({pct} {ci}, 95% t interval over the servers' means: "
                    f"{self.over()}{pooled})")
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


@dataclass(frozen=True)
class Spread:
    """A two-level measurement's noise (logs): the per-request variance within a server and
    the server level's variance, estimated from every server of the session that shows it
    (the requests about their server's mean; the servers about their commit's), with the
    degrees of freedom and the servers and commits behind them."""

    sigma2: float
    tau2: float
    df_within: int
    df_between: int
    servers: int
    commits: int


def server_spread(commits: list[list[list[float]]]) -> Spread | None:
    """:class:`Spread` from each commit's servers (natural-scale samples, one list a
    server), by moments: sigma^2 from the requests about their server's mean; tau^2 from
    the server means about their commit's mean, less what sigma^2 / n puts there (0 at
    least). None when no commit had two servers nor any server two requests."""
    ssw, dfw, ssb, dfb, inv, servers, n = 0.0, 0, 0.0, 0, 0.0, 0, 0
    for groups in commits:
        logs = [[math.log(x) for x in g] for g in groups if g and all(x > 0 for x in g)]
        if not logs:
            continue
        means = [statistics.fmean(g) for g in logs]
        ssw += sum((x - m) ** 2 for g, m in zip(logs, means, strict=True) for x in g)
        dfw += sum(len(g) - 1 for g in logs)
        servers, n = servers + len(logs), n + 1
        k = len(means)
        if k >= 2:   # E[sum (m_i - mean)^2] = (k-1)/k * sum (tau^2 + sigma^2 / n_i)
            mu = statistics.fmean(means)
            ssb += sum((m - mu) ** 2 for m in means)
            dfb += k - 1
            inv += (k - 1) / k * sum(1 / len(g) for g in logs)
    if not dfw and not dfb:
        return None
    sigma2 = ssw / dfw if dfw else 0.0
    tau2 = max(0.0, (ssb - sigma2 * inv) / dfb) if dfb else 0.0
    if not dfw:   # no server with two requests: the servers' spread holds both
        tau2 = ssb / dfb
    return Spread(sigma2, tau2, dfw, dfb, servers, n)


def server_change(before: list[list[float]], after: list[list[float]], metric: str,
                  spread: Spread | None) -> Effect | None:
    """The change of a two-level measurement (a level per server plus per-request noise)
    between two commits' servers, with its 95% t interval over the servers' means: a side's
    mean varies by (tau^2 + sigma^2 / n_i) / k^2 summed over its k servers, ``spread``
    estimated from every server of the session (these included). None without it, or when
    a value is not positive."""
    b_groups = [g for g in before if g]
    a_groups = [g for g in after if g]
    if (spread is None or not b_groups or not a_groups
            or any(x <= 0 for g in (*b_groups, *a_groups) for x in g)):
        return None
    from scipy.special import stdtrit  # (the t quantile: scipy.stats costs 0.4-0.9 s to load)

    def side(groups: list[list[float]]) -> tuple[float, float]:
        means = [statistics.fmean(math.log(x) for x in g) for g in groups]
        var = sum(spread.tau2 + spread.sigma2 / len(g) for g in groups) / len(groups) ** 2
        return statistics.fmean(means), var

    (mb, vb), (ma, va) = side(b_groups), side(a_groups)
    # the server level's degrees of freedom when it counts, else the requests'
    df = spread.df_between if spread.tau2 > 0 and spread.df_between else (
        spread.df_within or spread.df_between)
    half = float(stdtrit(df, 0.975)) * math.sqrt(vb + va)
    diff = ma - mb
    return Effect(metric, math.exp(mb), math.exp(ma), math.exp(diff) - 1.0,
                  math.exp(diff - half) - 1.0, math.exp(diff + half) - 1.0,
                  sum(map(len, b_groups)), sum(map(len, a_groups)), len(b_groups),
                  len(a_groups), Interval.SERVERS, spread)


def _ci(before: list[float], after: list[float], change: float, resamples: int,
        seed: int) -> tuple[float, float]:
    if len(set(before)) == 1 and len(set(after)) == 1:
        return change, change  # no spread: every resample gives the same change
    for bca in (True, False):  # BCa is undefined when a jackknife degenerates
        lo, hi = bootstrap_interval(before, after, resamples, seed, bca)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi
    return change, change


def _ratio(x: Any, y: Any) -> Any:
    """mean(y) / mean(x) - 1 along the last axis (NaN where mean(x) is 0)."""
    import numpy as np

    den = np.mean(x, axis=-1)
    return np.mean(y, axis=-1) / np.where(den == 0, np.nan, den) - 1.0


def bootstrap_interval(before: list[float], after: list[float], resamples: int, seed: int,
                       bca: bool = True, level: float = 0.95) -> tuple[float, float]:
    """The ``level`` bootstrap interval of mean(after) / mean(before) - 1, the two samples
    resampled independently: BCa (bias-corrected and accelerated, Efron & Tibshirani 14.3,
    15.4) or percentile. The same numbers as ``scipy.stats.bootstrap((before, after), ...,
    method="BCa" | "percentile", rng=np.random.default_rng(seed))`` (the same draws, in the
    same order; tests/verdict/test_stats.py holds them side by side) without importing
    scipy.stats, which cost every run that writes a report 0.4-0.9 s of CPU. NaN where BCa
    is undefined (a degenerate jackknife, or every resample on one side of the estimate)."""
    import numpy as np

    x, y = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    rng = np.random.default_rng(seed)
    xb = x[rng.integers(0, len(x), (resamples, len(x)), dtype=np.int64)]
    yb = y[rng.integers(0, len(y), (resamples, len(y)), dtype=np.int64)]
    theta_b = _ratio(xb, yb)
    if np.isnan(theta_b).any():   # a resample whose before-mean is 0: no interval either way
        return math.nan, math.nan
    alpha = (1.0 - level) / 2
    q = (alpha, 1.0 - alpha)
    if bca:
        theta = float(_ratio(x, y))
        below = int(np.count_nonzero(theta_b < theta) + np.count_nonzero(theta_b <= theta))
        share = below / (2 * resamples)
        num = den = 0.0
        for j, sample in enumerate((x, y)):   # the acceleration: a jackknife per sample
            n = len(sample)
            leave = sample[np.arange(n)[None, :].repeat(n, 0)[~np.eye(n, dtype=bool)]
                           .reshape(n, n - 1)]
            th = _ratio(leave, y) if j == 0 else _ratio(x, leave)
            u = (n - 1) * (th.mean() - th)
            num += float((u ** 3).sum()) / n ** 3
            den += float((u ** 2).sum()) / n ** 2
        if not 0.0 < share < 1.0 or not den > 0 or not math.isfinite(num):
            return math.nan, math.nan
        a = num / 6 / den ** 1.5
        normal = statistics.NormalDist()
        z0, za = normal.inv_cdf(share), normal.inv_cdf(alpha)
        try:
            lo_q, hi_q = (normal.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) for z in (za, -za))
        except ZeroDivisionError:   # (scipy's numpy arithmetic gives an infinity there)
            return math.nan, math.nan
        q = (lo_q, hi_q)
    lo, hi = np.quantile(theta_b, q)
    return float(lo), float(hi)
