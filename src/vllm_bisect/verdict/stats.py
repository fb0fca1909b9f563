"""Pure statistics for reports: the effect of a culprit with a bootstrap confidence interval."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Effect:
    metric: str
    before: float
    after: float
    change: float            # relative: +6.12 means +612%
    ci_low: float | None     # None when either side has fewer than 2 samples
    ci_high: float | None
    n_before: int
    n_after: int

    def describe(self, unit: str = "") -> str:
        pct = f"{self.change * 100:+.0f}%"
        ci = (f" [{self.ci_low * 100:+.0f}%, {self.ci_high * 100:+.0f}%]"
              if self.ci_low is not None and self.ci_high is not None else " (no CI: too few samples)")
        return (f"{self.metric} {self.before:.3g} -> {self.after:.3g}{unit} ({pct}{ci}, "
                f"95% bootstrap CI over {self.n_before} vs {self.n_after} requests)")


def bootstrap_change(before: list[float], after: list[float], metric: str,
                     resamples: int = 4000, seed: int = 0) -> Effect | None:
    """Relative change of the mean, after vs before, with a percentile bootstrap CI."""
    if not before or not after or statistics.fmean(before) == 0:
        return None
    b, a = statistics.fmean(before), statistics.fmean(after)
    change = a / b - 1.0
    lo = hi = None
    if len(before) >= 2 and len(after) >= 2:
        rnd = random.Random(seed)
        draws = []
        for _ in range(resamples):
            rb = statistics.fmean(rnd.choices(before, k=len(before)))
            ra = statistics.fmean(rnd.choices(after, k=len(after)))
            if rb:
                draws.append(ra / rb - 1.0)
        draws.sort()
        lo, hi = draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]
    return Effect(metric, b, a, change, lo, hi, len(before), len(after))
