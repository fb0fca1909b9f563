"""The parallel search: k workers, multisection, work-conserving, cancelling useless runs.

Whenever a worker is free, :func:`~vllm_bisect.bisect.multisection.choose` picks the most
useful commit for what is known and in flight; whenever a verdict arrives, runs it made
useless (outside the new bounds) are cancelled. Only this thread judges, caches and journals;
workers only evaluate. ``rounds`` is the depth of the search: an evaluation started after
results of depth d were known has depth d + 1 (with equal probe times, exactly the rounds of
a synchronous multisection).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vllm_bisect.bisect.executor import Done, Executor
from vllm_bisect.bisect.multisection import choose, ideal_rounds, useless
from vllm_bisect.bisect.strategy import Step, bounds, next_step
from vllm_bisect.models import Evaluation, Verdict

if TYPE_CHECKING:
    from vllm_bisect.bisect.driver import Driver

logger = logging.getLogger(__name__)


class ParallelSearch:
    def __init__(self, driver: Driver, executor: Executor) -> None:
        self.d = driver
        self.ex = executor
        n = len(driver.rng.commits)
        self.n = n
        self.verdicts: dict[int, Verdict] = {n - 1: Verdict.BAD}
        self.running: dict[int, tuple[int, int]] = {}   # task -> (index, depth)
        self.by_index: dict[int, int] = {}               # index -> task
        self.cancelled: set[int] = set()                 # tasks asked to stop
        self.known_depth = 0
        self.rounds = 0

    def _steps_left(self) -> int:
        b = bounds(self.n, self.verdicts)
        return ideal_rounds(b.first_bad - b.last_good, self.ex.workers)

    def _cancel(self, indices: list[int], why: str) -> None:
        for idx in indices:
            task = self.by_index[idx]
            if task not in self.cancelled:
                self.cancelled.add(task)
                self.ex.cancel(task)
                self.d.events.on_phase(self.d.rng.commits[idx].sha, f"cancelled: {why}")

    def _dispatch(self, speculative: bool = False) -> bool:
        """Start commits on free workers; True when a cached result changed the state.
        ``speculative``: the endpoints are still being verified (cached commits wait)."""
        free = self.ex.workers - self.ex.in_flight()
        more = self.d._more()
        for idx in choose(self.n, self.verdicts, set(self.by_index), free):
            info = self.d.rng.commits[idx]
            found = self.d.lookup(info.sha, more)
            if found is not None and speculative:
                continue
            if found is not None:
                self.d.events.on_testing(info, "bisect", self._steps_left())
                self.verdicts[idx] = self.d.record(info, "bisect", found, cached=True).verdict
                return True
            self.d.events.on_testing(info, "bisect", self._steps_left())
            if self.d.sequential is not None:
                self.d.sampled_by[info.sha] = self.d.sequential
            if self.d.policy is not None:  # the two-level test: its own "more"
                more = self.d.policy.start(info.sha)
            task = self.ex.submit(info.sha, more)
            self.running[task] = (idx, self.known_depth + 1)
            self.by_index[idx] = task
        return False

    def _finish(self, done: Done) -> None:
        idx, depth = self.running.pop(done.task)
        del self.by_index[idx]
        if done.cancelled or done.task in self.cancelled:
            logger.info("%s: run cancelled on %s", done.commit[:12], done.worker)
            self.d.sampled_by.pop(done.commit, None)
            if self.d.policy is not None:
                self.d.policy.cancel(done.commit)
            return
        self.d.fresh(done.evaluation)
        ev = done.evaluation
        if self.d.policy is not None:  # the two-level test: a fresh server, or decided
            again = self.d.policy.again(done.commit, ev)
            if again is not False:
                task = self.ex.submit(done.commit, again if callable(again) else None)
                self.running[task] = (idx, depth)
                self.by_index[idx] = task
                return
            ev = self.d.policy.finish(done.commit, ev)
        info = self.d.rng.commits[idx]
        self.verdicts[idx] = self.d.record(info, "bisect", ev, cached=False).verdict
        self.known_depth = max(self.known_depth, depth)
        self.rounds = max(self.rounds, depth)

    def _endpoints(self) -> None:
        """Verify both endpoints at once while the other workers start on the first interior
        commits (assuming the endpoints reproduce; if not, those runs are cancelled)."""
        d, rng = self.d, self.d.rng
        steps = ideal_rounds(self.n, self.ex.workers)
        results: dict[str, tuple[Evaluation, bool]] = {}
        tasks: dict[int, str] = {}
        order = d.terms.endpoints(rng)  # the reference endpoint is judged first
        for info, role in order:
            d.events.on_testing(info, role, steps)
            found = d.lookup(info.sha)
            if found is not None:
                results[info.sha] = (found, True)
            else:
                tasks[self.ex.submit(info.sha)] = info.sha
        self._dispatch(speculative=True)
        held: list[Done] = []
        while tasks:
            for done in self.ex.wait():
                if done.task in tasks:
                    tasks.pop(done.task)
                    d.fresh(done.evaluation)
                    results[done.commit] = (done.evaluation, False)
                else:
                    held.append(done)
        out = {info.sha: d.record(info, role, *results[info.sha]) for info, role in order}
        d.check_endpoints(out[rng.good.sha], out[rng.bad.sha])
        for done in held:
            self._finish(done)

    def run(self, endpoints: bool = False) -> tuple[Step, int]:
        try:
            if endpoints:
                self._endpoints()
            while True:
                self._cancel(useless(self.n, self.verdicts, list(self.by_index)),
                             "a verdict elsewhere made it useless")
                step = next_step(self.n, self.verdicts)
                if step.done:
                    self._cancel(list(self.by_index), "the search is over")
                    while self.running:
                        for done in self.ex.wait():
                            self._finish(done)
                    return step, self.rounds
                if self._dispatch():
                    continue
                if not self.running:  # nothing left to test, yet not done: cannot happen
                    return Step(candidates=step.candidates), self.rounds
                for done in self.ex.wait():
                    self._finish(done)
        except BaseException:
            self.ex.close()  # Ctrl-C or a fatal error: tear every server down first
            raise
