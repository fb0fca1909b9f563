"""Fresh measurements: an executor's workers, retries, server-start accounting, prefetch.

Every fresh evaluation goes through one :class:`Measurer`, whatever the number of workers
(one worker is an :class:`~vllm_bisect.bisect.measurement.executor.InlineExecutor`, so GPU pinning and
per-GPU locks are the same code). A server that died or a probe that failed is tried again
on a fresh server ``ops.retries`` times (one flaky crash at an endpoint must not end a
long bisect); following the crash symptom, the failure is the answer (no retry). A finished
evaluation is counted (a server start unless there was no artifact) and put in the result
cache; a cancelled one is neither. Ctrl-C or a fatal error tears every worker down first.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace

from vllm_bisect import interrupt
from vllm_bisect.bisect.measurement.executor import Done, Executor
from vllm_bisect.bisect.policies.base import MoreSamples
from vllm_bisect.bisect.state import unrecorded
from vllm_bisect.bisect.state.store import MeasurementStore
from vllm_bisect.builders.prefetch import PrefetchSink
from vllm_bisect.models import EvalStatus, Evaluation, Phase

logger = logging.getLogger(__name__)


class Measurer:
    def __init__(self, executor: Executor, store: MeasurementStore,
                 prefetcher: PrefetchSink | None = None, retries: int | None = None) -> None:
        """``retries``: servers tried again after a failure (default ``ops.retries``; none
        when following crashes)."""
        self.executor = executor
        self.store = store
        self.prefetcher = prefetcher
        self.server_starts = 0
        self.unaccounted_starts = 0   # servers of account=False work (the verification)
        # every start, by what it was for (also journaled: a resumed session counts them all)
        self.by_phase: Counter[Phase] = Counter()
        self.phase = Phase.SEARCH
        spec = store.spec
        default = spec.ops.retries if spec.verdict.symptom.info.retry else 0
        self.retries = default if retries is None else retries
        self._next = 0
        # own task id -> (executor task, commit, more, retries left, account, phase, the
        # journal's row of this attempt)
        self._tasks: dict[int, tuple[int, str, MoreSamples | None, int, bool, Phase, int]] = {}
        self._by_exec: dict[int, int] = {}
        # evaluations an earlier call of the session finished and never recorded (killed
        # while their server was torn down: bisect/state/unrecorded.py), returned by the
        # next wait() without a server
        self._ready: list[Done] = []

    @contextmanager
    def during(self, phase: Phase) -> Iterator[None]:
        """Servers started in this block count as ``phase``."""
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before

    def _counted(self, row: int, phase: Phase, started: bool) -> None:
        if started:
            self.by_phase[phase] += 1
        self.store.journal.start_done(row, started)

    @property
    def workers(self) -> int:
        return self.executor.workers

    def free(self) -> int:
        return self.executor.workers - self.executor.in_flight()

    def in_flight(self) -> int:
        return len(self._tasks) + len(self._ready)

    # -- asynchronous: the parallel search -----------------------------------------------
    def submit(self, commit: str, more: MoreSamples | None = None, account: bool = True,
               phase: Phase | None = None) -> int:
        """``account``: count and cache it (culprit verification does not: it is kept in
        the journal, and the search's server starts are what the report compares).
        ``phase``: what its servers count as (default: the current :meth:`during`)."""
        task, self._next = self._next, self._next + 1
        self._start(task, commit, more, self.retries, account, phase or self.phase)
        return task

    def _start(self, task: int, commit: str, more: MoreSamples | None, left: int,
               account: bool, phase: Phase) -> None:
        interrupt.check()   # a Ctrl-C swallowed since the last server (vllm_bisect.interrupt)
        kept = unrecorded.take(self.store.journal, self.store.key(commit), more)
        if kept is not None:  # its server (counted by its own call) was measured to the end
            logger.info("%s: taking the server measured before this session was cut off "
                        "(finished, not yet recorded)", commit[:12])
            self._ready.append(Done(task, commit, kept, "journal"))
            if account:
                self.store.put(kept)
            return
        row = self.store.journal.start_pending(commit, phase.value)
        ex_task = self.executor.submit(commit, more)
        self._tasks[task] = (ex_task, commit, more, left, account, phase, row)
        self._by_exec[ex_task] = task

    def cancel(self, task: int) -> None:
        if task in self._tasks:
            self.executor.cancel(self._tasks[task][0])

    def wait(self, timeout: float | None = None) -> list[Done]:
        """What finished (failures retried first), counted and cached."""
        try:
            out, self._ready = self._ready, []
            while not out and self._tasks:
                for done in self.executor.wait(timeout):
                    task = self._by_exec.pop(done.task)
                    _, commit, more, left, account, phase, row = self._tasks.pop(task)
                    ev = done.evaluation
                    unrecorded.drop(self.store.journal, ev)
                    if ev.status is EvalStatus.FAILED and left > 0:
                        self.server_starts += 1  # the failed attempt's (it is not cached)
                        self._counted(row, phase, True)
                        logger.warning("%s failed (%s); trying again on a fresh server",
                                       commit[:12], ev.reason)
                        self._start(task, commit, more, left - 1, account, phase)
                        continue
                    started = ev.status not in (EvalStatus.CANCELLED, EvalStatus.UNAVAILABLE)
                    self._counted(row, phase, started)
                    if account and ev.status is not EvalStatus.CANCELLED:
                        self._account(ev)
                    elif started:
                        self.unaccounted_starts += 1
                    out.append(replace(done, task=task))
                if timeout is not None:
                    break
            return out
        except BaseException:
            self.close()
            raise

    def _account(self, ev: Evaluation) -> None:
        if ev.status is not EvalStatus.UNAVAILABLE:
            self.server_starts += 1
        self.store.put(ev)

    # -- synchronous ----------------------------------------------------------------------
    def measure_all(self, wants: Mapping[str, MoreSamples | None], account: bool = True,
                    phases: Mapping[str, Phase] | None = None) -> dict[str, Evaluation]:
        """Fresh evaluations (no cache lookup) of each commit with the samples it wants, as
        many at once as there are free workers; ``phases``: what a commit's servers count as
        (default: the current :meth:`during`)."""
        out: dict[str, Evaluation] = {}
        waiting = list(wants)
        try:
            while waiting or self._tasks:
                while waiting and self.free() > 0:
                    commit = waiting.pop(0)
                    self.submit(commit, wants[commit], account, (phases or {}).get(commit))
                for done in self.wait():
                    out[done.commit] = done.evaluation
        except BaseException:
            self.close()
            raise
        return out

    def fresh_runs(self, commits: Sequence[str], more: MoreSamples | None) -> list[Evaluation]:
        """A fresh server for each entry (a commit may repeat: repeated runs), as many at
        once as there are free workers; in the order given."""
        out: dict[int, Evaluation] = {}
        waiting = list(enumerate(commits))
        tasks: dict[int, int] = {}
        try:
            while waiting or tasks:
                while waiting and self.free() > 0:
                    i, commit = waiting.pop(0)
                    tasks[self.submit(commit, more)] = i
                for done in self.wait():
                    out[tasks.pop(done.task)] = done.evaluation
        except BaseException:
            self.close()
            raise
        return [out[i] for i in range(len(commits))]

    def measure(self, commit: str, more: MoreSamples | None = None) -> Evaluation:
        return self.measure_all({commit: more})[commit]

    # -- prefetch (one worker: the next possible commits' artifacts) ----------------------
    def prefetch(self, commits: list[str]) -> None:
        if self.prefetcher is not None:
            self.prefetcher.prefetch(self.store.unmeasured(commits))

    def keep_only(self, commits: list[str]) -> None:
        if self.prefetcher is not None:
            self.prefetcher.keep_only(commits)

    def close(self) -> None:
        self.executor.close()
        self._tasks.clear()
        self._by_exec.clear()
