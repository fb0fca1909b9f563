"""The forecast, made when the first search step is about to be tested (the endpoints are
settled: calibrated or verified) and told as a phase line; the times come from what the
endpoints took (a build: a commit's wall less its server start-up and probe). When auto
switches to the Bayesian search (a flaky symptom, ``bisect/recheck.py``) the plan changes:
:meth:`ForecastEvents.replan` makes it again before that search's first step, from every run
so far; the first forecast is kept (``first``). Where the policy may still switch (a cap under
auto: ``may_switch``) the forecast is the median of the cost drawn over the branches, with
its 5%..95% range; a Bayesian search's keeps its point and gets the range drawn over the flake
rate (``bisect/forecast_spread.py``)."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable

from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.forecast import Forecast, entropy_bits, predict, predict_bayes
from vllm_bisect.bisect.forecast_spread import CapPlan, Cost, Spread, bayes_costs, cap_costs, spread
from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.bisect.search.bayes import marginal
from vllm_bisect.bisect.search.bayes_search import journal_runs
from vllm_bisect.bisect.search.changepoint_prior import least_requests, model_prior
from vllm_bisect.bisect.search.range_model import servers_of
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.models import EvalStatus, Evaluation, Outcome
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict.changepoint import posterior, requests_per_server

logger = logging.getLogger(__name__)

SEARCH_ROLES = (Role.BISECT.value, Role.CONFIRM.value)


class ForecastEvents:
    """An event handler around another: passes everything on, and makes the forecast."""

    def __init__(self, inner: EventHandler, spec: BisectSpec, n: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.inner, self.spec, self.n, self.clock = inner, spec, n, clock
        self.t0 = clock()
        self.tester: Tester | None = None
        self.strategy = ""
        self.forecast: Forecast | None = None
        self.first: Forecast | None = None  # the first forecast (before any switch)
        self.may_switch = False  # a cap under auto: the threshold search may turn to bayes
        self.made = False
        self._started: dict[str, float] = {}
        self._walls: list[tuple[float, Evaluation | None]] = []

    def on_range(self, rng: CommitRange) -> None:
        self.inner.on_range(rng)

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        if not self.made and role in SEARCH_ROLES and self.tester is not None:
            self.made = True
            try:  # a forecast that cannot be made must not end the bisect
                self.forecast = self.make(self.tester)
            except (ValueError, ZeroDivisionError, OverflowError) as err:
                logger.warning("no forecast: %s", err)
            if self.forecast is not None:
                self.first = self.first or self.forecast
                self.inner.on_phase("", self.forecast.line(self.n))
        self._started[commit.sha] = self.clock()
        self.inner.on_testing(commit, role, steps_left)

    def on_phase(self, commit: str, phase: str) -> None:
        self.inner.on_phase(commit, phase)

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        if commit.sha in self._started and not outcome.from_cache and self.tester is not None:
            ev = self.tester.evaluations.get(commit.sha)
            self._walls.append((self.clock() - self._started.pop(commit.sha), ev))
        self.inner.on_outcome(commit, outcome)

    def replan(self, strategy: str) -> None:
        """The search goes on under ``strategy``: forecast again at its first step."""
        self.strategy, self.made = strategy, False

    def make(self, t: Tester) -> Forecast | None:
        v, rng = self.spec.verdict, t.rng
        good, bad = t.evaluations.get(rng.good.sha), t.evaluations.get(rng.bad.sha)
        groups = getattr(t.policy, "groups_of", None)
        measured = [e for e in (good, bad) if e is not None and e.measurement is not None]
        plan = CapPlan(self.spec.probe.requests, v.recheck_runs, v.confidence, v.max_runs)
        drawn: Spread | None = None
        f: Forecast | None
        if self.strategy == "bayes":
            f, drawn = self._bayes(t, plan)
        else:
            f = predict(
                self.n, self.strategy, requests=self._requests(t, measured),
                rechecks=v.recheck_runs if self.strategy == "threshold" else 0,
                good=groups(good) if groups and good and good.measurement else None,
                bad=groups(bad) if groups and bad and bad.measurement else None,
                alpha=v.alpha, model=fitted(t))
            if f is not None and self.strategy == "threshold" and self.may_switch:
                drawn = spread(cap_costs(self.n, plan))
        if f is None:
            return None
        mid, low, high = (f.builds, f.server_starts, f.requests), None, None
        if drawn is not None:  # bayes: the point at q's posterior mean, the range drawn
            drawn = drawn.around(Cost(*mid)) if self.strategy == "bayes" else drawn
            mid, low, high = drawn.median.counts(), drawn.low.counts(), drawn.high.counts()
        starts = [e.startup_s for _, e in self._walls if e is not None and e.startup_s]
        probes = [e.measurement.wall_s / len(e.measurement.requests)
                  for e in measured if e.measurement and e.measurement.requests
                  and e.measurement.wall_s]
        builds = [w - (e.startup_s or 0) - (e.measurement.wall_s if e.measurement else 0)
                  for w, e in self._walls[:2] if e is not None
                  and e.status is EvalStatus.MEASURED]
        f = Forecast(f.steps, *mid, low=low, high=high,
                     elapsed_s=self.clock() - self.t0, starts_done=t.measurer.server_starts,
                     build_s=max(0.0, statistics.fmean(builds)) if builds else None,
                     start_s=statistics.fmean(starts) if starts else None,
                     request_s=statistics.fmean(probes) if probes else None)
        logger.info("%s", f.line(self.n))
        return f

    def _requests(self, t: Tester, ends: list[Evaluation]) -> float:
        """A search server's requests: ``probe.requests``; under the model of the range, what
        the model asks of a search server once the ends are in (the two-stage optimum over
        the spreads the ends' servers show, as the search sizes its servers; ``verdict.
        server_cost`` for a start: the search measures its own later)."""
        asked = self.spec.probe.requests
        if self.strategy != "changepoint" or not ends:
            return asked
        v = self.spec.verdict
        prior = model_prior(v, t.terms.search)
        if not prior.per_request:    # (one sample a server: its requests are the probe's)
            return asked
        index = {t.rng.good.sha: -1, t.rng.bad.sha: self.n - 1}
        servers = [s for e in ends for s in servers_of(e, index[e.commit], v.symptom)]
        if len(servers) < 2:
            return asked
        post = posterior(self.n, servers, prior)
        return float(requests_per_server(post, v.server_cost, least_requests(prior, asked),
                                         v.max_samples))

    def _bayes(self, t: Tester, plan: CapPlan) -> tuple[Forecast, Spread]:
        """From every run so far: the posterior's entropy, q and the good endpoint's false
        alarm rate (as observed: the search's prior expects them rare); the spread over q
        from the runs at and above the likeliest culprit."""
        runs, _ = journal_runs(t)
        post, model = marginal(self.n, runs)
        bits = entropy_bits(post)
        good = runs.get(-1, [])
        eps = sum(good) / len(good) if good else model.eps
        top = max(range(self.n), key=lambda c: post[c])
        above = [x for i, seen in runs.items() if i >= top for x in seen]
        drawn = spread(bayes_costs(self.n, bits, sum(above), len(above) - sum(above), eps,
                                   plan))
        return predict_bayes(self.n, bits, model.q, min(eps, model.q / 2),
                             requests=plan.requests, confidence=plan.confidence,
                             max_runs=plan.max_runs), drawn


def fitted(t: Tester) -> tuple[float, float, float] | None:
    """The two-level test's fitted (gap, request variance, server variance), log scale (None:
    no two-level test calibrated)."""
    test = getattr(t.policy, "test_", None)
    model = getattr(test, "model", None)
    if model is None:
        return None
    mg, mb = model.means()
    s2, t2 = model.components()
    return abs(mb - mg), s2, t2
