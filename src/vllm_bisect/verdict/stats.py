"""Pure statistics for reports: the effect of a culprit with a bootstrap confidence interval."""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from typing import Any

MIN_CI = 5   # requests a side before a bootstrap interval means anything (issue 42: none from 2)


@dataclass(frozen=True)
class Effect:
    metric: str
    before: float
    after: float
    change: float            # relative: +6.12 means +612%
    ci_low: float | None     # None when either side has fewer than MIN_CI samples
    ci_high: float | None
    n_before: int
    n_after: int

    def describe(self, unit: str = "") -> str:
        pct = f"{self.change * 100:+.0f}%"
        if self.ci_low is None or self.ci_high is None:
            return (f"{self.metric} {self.before:.3g} -> {self.after:.3g}{unit} ({pct}; no CI "
                    f"from {self.n_before} vs {self.n_after} requests: {MIN_CI} a side at least)")
        return (f"{self.metric} {self.before:.3g} -> {self.after:.3g}{unit} ({pct} "
                f"[{self.ci_low * 100:+.0f}%, {self.ci_high * 100:+.0f}%], "
                f"95% bootstrap CI over {self.n_before} vs {self.n_after} requests)")


def bootstrap_change(before: list[float], after: list[float], metric: str,
                     resamples: int = 4000, seed: int = 0) -> Effect | None:
    """Relative change of the mean, after vs before, with a 95% BCa bootstrap CI
    (``scipy.stats.bootstrap``, the two samples resampled independently)."""
    if not before or not after or statistics.fmean(before) == 0:
        return None
    b, a = statistics.fmean(before), statistics.fmean(after)
    change = a / b - 1.0
    lo = hi = None
    if len(before) >= MIN_CI and len(after) >= MIN_CI:
        lo, hi = _ci(before, after, change, resamples, seed)
    return Effect(metric, b, a, change, lo, hi, len(before), len(after))


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
