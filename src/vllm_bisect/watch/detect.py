"""Change points in one metric's series: pure functions, no I/O.

The detection is Apache Otava's (``otava.analysis.compute_change_points``: the E-divisive
split over sliding windows with a Student's t significance test, then the bottom-up merge,
Fleming et al., "Hunter", ICPE 2023), the method MongoDB and Nyrkio run on their nightly
series. Two things are added here, each separately tested:

- **the run-to-run spread**: a change point whose step is inside the series' own point-to-point
  spread (the robust standard deviation of the residuals around the segment means) is not
  reported, however significant a long series makes it;
- **a location window**: with a 5% step in 2% noise, the exact index of the step is right only
  about three times in four (a point just after the step that came out low looks like "before").
  The window is a likelihood-ratio set for the location, calibrated by a parametric bootstrap
  of the fitted two-segment model (:func:`location_window`), so the bisect that follows
  searches every commit the step may be at (benchmarks/bench_watch.py measures its coverage
  and width).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from vllm_bisect.errors import ToolMissing

OTAVA_HINT = ("install Apache Otava's change-point code: python3 -m pip install --no-deps "
              "apache-otava==0.8.0 (no deps: its metadata pins numpy 2.2 and pulls cloud "
              "clients; the analysis module needs only numpy and scipy)")


class Direction(StrEnum):
    """Which way a change goes for the metric."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"


SHORT_SERIES = 20


@dataclass(frozen=True)
class DetectOptions:
    """How change points are found and which are reported."""

    # Otava's significance level; None: 0.0001 for a series of SHORT_SERIES points or more,
    # 0.001 below (a short series, such as a session's judged commits, cannot reach 0.0001
    # with two points on a side; it also has fewer places for a false alarm: 1.3-1.7% of
    # 6- to 15-point noise series at 0.001, benchmarks in docs/benchmarks.md)
    max_pvalue: float | None = None
    window_len: int = 30          # Otava's sliding window (points)
    min_change: float = 0.02      # a relative step smaller than this is never reported
    spread_factor: float = 1.5    # ... nor one under this many point-to-point spreads
    location_level: float = 0.99  # the location window: a likelihood-ratio set at this level
    bootstrap: int = 400
    seed: int = 0


@dataclass(frozen=True)
class ChangePoint:
    """A step in the series: ``index`` is the first point of the new level; the step lies
    between points ``lo - 1`` and ``hi`` (the location window, ``lo <= index <= hi``)."""

    index: int
    lo: int
    hi: int
    before: float          # mean of the segment before
    after: float           # mean of the segment after
    pvalue: float
    spread: float          # the series' relative point-to-point spread (robust SD / level)
    reported: bool         # outside the spread and at least min_change
    why: str               # why it is (not) reported

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before else math.inf

    @property
    def change(self) -> float:
        """The relative change, ``after / before - 1``."""
        return self.ratio - 1.0

    @property
    def confidence(self) -> float:
        return 1.0 - self.pvalue

    def direction(self, higher_is_better: bool) -> Direction:
        worse = self.after < self.before if higher_is_better else self.after > self.before
        return Direction.REGRESSION if worse else Direction.IMPROVEMENT


def otava_change_points(values: Sequence[float], opts: DetectOptions) -> list[tuple[int, float]]:
    """(index, p-value) of each change point Otava finds, in series order."""
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        raise ToolMissing("watch needs Apache Otava's change-point detection", hint=OTAVA_HINT
                          ) from None
    level = opts.max_pvalue
    if level is None:
        level = 0.0001 if len(values) >= SHORT_SERIES else 0.001
    cps, _weak = compute_change_points([float(v) for v in values], window_len=opts.window_len,
                                       max_pvalue=level)
    return [(int(c.index), float(getattr(c.stats, "pvalue", 0.0))) for c in cps]


def segment_means(values: np.ndarray, cuts: Sequence[int]) -> np.ndarray:
    """Each point's segment mean, the segments split at ``cuts`` (first indices)."""
    fitted = np.empty_like(values, dtype=float)
    edges = [0, *sorted(cuts), len(values)]
    for a, b in itertools.pairwise(edges):
        if b > a:
            fitted[a:b] = values[a:b].mean()
    return fitted


