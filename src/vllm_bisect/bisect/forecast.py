"""What the bisect will take, predicted once the endpoints are settled (calibrated, or
verified), before the first search step: builds, server starts, requests, and hours at the
measured build, start and request times; and what k workers (GPUs) would save.

The model (``predict``): ceil(log2 n) search steps, each one build. A threshold step is one
server and ``probe.requests`` requests (a cap under auto: plus ``recheck_runs`` re-checks of
the culprit's parent). A two-level step decides at log(20) (``STEP_ALPHA``): from the
endpoints' servers, the request spread ``sigma``, the server-level spread ``tau`` and the gap
``d`` between the sides give the evidence per request, ``d^2 / (2 sigma^2)``, and per server
of r requests, ``d^2 / (2 (tau^2 + sigma^2 / r))``; a step takes the requests and servers
that reach log(20) (a lone request decides only at 1.5x, so at least two), and the final
pair two more decisions at about log(2 / alpha). The model of the range (``changepoint``,
auto's choice for a noisy symptom) bisects with one server a commit on a clean step (its
median in docs/benchmarks.md: plain + 2, the two ends), each server running the requests the
ends' servers ran; the servers it adds where a commit stays in doubt (a step small against the
server-level spread) and its rest checks are not foreseen. Skips and crashes are not foreseen (they
show as the prediction falling short). A Bayesian search (flaky symptoms) takes the bits still
to learn (the posterior's entropy plus log2 of the confidence's odds) over what one run tells at
most (the capacity of the channel a run is: shown with probability ``q`` at a bad commit and
``eps`` at a good one, ``bayes_runs``), a build for the first run of each commit it visits.
The forecast is made again when auto switches to the Bayesian search. k workers: the search's steps take
ceil(log_{k+1} n) rounds instead of ceil(log2 n) (``bisect/search/multisection.py``). Where the
policy does not know yet which way it will go (a cap that may be flaky), the counts are the
median of a drawn distribution and ``low`` / ``high`` its 5%..95% range
(``bisect/forecast_spread.py``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from vllm_bisect.text import duration_h, plural, seconds

STEP_THRESHOLD = math.log(20.0)


@dataclass(frozen=True)
class Forecast:
    steps: int
    builds: float           # still to come (the endpoints' are done)
    server_starts: float
    requests: float
    elapsed_s: float = 0.0  # what the endpoints took
    starts_done: int = 0    # the endpoints' server starts
    build_s: float | None = None
    start_s: float | None = None
    request_s: float | None = None
    # the 5%..95% range of (builds, server starts, requests) still to come (None: one point)
    low: tuple[float, float, float] | None = None
    high: tuple[float, float, float] | None = None

    def search_s(self, counts: tuple[float, float, float] | None = None) -> float | None:
        if self.build_s is None or self.start_s is None or self.request_s is None:
            return None
        b, s, r = counts or (self.builds, self.server_starts, self.requests)
        return b * self.build_s + s * self.start_s + r * self.request_s

    def hours(self, counts: tuple[float, float, float] | None = None) -> float | None:
        s = self.search_s(counts)
        return None if s is None else (self.elapsed_s + s) / 3600

    def hours_range(self) -> tuple[float, float] | None:
        """The wall's 5%..95% range (None: one point, or no times measured)."""
        lo, hi = (self.hours(self.low) if self.low else None,
                  self.hours(self.high) if self.high else None)
        return None if lo is None or hi is None else (lo, hi)

    def hours_with(self, workers: int, n: int) -> float | None:
        """The wall with ``workers`` GPUs: the search's rounds shrink by log2(k+1)."""
        s = self.search_s()
        if s is None:
            return None
        rounds = math.ceil(math.log(max(2, n)) / math.log(workers + 1))
        return (self.elapsed_s + s * rounds / max(1, self.steps)) / 3600

    def line(self, n: int) -> str:
        base = (f"forecast: {plural(self.steps, 'search step')}, "
                f"{plural(round(self.builds), 'build')}, "
                f"{plural(round(self.server_starts), 'server start')}, "
                f"{plural(round(self.requests), 'request')}")
        if self.low and self.high and self.high[1] > self.low[1]:
            base += f" (likely; 90% range {self.low[1]:.0f}..{self.high[1]:.0f} server starts)"
        h = self.hours()
        if h is None:
            return base
        more = ", ".join(f"{k} GPUs {duration_h(self.hours_with(k, n) or 0.0)}"
                         for k in (2, 4, 8))
        span = self.hours_range()
        if span is not None and duration_h(span[0]) != duration_h(span[1]):
            more = f"90% range {duration_h(span[0])}..{duration_h(span[1])}; {more}"
        return (f"{base}: about {duration_h(h)} in all at {_each(self.build_s)} a "
                f"build, {_each(self.start_s)} a server start, "
                f"{_each(self.request_s)} a request ({more})")

    def as_dict(self) -> dict[str, float | None]:
        h = self.hours()
        out: dict[str, float | None] = {
            "steps": self.steps, "search_builds": self.builds,
            "search_server_starts": self.server_starts, "search_requests": self.requests,
            "server_starts": self.starts_done + self.server_starts,
            "hours": None if h is None else round(h, 4)}
        span = self.hours_range()
        for key, counts, i in (("low", self.low, 0), ("high", self.high, 1)):
            if counts is not None:
                out[f"server_starts_{key}"] = self.starts_done + counts[1]
                out[f"hours_{key}"] = None if span is None else round(span[i], 4)
        return out


