"""Noisy verdicts: endpoint calibration and a sequential probability ratio test (pure).

Calibration measures the good and bad endpoints with n samples each and refuses to bisect when
they do not differ (p = min(Kolmogorov-Smirnov, Mann-Whitney U) > 0.01) or differ by less than
the minimum effect. It fits a normal model to each endpoint (on the log scale: latencies are
multiplicative) with a shared spread: the 95% upper confidence bound of the pooled estimate.

Each tested commit is then judged by Wald's SPRT: every new sample x adds
log p(x | bad) - log p(x | good) to a running score; the commit is BAD once the score reaches
log(1/alpha_step), GOOD once it falls to -log(1/alpha_step), and UNKNOWN (treated as a skip)
when the sample cap is reached first. alpha_step = alpha_total / expected_steps bounds the
chance of any mislabel across the whole bisect (a union bound), not per test.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from scipy import stats


class SeqVerdict(StrEnum):
    GOOD = "good"
    BAD = "bad"
    MORE = "more"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Calibration:
    ok: bool
    reason: str
    p_value: float
    effect: float           # bad mean / good mean - 1
    mu_good: float          # log scale
    mu_bad: float
    sigma: float

    def log_lr(self, x: float) -> float:
        """log p(x | bad) - log p(x | good) for one sample."""
        y = math.log(max(x, 1e-12))
        s2 = self.sigma ** 2
        return ((y - self.mu_good) ** 2 - (y - self.mu_bad) ** 2) / (2 * s2)


def p_differ(a: list[float], b: list[float]) -> float:
    """min(KS, Mann-Whitney U) two-sided p-value (Pinpoint's rule)."""
    ks = stats.ks_2samp(a, b).pvalue
    mw = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    return float(min(ks, mw))


def calibrate(good: list[float], bad: list[float], min_effect: float = 0.05,
              p_max: float = 0.01) -> Calibration:
    if len(good) < 3 or len(bad) < 3:
        raise ValueError("calibration needs at least 3 samples per endpoint")
    lg = [math.log(max(x, 1e-12)) for x in good]
    lb = [math.log(max(x, 1e-12)) for x in bad]
    mu_g, mu_b = statistics.fmean(lg), statistics.fmean(lb)
    df = len(lg) + len(lb) - 2
    pooled = math.sqrt((statistics.pvariance(lg) * len(lg) + statistics.pvariance(lb) * len(lb))
                       / df)
    # a 95% upper confidence bound on sigma: a spread estimated from a handful of samples is
    # often too small, which would make the test overconfident
    upper = pooled * math.sqrt(df / stats.chi2.ppf(0.05, df))
    sigma = max(upper, 1e-3)  # a noiseless simulator must not give infinite likelihoods
    effect = statistics.fmean(bad) / statistics.fmean(good) - 1.0
    p = p_differ(good, bad)
    if p > p_max:
        return Calibration(False, f"good and bad do not differ (p = {p:.3g} > {p_max})", p,
                           effect, mu_g, mu_b, sigma)
    if abs(effect) < min_effect:
        return Calibration(False, f"the difference ({effect:+.1%}) is below the minimum effect "
                           f"({min_effect:.0%})", p, effect, mu_g, mu_b, sigma)
    return Calibration(True, f"endpoints differ: {effect:+.1%} (p = {p:.3g})", p, effect,
                       mu_g, mu_b, sigma)


@dataclass(frozen=True)
class SequentialTest:
    calibration: Calibration
    alpha_total: float = 0.01
    expected_steps: int = 10
    max_samples: int = 40

    @property
    def threshold(self) -> float:
        return math.log(self.expected_steps / self.alpha_total)

    def decide(self, samples: list[float]) -> SeqVerdict:
        score = sum(self.calibration.log_lr(x) for x in samples)
        if score >= self.threshold:
            return SeqVerdict.BAD
        if score <= -self.threshold:
            return SeqVerdict.GOOD
        return SeqVerdict.UNKNOWN if len(samples) >= self.max_samples else SeqVerdict.MORE

    def next_batch(self, have: int, start: int = 3) -> int:
        """How many samples to add: start with a few, then double (capped)."""
        return min(max(start, have), self.max_samples - have) if have < self.max_samples else 0


def itl_samples(requests: list[Any]) -> list[float]:
    """Per-request ITL (ms per server-counted token): one sample per request."""
    return [float(r.itl_ms) for r in requests if getattr(r, "itl_ms", None)]


@dataclass(frozen=True)
class SequentialJudge:
    test: SequentialTest

    def more(self, requests: list[Any]) -> int:
        xs = itl_samples(requests)
        if self.test.decide(xs) is not SeqVerdict.MORE:
            return 0
        return self.test.next_batch(len(xs))

    def decide(self, requests: list[Any]) -> tuple[SeqVerdict, str]:
        xs = itl_samples(requests)
        v = self.test.decide(xs)
        cal = self.test.calibration
        med = statistics.median(xs) if xs else float("nan")
        where = (f"ITL median {med:.2f} ms over {len(xs)} samples (good ~{math.exp(cal.mu_good):.2f},"
                 f" bad ~{math.exp(cal.mu_bad):.2f})")
        if v is SeqVerdict.UNKNOWN:
            return v, f"undecided after {len(xs)} samples: {where}"
        return v, f"SPRT {v.value}: {where}"
