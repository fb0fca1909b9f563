"""The bisect, composed: a store of measurements, a measurer, a verdict policy, a search.

The driver knows nothing of terminals: it reports through an :class:`EventHandler`. Each
part has one job: :class:`~vllm_bisect.bisect.state.store.MeasurementStore` (journal + result
cache), :class:`~vllm_bisect.bisect.measurement.measurer.Measurer` (workers, retries, server starts,
prefetch), a :class:`~vllm_bisect.bisect.policies.base.VerdictPolicy` (the verdict, the crash rule,
calibration), a :class:`~vllm_bisect.bisect.search.binary.Search` (binary, multisection, bayes; each
settles the endpoints), and :func:`~vllm_bisect.bisect.search.verify.verify_culprit`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vllm_bisect.bisect import recheck
from vllm_bisect.bisect.core import open_core
from vllm_bisect.bisect.events import EventHandler, NullEvents
from vllm_bisect.bisect.forecast import Forecast
from vllm_bisect.bisect.forecast_events import ForecastEvents
from vllm_bisect.bisect.measurement.executor import EvaluateFn, Executor, InlineExecutor
from vllm_bisect.bisect.measurement.measurer import Measurer
from vllm_bisect.bisect.policies import Plan, make_policy, plan_for
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.search.bayes_search import BayesSearch
from vllm_bisect.bisect.search.binary import BinarySearch, Search
from vllm_bisect.bisect.search.changepoint import ChangePointSearch
from vllm_bisect.bisect.search.changepoint_parallel import ParallelChangePointSearch
from vllm_bisect.bisect.search.parallel import MultisectionSearch
from vllm_bisect.bisect.search.range_model import RangeModel
from vllm_bisect.bisect.search.verify import verify_culprit
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.builders.prefetch import PrefetchSink
from vllm_bisect.models import Evaluation, Measurement, Outcome, Verification
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict.auto import Choice, Strategy

__all__ = ["BisectResult", "CommitEvaluator", "Driver", "EventHandler", "FlakySeen", "NullEvents"]

logger = logging.getLogger(__name__)


class CommitEvaluator(Protocol):
    """Measures one commit (``bisect.evaluate.Evaluator`` builds, serves and probes).
    ``more(measurement)`` says how many more requests to probe on the same server."""

    def evaluate(self, commit: str,
                 more: Callable[[Measurement], int] | None = None) -> Evaluation: ...


@dataclass
class BisectResult:
    range: CommitRange
    first_bad: str | None
    candidates: list[str]
    probed: list[Outcome] = field(default_factory=list)
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    server_starts: int = 0
    verify_server_starts: int = 0  # the culprit's verification (not in server_starts)
    wall_s: float = 0.0
    rounds: int = 0      # search rounds that ran evaluations (a parallel round tests k commits)
    workers: int = 1
    verification: Verification | None = None  # the culprit and its parent, re-measured
    confidence: float | None = None  # bayes: the posterior probability of first_bad
    strategy_chosen: str = ""        # the verdict strategy that ran (auto resolved)
    strategy_reason: str = ""        # why (written, or auto's rule)
    search: str = "regression"  # "fix": first_bad is the first fixed commit (terms inverted)
    forecast: Forecast | None = None  # what the search would take, predicted before it ran
    first_forecast: Forecast | None = None  # the first one (``forecast``: the latest)
    # every server start by what it was for (models.Phase values); a session's result: the
    # whole session's, every call that worked on it (bisect/run_session.py)
    starts_by_phase: dict[str, int] = field(default_factory=dict)
    calls: int = 1      # the calls (a first run, and each resume) that worked on the session
    # auto on a cap saw the symptom come and go (recheck.py): why, and the re-checks it ran
    flaky: FlakySeen | None = None
    # changepoint: what the model of the range concluded (P, the step and its interval)
    model: RangeModel | None = None


@dataclass(frozen=True)
class FlakySeen:
    """The symptom came and went (auto switched to bayes): the reason, the spec's
    ``verdict.recheck_runs``, and the setting that buys >= 95% exact on a flaky cap."""

    reason: str
    recheck_runs: int
    advised_runs: int = recheck.RECHECKS_FOR_95


def inline(evaluator: CommitEvaluator) -> EvaluateFn:
    """A plain ``evaluate(commit, more)`` as an executor's evaluation (not pinned)."""
    def run(commit: str, more: Callable[[Measurement], int] | None, *,
            devices: Sequence[int] | None, cancel: threading.Event | None) -> Evaluation:
        return evaluator.evaluate(commit, more) if more else evaluator.evaluate(commit)
    return run