def relative_spread(values: np.ndarray, cuts: Sequence[int]) -> float:
    """The point-to-point spread around the segment means, relative to the series' level
    (1.4826 * MAD of the residuals: robust to the odd outlier run)."""
    resid = values - segment_means(values, cuts)
    mad = float(np.median(np.abs(resid - np.median(resid))))
    level = float(np.median(np.abs(values))) or 1.0
    return 1.4826 * mad / level


def split_rss(rows: np.ndarray) -> np.ndarray:
    """For each row of a 2-D array, the squared error of the two-mean fit split at every
    index 1..n-1 (column j-1 for the split before point j)."""
    n = rows.shape[1]
    k = np.arange(1, n)
    csum = np.cumsum(rows, axis=1)
    total = csum[:, -1:]
    left = csum[:, :-1]
    sq = (rows * rows).sum(axis=1, keepdims=True)
    rss: np.ndarray = sq - left ** 2 / k - (total - left) ** 2 / (n - k)
    return rss


def best_split(seg: np.ndarray) -> int:
    """The index (1..len-1) that splits seg into two means with the least squared error."""
    return int(np.argmin(split_rss(seg[np.newaxis, :])[0])) + 1


def location_window(seg: np.ndarray, k: int, level: float, n_boot: int, seed: int
                    ) -> tuple[int, int]:
    """The step's location in ``seg`` (split at k) to ``level``: every split whose squared
    error is within c of the best one, c the ``level`` quantile of the true split's excess
    error under a parametric bootstrap of the two-mean model (a likelihood-ratio set: it
    follows the data's own error surface, so a best split that landed off the true one still
    leaves the true one inside). Offsets (lo, hi) relative to k, lo <= 0 <= hi."""
    n = len(seg)
    a, b = seg[:k], seg[k:]
    sd = math.sqrt((float(((a - a.mean()) ** 2).sum()) + float(((b - b.mean()) ** 2).sum()))
                   / max(n - 2, 1))
    if sd == 0.0 or n < 3:
        return 0, 0
    rng = np.random.default_rng(seed)
    base = np.concatenate([np.full(len(a), a.mean()), np.full(len(b), b.mean())])
    boot = split_rss(base + rng.normal(0.0, sd, (n_boot, n)))
    excess = boot[:, k - 1] - boot.min(axis=1)
    c = float(np.quantile(excess, level))
    data = split_rss(seg[np.newaxis, :])[0]
    inside = np.flatnonzero(data - data.min() <= c) + 1
    return min(int(inside.min()) - k, 0), max(int(inside.max()) - k, 0)


def detect(values: Sequence[float], opts: DetectOptions | None = None) -> list[ChangePoint]:
    """Every change point Otava finds, with its location window and whether it is reported."""
    opts = opts or DetectOptions()
    x = np.asarray([float(v) for v in values], dtype=float)
    if len(x) < 4 or not np.all(np.isfinite(x)):
        return []
    found = otava_change_points(x.tolist(), opts)
    cuts = [i for i, _ in found]
    spread = relative_spread(x, cuts)
    edges = [0, *cuts, len(x)]
    out = []
    for j, (i, pvalue) in enumerate(found):
        start, stop = edges[j], edges[j + 2]
        seg = x[start:stop]
        k = i - start
        before, after = float(seg[:k].mean()), float(seg[k:].mean())
        lo, hi = location_window(seg, k, opts.location_level, opts.bootstrap, opts.seed + i)
        lo_i, hi_i = max(start + 1, i + lo), min(stop - 1, i + hi)
        change = abs(after / before - 1.0) if before else math.inf
        floor = max(opts.min_change, opts.spread_factor * spread)
        reported = change >= floor
        why = (f"{change:.1%} step, outside the spread ({spread:.1%} a point)" if reported
               else f"{change:.1%} step is inside the series' run-to-run spread "
                    f"({spread:.1%} a point) or under min_change {opts.min_change:.0%}")
        out.append(ChangePoint(index=i, lo=lo_i, hi=hi_i, before=before, after=after,
                               pvalue=pvalue, spread=spread, reported=reported, why=why))
    return out