def levels(good: list[list[float]], bad: list[list[float]]) -> tuple[float, float, float]:
    """(gap between the sides, request variance, server-level variance), estimated from the
    endpoints' per-server samples (natural scale)."""
    xs0 = [x for g in good for x in g]
    xs1 = [x for g in bad for x in g]
    d = abs(statistics.fmean(xs1) - statistics.fmean(xs0))
    within = [statistics.variance(g) for g in good + bad if len(g) >= 2]
    sigma2 = statistics.fmean(within) if within else (0.05 * statistics.fmean(xs0)) ** 2
    means = [[statistics.fmean(g) for g in side if g] for side in (good, bad)]
    spread = [statistics.variance(m) for m in means if len(m) >= 2]
    r_mean = statistics.fmean(len(g) for g in good + bad if g)
    tau2 = max(0.0, statistics.fmean(spread) - sigma2 / r_mean) if spread else 0.0
    return d, sigma2, tau2


def twolevel_step(good: list[list[float]], bad: list[list[float]], threshold: float,
                  ) -> tuple[float, float]:
    """(servers, requests) one two-level decision at ``threshold`` takes, from the
    endpoints' per-server samples."""
    if not any(good) or not any(bad):
        return 1.0, 2.0
    return step_cost(*levels(good, bad), threshold)


def step_cost(d: float, sigma2: float, tau2: float, threshold: float) -> tuple[float, float]:
    """(servers, requests) one decision at ``threshold`` takes at the gap ``d`` between the
    sides, request variance ``sigma2`` and server-level variance ``tau2`` (any one scale)."""
    if d == 0:
        return 12.0, 40.0
    per_request = d * d / (2 * max(sigma2, 1e-12))
    requests = max(2.0, math.ceil(threshold / per_request))
    if per_request >= 1.5 * threshold:
        requests = 1.0
    per_server = d * d / (2 * max(tau2 + sigma2 / requests, 1e-12))
    servers = max(1.0, math.ceil(threshold / per_server))
    return servers, servers * requests


def entropy_bits(post: Sequence[float]) -> float:
    """A posterior's entropy in bits (what a Bayesian search still has to learn)."""
    return -sum(p * math.log2(p) for p in post if p > 0)


def _h2(p: float) -> float:
    return 0.0 if p <= 0.0 or p >= 1.0 else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def run_capacity(q: float, eps: float) -> float:
    """Bits one run tells at most: max over P(bad) = s of the mutual information between
    the commit's side and the symptom shown (a grid of 99 values of s)."""
    best = 0.0
    for i in range(1, 100):
        s = i / 100
        best = max(best, _h2(s * q + (1 - s) * eps) - s * _h2(q) - (1 - s) * _h2(eps))
    return best


def bayes_runs(entropy_bits: float, q: float, eps: float, confidence: float) -> float:
    """Runs a Bayesian search takes from a posterior of ``entropy_bits`` to ``confidence``."""
    bits = entropy_bits + math.log2(confidence / (1 - confidence))
    return bits / max(run_capacity(q, eps), 1e-3)


def predict_bayes(n: int, entropy_bits: float, q: float, eps: float, *, requests: int = 1,
                  confidence: float = 0.99, max_runs: int = 200) -> Forecast:
    """A Bayesian search from its posterior (``entropy_bits``) at the flake rates."""
    steps = math.ceil(math.log2(max(2, n)))
    runs = min(float(max_runs), math.ceil(bayes_runs(entropy_bits, q, eps, confidence)))
    builds = min(runs, steps + runs / 4)  # a commit's first run builds it; later ones reuse
    return Forecast(steps, builds, runs, runs * requests)


def predict(n: int, strategy: str, *, requests: float = 3, rechecks: int = 0,
            good: list[list[float]] | None = None, bad: list[list[float]] | None = None,
            alpha: float = 0.01, model: tuple[float, float, float] | None = None,
            ) -> Forecast | None:
    """The search still to run over ``n`` commits (None: no model for the strategy).
    ``requests``: a server's (the model of the range: what the ends' servers ran).
    ``model``: the two-level test's fitted (gap, request variance, server variance), used
    before the endpoints' raw estimates (two servers a side say little of the server
    level)."""
    steps = math.ceil(math.log2(max(2, n)))
    if strategy == "threshold":
        return Forecast(steps, float(steps), float(steps + rechecks),
                        float((steps + rechecks) * requests))
    if strategy == "changepoint":   # one server a step, as many requests as the ends' ran
        return Forecast(steps, float(steps), float(steps), float(steps * requests))
    if strategy != "twolevel" or ((good is None or bad is None) and model is None):
        return None
    if model is None:
        assert good is not None and bad is not None
        if not any(good) or not any(bad):
            return Forecast(steps, float(steps), float(steps), 2.0 * steps)
        model = levels(good, bad)
    servers, reqs = step_cost(*model, STEP_THRESHOLD)
    c_servers, c_reqs = step_cost(*model, math.log(2 / alpha))
    # the final pair: two decisions at the bound, going on from their steps' servers
    extra_s, extra_r = 2 * max(0.0, c_servers - servers), 2 * max(0.0, c_reqs - reqs)
    return Forecast(steps, float(steps), steps * servers + extra_s, steps * reqs + extra_r)


def _each(s: float | None) -> str:
    """One build's, start's or request's time as the line reads it: a time under a
    millisecond (a build the cache answered, or a residue the clock cannot tell from zero:
    the endpoints' wall less their start and requests) reads "under 1 ms", never "0 s"."""
    return "under 1 ms" if s is None or s < 0.0005 else seconds(s)
