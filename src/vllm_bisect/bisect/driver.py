"""The bisect, composed: a store of measurements, a measurer, a verdict policy, a search.

The driver knows nothing of terminals: it reports through an :class:`EventHandler`. Each
part has one job: :class:`~vllm_bisect.bisect.store.MeasurementStore` (journal + result
cache), :class:`~vllm_bisect.bisect.measurer.Measurer` (workers, retries, server starts,
prefetch), a :class:`~vllm_bisect.bisect.policy.VerdictPolicy` (the verdict, the crash rule,
calibration), a :class:`~vllm_bisect.bisect.search.Search` (binary, multisection, bayes; each
settles the endpoints), and :func:`~vllm_bisect.bisect.verify.verify_culprit`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vllm_bisect.bisect import recheck
from vllm_bisect.bisect.bayes_search import BayesSearch
from vllm_bisect.bisect.events import EventHandler, NullEvents
from vllm_bisect.bisect.executor import EvaluateFn, Executor, InlineExecutor
from vllm_bisect.bisect.forecast import Forecast
from vllm_bisect.bisect.forecast_events import ForecastEvents
from vllm_bisect.bisect.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.measurer import Measurer
from vllm_bisect.bisect.parallel import MultisectionSearch
from vllm_bisect.bisect.policies import make_policy, resolve_strategy
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.search import BinarySearch, Search
from vllm_bisect.bisect.store import MeasurementStore
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.bisect.verify import verify_culprit
from vllm_bisect.builders.prefetch import PrefetchSink
from vllm_bisect.models import Evaluation, Measurement, Outcome, Verification
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict.auto import Strategy

__all__ = ["BisectResult", "CommitEvaluator", "Driver", "EventHandler", "NullEvents"]

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
    wall_s: float = 0.0
    rounds: int = 0      # search rounds that ran evaluations (a parallel round tests k commits)
    workers: int = 1
    verification: Verification | None = None  # the culprit and its parent, re-measured
    confidence: float | None = None  # bayes: the posterior probability of first_bad
    strategy_chosen: str = ""        # the verdict strategy that ran (auto resolved)
    strategy_reason: str = ""        # why (written, or auto's rule)
    search: str = "regression"  # "fix": first_bad is the first fixed commit (terms inverted)
    forecast: Forecast | None = None  # what the search would take, predicted before it ran


def inline(evaluator: CommitEvaluator) -> EvaluateFn:
    """A plain ``evaluate(commit, more)`` as an executor's evaluation (not pinned)."""
    def run(commit: str, more: Callable[[Measurement], int] | None, *,
            devices: Sequence[int] | None, cancel: threading.Event | None) -> Evaluation:
        return evaluator.evaluate(commit, more) if more else evaluator.evaluate(commit)
    return run


class Driver:
    """``executor``: where evaluations run (None: the evaluator, inline on one worker)."""

    def __init__(self, spec: BisectSpec, rng: CommitRange, evaluator: CommitEvaluator,
                 journal: SessionJournal, cache: ResultCache | None,
                 events: EventHandler | None = None, prefetcher: PrefetchSink | None = None,
                 executor: Executor | None = None) -> None:
        self.spec = spec
        self.rng = rng
        # the forecast of what the search will take, made when its first step is tested
        self.forecaster = ForecastEvents(events or NullEvents(), spec, len(rng.commits))
        self.events: EventHandler = self.forecaster
        store = MeasurementStore(spec, journal, cache)
        self.measurer = Measurer(executor or InlineExecutor(inline(evaluator)), store,
                                 prefetcher if (executor is None or executor.workers == 1)
                                 else None)
        self.choice = resolve_strategy(spec)  # auto: chosen from the symptom, with the reason
        self.tester = Tester(rng, store, self.measurer,
                             make_policy(spec, self.choice.strategy, pair_bound=True),
                             self.events)
        self.forecaster.tester = self.tester
        self.forecaster.strategy = self.choice.strategy.value

    def search(self) -> Search:
        if self.choice.strategy is Strategy.BAYES:  # flaky: runs chosen by information
            return BayesSearch(self.tester)
        if self.measurer.workers > 1:
            return MultisectionSearch(self.tester)
        return BinarySearch(self.tester)

    def run(self) -> BisectResult:
        t0 = time.monotonic()
        rng, t = self.rng, self.tester
        self.events.on_range(rng)
        strategy = self.choice.strategy
        logger.info("verdict strategy %s: %s", strategy.value, self.choice.reason)
        self.events.on_phase("", f"verdict strategy {strategy.value}: {self.choice.reason}")
        if recheck.applies(self.spec, self.choice):  # a cap: deterministic until it is not
            found, self.choice = recheck.run_auto_cap(t, self.spec, self.choice, self.search)
        else:
            found = self.search().run()
        first_bad = rng.sha(found.step.culprit) if found.step.culprit is not None else None
        verification = None
        if first_bad is not None and self.spec.verdict.verify_samples > 0:
            verification = verify_culprit(t, first_bad)
        return BisectResult(range=rng, first_bad=first_bad,
                            candidates=[rng.sha(i) for i in found.step.candidates],
                            probed=t.probed, evaluations=t.evaluations,
                            server_starts=self.measurer.server_starts,
                            wall_s=time.monotonic() - t0, rounds=found.rounds,
                            workers=self.measurer.workers, verification=verification,
                            confidence=found.confidence, search=t.terms.search.value,
                            strategy_chosen=self.choice.strategy.value,
                            strategy_reason=self.choice.reason,
                            forecast=self.forecaster.forecast)
