"""The parallel search: k workers, multisection, work-conserving, cancelling useless runs.

Whenever a worker is free, :func:`~vllm_bisect.bisect.search.multisection.choose` picks the most
useful commit for what is known and in flight; whenever a verdict arrives, runs it made
useless (outside the new bounds) are cancelled. Only this thread judges, caches and journals;
workers only evaluate. ``rounds`` is the depth of the search: an evaluation started after
results of depth d were known has depth d + 1 (with equal probe times, exactly the rounds of
a synchronous multisection).
"""

from __future__ import annotations

import logging

from vllm_bisect.bisect.measurement.executor import Done
from vllm_bisect.bisect.policies.base import Again, Role
from vllm_bisect.bisect.search.binary import Found, steps_left
from vllm_bisect.bisect.search.endpoints import (
    Settle,
    calibrate_endpoints,
    check_measured_endpoints,
    settle,
)
from vllm_bisect.bisect.search.multisection import choose, ideal_rounds, useless
from vllm_bisect.bisect.search.steps import Step, next_step, unconfirmed_pair
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.models import Evaluation, Phase, Verdict

logger = logging.getLogger(__name__)


class MultisectionSearch:
    def __init__(self, tester: Tester) -> None:
        self.t = tester
        self.m = tester.measurer
        n = len(tester.rng.commits)
        self.n = n
        self.verdicts: dict[int, Verdict] = {n - 1: Verdict.BAD}
        self.running: dict[int, tuple[int, int]] = {}   # task -> (index, depth)
        self.by_index: dict[int, int] = {}               # index -> task
        self.cancelled: set[int] = set()                 # tasks asked to stop
        self.known_depth = 0
        self.rounds = 0
        self.confirmed: set[int] = set()   # judged at the whole-bisect bound (pair_bound)

    def _steps_left(self) -> int:
        return steps_left(self.n, self.verdicts, self.m.workers)

    def _cancel(self, indices: list[int], why: str) -> None:
        for idx in indices:
            task = self.by_index[idx]
            if task not in self.cancelled:
                self.cancelled.add(task)
                self.m.cancel(task)
                self.t.events.on_phase(self.t.rng.commits[idx].sha, f"cancelled: {why}")

    def _dispatch(self, speculative: bool = False) -> bool:
        """Start commits on free workers; True when a cached result changed the state.
        ``speculative``: the endpoints are still being verified (cached commits wait)."""
        t = self.t
        for idx in choose(self.n, self.verdicts, set(self.by_index), self.m.free()):
            info = t.rng.commits[idx]
            found, more = t.lookup(info.sha, Role.BISECT)
            if found is not None and speculative:
                t.drop(info.sha)
                continue
            t.events.on_testing(info, Role.BISECT, self._steps_left())
            if found is not None:
                self.verdicts[idx] = t.record(info, Role.BISECT, found, cached=True).verdict
                return True
            task = self.m.submit(info.sha, more)
            self.running[task] = (idx, self.known_depth + 1)
            self.by_index[idx] = task
        return False

    def _finish(self, done: Done) -> None:
        idx, depth = self.running.pop(done.task)
        del self.by_index[idx]
        if done.cancelled or done.task in self.cancelled:
            logger.info("%s: run cancelled on %s", done.commit[:12], done.worker)
            self.t.drop(done.commit)
            return
        t = self.t
        merged = t.after_server(done.commit, done.evaluation)
        if isinstance(merged, Again):  # the two-level test: a fresh server for the commit
            task = self.m.submit(done.commit, merged.more)
            self.running[task] = (idx, depth)
            self.by_index[idx] = task
            return
        info = t.rng.commits[idx]
        self.verdicts[idx] = t.record(info, Role.BISECT, merged, cached=False).verdict
        self.known_depth = max(self.known_depth, depth)
        self.rounds = max(self.rounds, depth)

    def _endpoints(self) -> None:
        """Verify both endpoints at once while the other workers start on the first interior
        commits (assuming the endpoints reproduce; if not, those runs are cancelled)."""
        t, rng = self.t, self.t.rng
        steps = ideal_rounds(self.n, self.m.workers)
        results: dict[str, tuple[Evaluation, bool]] = {}
        tasks: dict[int, str] = {}
        order = t.terms.endpoints(rng)  # the reference endpoint is judged first
        for info, role in order:
            t.events.on_testing(info, role, steps)
            found = t.store.get(info.sha)
            if found is not None:
                results[info.sha] = (found, True)
            else:
                with self.m.during(Phase.ENDPOINTS):
                    tasks[self.m.submit(info.sha)] = info.sha
        self._dispatch(speculative=True)
        held: list[Done] = []
        while tasks:
            for done in self.m.wait():
                if done.task in tasks:
                    tasks.pop(done.task)
                    results[done.commit] = (done.evaluation, False)
                else:
                    held.append(done)
        check_measured_endpoints(t, results)
        for done in held:
            self._finish(done)

    def run(self) -> Found:
        # pair_bound as the search began (a policy that falls back to the per-step bound
        # still has loose verdicts from before: the final pair is re-judged all the same)
        self.pair = self.t.policy.traits.pair_bound
        try:
            # a verification runs beside the first interior commits
            settle(self.t, Settle.SEARCH, verify=self._endpoints)
            while True:
                if self.t.policy.traits.recalibrate:
                    while self.running:   # the model changes: what runs finishes first
                        for done in self.m.wait():
                            self._finish(done)
                    calibrate_endpoints(self.t)
                    self.t.reopen_undecided(self.verdicts)
                    self.confirmed.clear()   # judged under the model that went wrong: again
                self._cancel(useless(self.n, self.verdicts, list(self.by_index)),
                             "a verdict elsewhere made it useless")
                step = next_step(self.n, self.verdicts)
                if step.done:
                    self._cancel(list(self.by_index), "the search is over")
                    while self.running:
                        for done in self.m.wait():
                            self._finish(done)
                    todo = (unconfirmed_pair(self.n, self.verdicts, self.confirmed)
                            if self.pair else [])
                    if not todo:
                        return Found(step, self.rounds)
                    self.rounds += self.t.confirm(todo, self.verdicts, self.confirmed)
                    self.known_depth = self.rounds
                    continue
                if self._dispatch():
                    continue
                if not self.running:  # nothing left to test, yet not done: cannot happen
                    return Found(Step(candidates=step.candidates), self.rounds)
                for done in self.m.wait():
                    self._finish(done)
        except BaseException:
            self.m.close()  # Ctrl-C or a fatal error: tear every server down first
            raise
