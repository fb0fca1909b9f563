"""The one composition root: :func:`open_core` assembles the bisect core once (store,
measurer, verdict policy, tester) for every way into it: ``vllm-bisect run``
(:class:`~vllm_bisect.bisect.driver.Driver`, which :mod:`~vllm_bisect.bisect.run_session` builds),
``git bisect run`` (:mod:`~vllm_bisect.bisect.hook`) and the studies after the culprit
(:mod:`vllm_bisect.isolate.adapter`), the last two through
:func:`~vllm_bisect.bisect.wiring.open_session`. The endpoints are settled
by :func:`~vllm_bisect.bisect.search.endpoints.settle`, beside the checks it calls.

A :class:`Core` is not assigned into: :meth:`Core.with_policy` returns a new one (the same
store, measurer and judged commits, another policy). Its :class:`~vllm_bisect.bisect.policies.Plan`
is the one the way in settled for the spec (:func:`~vllm_bisect.bisect.policies.resolve`, once
per symptom); the core builds its one policy from it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from vllm_bisect.bisect.events import EventHandler, NullEvents
from vllm_bisect.bisect.measurement.executor import Executor
from vllm_bisect.bisect.measurement.measurer import Measurer
from vllm_bisect.bisect.policies import Plan, make_policy, resolve
from vllm_bisect.bisect.policies.base import VerdictPolicy
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.state.store import MeasurementStore
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.builders.prefetch import PrefetchSink
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict.auto import Choice

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Core:
    """The assembled core (see the module docstring)."""

    spec: BisectSpec
    plan: Plan              # the verdict strategy (auto resolved), why, and its traits
    store: MeasurementStore
    measurer: Measurer
    tester: Tester

    @property
    def policy(self) -> VerdictPolicy:
        return self.tester.policy

    @property
    def choice(self) -> Choice:
        return self.plan.choice

    def with_policy(self, policy: VerdictPolicy, plan: Plan | None = None) -> Core:
        """The same core judged by ``policy`` from now on (the commits judged so far stay)."""
        return replace(self, tester=self.tester.with_policy(policy), plan=plan or self.plan)

    def with_retries(self, retries: int) -> Core:
        """The same core with ``retries`` servers tried again after a failure (a measurer of
        its own over the same executor and store; the commits judged so far stay)."""
        m = self.measurer
        measurer = Measurer(m.executor, self.store, m.prefetcher, retries=retries)
        return replace(self, measurer=measurer,
                       tester=self.tester.with_policy(self.policy, measurer))


def open_core(spec: BisectSpec, rng: CommitRange, journal: SessionJournal,
              cache: ResultCache | None, executor: Executor,
              events: EventHandler | None = None, *, prefetcher: PrefetchSink | None = None,
              policy: VerdictPolicy | None = None, plan: Plan | None = None,
              pair_bound: bool = False, retries: int | None = None) -> Core:
    """Assemble the core over ``rng``: the session's ``journal`` and the shared result
    ``cache``, evaluations on ``executor``. ``plan``: the spec's settled verdict plan (every
    way in passes the one it settled; None: resolved here, for the executor's workers).
    ``policy``: the verdict policy (default: one built from the plan; ``pair_bound`` as
    :func:`~vllm_bisect.bisect.policies.make_policy`); ``retries``: servers tried again after
    a failure (default: ``ops.retries``, none when following crashes)."""
    plan = plan or resolve(spec, workers=executor.workers)
    store = MeasurementStore(spec, journal, cache)
    measurer = Measurer(executor, store, prefetcher, retries=retries)
    policy = policy or make_policy(spec, plan.strategy, pair_bound=pair_bound)
    logger.debug("core over %d commits: %s, judged by %s", len(rng.commits),
                 plan.strategy.value, type(policy).__name__)
    return Core(spec, plan, store, measurer,
                Tester(rng, store, measurer, policy, events or NullEvents()))
