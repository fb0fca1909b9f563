"""Noisy verdicts: endpoint calibration and a sequential Bayes-factor test (pure).

Calibration measures the good and bad endpoints with n samples each and refuses to bisect when
they do not differ (p = min(Kolmogorov-Smirnov, Mann-Whitney U) > p_max) or differ by less than
the minimum effect. It fits a normal model to each endpoint on the log scale (latencies are
multiplicative): the two means, and one pooled spread s with nu = n_good + n_bad - 2 degrees
of freedom.

Each tested commit is then judged sequentially (Wald's SPRT, with the likelihoods that the
calibration can honestly claim): under "the commit is like the good endpoint" its log samples
y_1..y_k are normal around the good endpoint's mean, with the spread unknown (scaled inverse
chi-square, nu degrees of freedom, scale s: what the calibration measured) and the mean
itself only known to within sigma^2 / n_good; integrating both out gives a multivariate
Student-t. Likewise for bad. The score is the log Bayes factor bad : good of all the commit's
samples; BAD once it reaches log(1/alpha_step), GOOD once it falls to -log(1/alpha_step),
UNKNOWN (treated as a skip) when the sample cap is reached first. A spread underestimated
from few calibration samples, or a commit noisier than the endpoints, tempers the evidence
instead of making the test overconfident. alpha_step = alpha_total / expected_steps bounds
the chance of any mislabel across the whole bisect (a union bound), not per test.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from vllm_bisect.text import plural


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
    sigma: float            # pooled log-scale spread
    logs_good: tuple[float, ...] = ()  # the samples behind the fit (log scale)
    logs_bad: tuple[float, ...] = ()

    @property
    def n_good(self) -> int:
        return len(self.logs_good)

    @property
    def n_bad(self) -> int:
        return len(self.logs_bad)

    @property
    def df(self) -> int:
        return max(1, self.n_good + self.n_bad - 2)

    def ceiling(self) -> float:
        """The most evidence any one commit can give (its samples -> infinity): the endpoint
        means are only known to within sigma^2 / n. With the decision threshold this says
        whether the endpoints were measured precisely enough."""
        d2 = ((self.mu_bad - self.mu_good) / self.sigma) ** 2
        return min(self.n_good, self.n_bad) * d2 / 2

    def learn(self, samples: list[float], bad: bool) -> Calibration:
        """The fit with a judged commit's samples added to the side it was judged to be on
        (its mean and spread are then known better for the next commit)."""
        ys = tuple(math.log(max(x, 1e-12)) for x in samples)
        g = self.logs_good + (() if bad else ys)
        b = self.logs_bad + (ys if bad else ())
        mu_g, mu_b, sigma = _fit(g, b)
        return replace(self, mu_good=mu_g, mu_bad=mu_b, sigma=sigma, logs_good=g, logs_bad=b)

    def _log_marginal(self, ys: list[float], mu: float, n_ref: int) -> float:
        """log density of ys (log scale) under one endpoint's model, up to a shared constant:
        a multivariate t with nu df, location mu, scale s^2 (I + J / n_ref)."""
        k = len(ys)
        d = [y - mu for y in ys]
        q = sum(x * x for x in d) - sum(d) ** 2 / (n_ref + k)  # Sherman-Morrison
        nu, s2 = self.df, self.sigma ** 2
        return -0.5 * math.log1p(k / n_ref) - (nu + k) / 2 * math.log1p(q / (nu * s2))

    def log_bf(self, samples: list[float]) -> float:
        """log p(samples | like bad) - log p(samples | like good)."""
        if not samples:
            return 0.0
        ys = [math.log(max(x, 1e-12)) for x in samples]
        return (self._log_marginal(ys, self.mu_bad, self.n_bad)
                - self._log_marginal(ys, self.mu_good, self.n_good))


def _fit(lg: tuple[float, ...], lb: tuple[float, ...]) -> tuple[float, float, float]:
    """Both means and the pooled spread (log scale)."""
    mu_g, mu_b = statistics.fmean(lg), statistics.fmean(lb)
    df = max(1, len(lg) + len(lb) - 2)
    pooled = math.sqrt((statistics.pvariance(lg) * len(lg) + statistics.pvariance(lb) * len(lb))
                       / df)
    return mu_g, mu_b, max(pooled, 1e-3)  # a noiseless simulator: no infinite likelihoods


def p_differ(a: list[float], b: list[float]) -> float:
    """min(KS, Mann-Whitney U) two-sided p-value (Pinpoint's rule)."""
    from scipy import stats  # here: scipy.stats costs ~1-2 s per process (hook, CLI) to import

    ks = stats.ks_2samp(a, b).pvalue
    mw = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    return float(min(ks, mw))


def calibrate(good: list[float], bad: list[float], min_effect: float = 0.05,
              p_max: float = 0.01) -> Calibration:
    if len(good) < 3 or len(bad) < 3:
        raise ValueError("calibration needs at least 3 samples per endpoint")
    lg = tuple(math.log(max(x, 1e-12)) for x in good)
    lb = tuple(math.log(max(x, 1e-12)) for x in bad)
    mu_g, mu_b, sigma = _fit(lg, lb)
    sizes = {"logs_good": lg, "logs_bad": lb}
    effect = statistics.fmean(bad) / statistics.fmean(good) - 1.0
    p = p_differ(good, bad)
    if p > p_max:
        return Calibration(False, f"good and bad do not differ (p = {p:.3g} > {p_max:.3g})",
                           p, effect, mu_g, mu_b, sigma, **sizes)
    if abs(effect) < min_effect:
        return Calibration(False, f"the difference ({effect:+.1%}) is below the minimum effect "
                           f"({min_effect:.0%})", p, effect, mu_g, mu_b, sigma, **sizes)
    return Calibration(True, f"endpoints differ: {effect:+.1%} (p = {p:.3g})", p, effect,
                       mu_g, mu_b, sigma, **sizes)


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
        score = self.calibration.log_bf(samples)
        if score >= self.threshold:
            return SeqVerdict.BAD
        if score <= -self.threshold:
            return SeqVerdict.GOOD
        return SeqVerdict.UNKNOWN if len(samples) >= self.max_samples else SeqVerdict.MORE

    def precise(self) -> bool:
        """Were the endpoints measured well enough that a commit can be decided in a few
        samples? (the evidence ceiling at least 3x the decision threshold)"""
        return self.calibration.ceiling() >= 3 * self.threshold

    def next_batch(self, have: int, start: int = 3) -> int:
        """How many samples to add: a few to start, then one at a time (capped). Looking
        after every sample stops earliest; on a running server a look costs nothing (doubling
        took 5.2 samples per commit where one at a time took 4.3, at 1.3x and CV 10%)."""
        if have >= self.max_samples:
            return 0
        return min(start if have == 0 else 1, self.max_samples - have)


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

    def learn(self, requests: list[Any], verdict: SeqVerdict) -> SequentialJudge:
        """The judge for the next commit: this one's samples join the side it was judged."""
        if verdict not in (SeqVerdict.GOOD, SeqVerdict.BAD):
            return self
        cal = self.test.calibration.learn(itl_samples(requests), verdict is SeqVerdict.BAD)
        return SequentialJudge(replace(self.test, calibration=cal))

    def decide(self, requests: list[Any]) -> tuple[SeqVerdict, str]:
        xs = itl_samples(requests)
        v = self.test.decide(xs)
        cal = self.test.calibration
        med = statistics.median(xs) if xs else float("nan")
        where = (f"ITL median {med:.2f} ms over {plural(len(xs), 'sample')} (good "
                 f"~{math.exp(cal.mu_good):.2f},"
                 f" bad ~{math.exp(cal.mu_bad):.2f})")
        if v is SeqVerdict.UNKNOWN:
            return v, f"undecided after {plural(len(xs), 'sample')}: {where}"
        return v, f"SPRT {v.value}: {where}"
