"""The forecast's spread: the cost of the search still to run as a distribution, not one
number, where the policy does not yet know which way it will go (pure: no I/O; a seeded
generator, so the same run gives the same forecast).

A cap under auto (``bisect/recheck.py``) whose bad endpoint showed the symptom in its first
run starts the threshold search, one run per commit; whether the symptom is deterministic or
flaky is not known yet, and a flaky one is found out only at the culprit's parent's re-checks,
after the search, where auto switches to the Bayesian search (several times the cost). One
point cannot be right for both branches (``cap_costs``), so the forecast draws the policy's
own search on the noise model:

- the symptom is deterministic or flaky, each with prior probability 1/2 (the two hypotheses
  auto tells apart, neither favoured), and a flaky one shows with ``q`` ~ Beta(1, 1) (the
  Bayesian search's own prior, ``search/bayes.py`` ``FlakePrior``); the bad endpoint's first
  run showed it (likelihood 1 and q): P(deterministic) = 2/3 and q ~ Beta(2, 1);
- a draw: the culprit uniform over the range, the binary search one run per commit (a bad
  commit shows with ``q``, a good one never), the re-checks of the last commit judged good,
  and, when one shows the symptom, the Bayesian search from every run so far, forecast as
  the switch's own forecast is (``forecast.predict_bayes`` on the marginal posterior).

The median is the forecast, 5% and 95% its range. A Bayesian search's forecast stays the
point at q's posterior mean (``forecast.predict_bayes``); its range (``bayes_costs``) is
drawn over what the runs so far say of ``q`` (Beta(1 + shown, 1 + missed) at and above the
likeliest culprit). Skips, crashes and a two-level test's undecided commits are not drawn.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from vllm_bisect.bisect.forecast import entropy_bits, predict_bayes
from vllm_bisect.bisect.search.bayes import marginal
from vllm_bisect.bisect.search.steps import bounds, next_step
from vllm_bisect.models import Verdict

DRAWS = 200
P_DETERMINISTIC = 0.5   # prior: auto's two hypotheses, neither favoured
LOW, HIGH = 0.05, 0.95  # the range's quantiles


@dataclass(frozen=True)
class Cost:
    builds: float
    starts: float
    requests: float

    def counts(self) -> tuple[float, float, float]:
        return self.builds, self.starts, self.requests


@dataclass(frozen=True)
class Spread:
    median: Cost
    low: Cost
    high: Cost

    def around(self, point: Cost) -> Spread:
        """``point`` as the forecast, the range widened to hold it."""
        lo, hi = self.low.counts(), self.high.counts()
        return Spread(point, Cost(*map(min, lo, point.counts())),
                      Cost(*map(max, hi, point.counts())))


def spread(costs: Sequence[Cost]) -> Spread:
    """Each count's median and 5%..95% range over the draws."""
    def at(p: float) -> Cost:
        return Cost(*(_quantile(sorted(getattr(c, f) for c in costs), p)
                      for f in ("builds", "starts", "requests")))
    return Spread(at(0.5), at(LOW), at(HIGH))


def _quantile(xs: Sequence[float], p: float) -> float:
    if p == 0.5:
        return float(statistics.median(xs))
    return float(xs[min(len(xs) - 1, max(0, round(p * (len(xs) - 1))))])


@dataclass(frozen=True)
class CapPlan:
    """What auto's cap search is set to do (the spec's verdict settings)."""

    requests: int
    rechecks: int
    confidence: float = 0.99
    max_runs: int = 200


def cap_costs(n: int, plan: CapPlan, draws: int = DRAWS, seed: int = 0) -> list[Cost]:
    """The search's cost over ``n`` commits, drawn ``draws`` times (module docstring)."""
    rnd = random.Random(seed * 1_000_003 + n)
    shown_det = 1.0 / (1.0 + (1 - P_DETERMINISTIC) / P_DETERMINISTIC * 0.5)  # E[q] = 1/2
    out = []
    for _ in range(draws):
        det = rnd.random() < shown_det
        q = 1.0 if det else math.sqrt(rnd.random())  # Beta(2, 1)
        out.append(_cap_draw(n, q, plan, rnd))
    return out


def _cap_draw(n: int, q: float, plan: CapPlan, rnd: random.Random) -> Cost:
    c = rnd.randrange(n)
    runs: dict[int, list[bool]] = {n - 1: [True]}  # the bad endpoint's first run
    verdicts = {n - 1: Verdict.BAD}
    while (step := next_step(n, verdicts)).test is not None:  # the threshold search's steps
        shown = step.test >= c and rnd.random() < q
        runs[step.test] = [shown]
        verdicts[step.test] = Verdict.BAD if shown else Verdict.GOOD
    lo = bounds(n, verdicts).last_good
    builds = starts = float(len(runs) - 1)
    if lo < 0:  # no commit judged good: the lazy good endpoint runs, no re-check
        return Cost(builds + 1, starts + 1, (starts + 1) * plan.requests)
    switched = False
    for _ in range(plan.rechecks):
        starts += 1
        shown = lo >= c and rnd.random() < q
        runs[lo].append(shown)
        if shown:
            switched = True
            break
    if not switched:
        return Cost(builds, starts, starts * plan.requests)
    post, model = marginal(n, runs)
    f = predict_bayes(n, entropy_bits(post), model.q, model.eps, requests=plan.requests,
                      confidence=plan.confidence, max_runs=plan.max_runs)
    return Cost(builds + f.builds, starts + f.server_starts,
                starts * plan.requests + f.requests)


def bayes_costs(n: int, entropy_bits: float, shown: int, missed: int, eps: float,
                plan: CapPlan, draws: int = DRAWS, seed: int = 0) -> list[Cost]:
    """A Bayesian search's cost with ``q`` drawn from Beta(1 + shown, 1 + missed)."""
    rnd = random.Random(seed * 1_000_003 + n)
    out = []
    for _ in range(draws):
        q = min(0.995, rnd.betavariate(1 + shown, 1 + missed))
        f = predict_bayes(n, entropy_bits, q, min(eps, q / 2), requests=plan.requests,
                          confidence=plan.confidence, max_runs=plan.max_runs)
        out.append(Cost(f.builds, f.server_starts, f.requests))
    return out