class Driver:
    """``executor``: where evaluations run (None: the evaluator, inline on one worker);
    ``plan``: the spec's settled verdict plan (:func:`~vllm_bisect.bisect.multi.run_symptoms`
    settles one per symptom; None: resolved here)."""

    def __init__(self, spec: BisectSpec, rng: CommitRange, evaluator: CommitEvaluator,
                 journal: SessionJournal, cache: ResultCache | None,
                 events: EventHandler | None = None, prefetcher: PrefetchSink | None = None,
                 executor: Executor | None = None, plan: Plan | None = None) -> None:
        self.spec = spec
        self.rng = rng
        # the forecast of what the search will take, made when its first step is tested
        self.forecaster = ForecastEvents(events or NullEvents(), spec, len(rng.commits))
        self.events: EventHandler = self.forecaster
        # auto: the strategy chosen from the symptom, with the reason
        self.core = open_core(spec, rng, journal, cache,
                              executor or InlineExecutor(inline(evaluator)), self.events,
                              prefetcher=(prefetcher if executor is None or executor.workers == 1
                                          else None), plan=plan, pair_bound=True)
        self.forecaster.tester = self.core.tester
        self.forecaster.strategy = self.core.choice.strategy.value
        self.forecaster.may_switch = recheck.applies(spec, self.core.choice)

    @property
    def rest(self) -> bool:
        """A rest check's search (bisect/multi.py sets it): its verdicts (a commit at the
        culprit's level is "good") are journaled as the rest check's, not the symptom's."""
        return self.core.store.rest

    @rest.setter
    def rest(self, on: bool) -> None:
        self.core.store.rest = on

    @property
    def tester(self) -> Tester:
        return self.core.tester

    @property
    def measurer(self) -> Measurer:
        return self.core.measurer

    @property
    def choice(self) -> Choice:
        return self.core.choice

    def search(self, settled: bool = False) -> Search:
        """``settled``: the endpoints were settled before (auto on a cap, one worker)."""
        if self.choice.strategy is Strategy.BAYES:  # flaky: runs chosen by information
            return BayesSearch(self.tester)
        if self.choice.strategy is Strategy.CHANGEPOINT:  # one model of the range
            if self.measurer.workers > 1:   # k servers a round
                return ParallelChangePointSearch(self.tester, rest=self.rest)
            return ChangePointSearch(self.tester, rest=self.rest)
        if self.measurer.workers > 1:
            return MultisectionSearch(self.tester)
        return BinarySearch(self.tester, settled)

    def run(self) -> BisectResult:
        t0 = time.monotonic()
        rng = self.rng
        flaky: FlakySeen | None = None
        model: RangeModel | None = None
        self.events.on_range(rng)
        strategy = self.choice.strategy
        logger.info("verdict strategy %s: %s", strategy.value, self.choice.reason)
        self.events.on_phase("", f"verdict strategy {strategy.value}: {self.choice.reason}")
        if recheck.applies(self.spec, self.choice):  # a cap: deterministic until it is not
            found, choice = recheck.run_auto_cap(self.tester, self.spec, self.choice,
                                                 self.search, self._to_bayes)
            self.core = self.core.with_policy(self.core.policy, plan_for(self.spec, choice))
            if choice.strategy is Strategy.BAYES:
                flaky = FlakySeen(choice.reason, self.spec.verdict.recheck_runs)
        else:
            search = self.search()
            found = search.run()
            model = search.model if isinstance(search, ChangePointSearch) else None
        t = self.tester
        first_bad = rng.sha(found.step.culprit) if found.step.culprit is not None else None
        verification = None
        if (first_bad is not None and self.spec.verdict.verify_samples > 0
                and not self.core.policy.traits.models_range):  # (its P is the evidence)
            # the rest checks that follow need servers of the final pair that no verdict
            # chose: the verification's fresh ones are those (issue 40)
            rest = self.core.plan.checks_rest
            # a deterministic cap: the parent's re-checks and the culprit's run verify it
            v = self.spec.verdict
            rechecked = (1 + v.recheck_runs if recheck.applies(self.spec, self.choice)
                         and self.choice.strategy is Strategy.THRESHOLD and v.recheck_runs
                         else 0)
            verification = verify_culprit(t, first_bad, fresh=rest, rechecked=rechecked)
        return BisectResult(range=rng, first_bad=first_bad,
                            candidates=[rng.sha(i) for i in found.step.candidates],
                            probed=t.probed, evaluations=t.evaluations,
                            server_starts=self.measurer.server_starts,
                            verify_server_starts=self.measurer.unaccounted_starts,
                            wall_s=time.monotonic() - t0, rounds=found.rounds,
                            workers=self.measurer.workers, verification=verification,
                            confidence=found.confidence, search=t.terms.search.value,
                            strategy_chosen=self.choice.strategy.value,
                            strategy_reason=self.choice.reason,
                            forecast=self.forecaster.forecast,
                            first_forecast=self.forecaster.first, flaky=flaky,
                            starts_by_phase={p.value: k for p, k
                                             in self.measurer.by_phase.items()},
                            model=model)

    def _to_bayes(self) -> Search:
        """The Bayesian search over this core, from now on judged by the bayes policy (auto
        found the symptom flaky: :mod:`~vllm_bisect.bisect.recheck`)."""
        self.core = self.core.with_policy(make_policy(self.spec, Strategy.BAYES))
        self.forecaster.tester = self.core.tester
        self.forecaster.replan(Strategy.BAYES.value)
        return BayesSearch(self.tester)
