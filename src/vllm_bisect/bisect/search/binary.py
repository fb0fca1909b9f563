"""The search protocol, and the one-at-a-time binary search.

A search starts from a range whose bad endpoint is known bad and ends with a
:class:`~vllm_bisect.bisect.search.steps.Step` (a culprit, or the candidates left when only
skipped commits separate good from bad). Implementations: :class:`BinarySearch` (one
worker), ``parallel.MultisectionSearch`` (k workers), ``bayes_search.BayesSearch`` (flaky
symptoms). Each one settles the endpoints its own way (verified first, verified beside the
first interior commits, or run several times).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.search.endpoints import Settle, calibrate_endpoints, settle
from vllm_bisect.bisect.search.multisection import ideal_rounds
from vllm_bisect.bisect.search.steps import (
    Step,
    bounds,
    ends_search,
    lookahead,
    next_step,
    unconfirmed_pair,
)
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.models import Verdict


@dataclass(frozen=True)
class Found:
    step: Step
    rounds: int                      # search rounds that ran evaluations
    confidence: float | None = None  # bayes: the posterior probability of the culprit


class Search(Protocol):
    def run(self) -> Found: ...


def steps_left(n: int, verdicts: dict[int, Verdict], workers: int = 1) -> int:
    """Rounds left to isolate the culprit in what remains of the interval."""
    b = bounds(n, verdicts)
    return ideal_rounds(b.first_bad - b.last_good, workers)


class BinarySearch:
    """One commit at a time, prefetching what may come next."""

    def __init__(self, tester: Tester, settled: bool = False) -> None:
        self.t = tester
        self.settled = settled  # the endpoints were settled before (bisect/recheck.py)

    def run(self) -> Found:
        t, rng = self.t, self.t.rng
        if not self.settled:
            settle(t, Settle.SEARCH)
        n = len(rng.commits)
        rounds = 0
        verdicts: dict[int, Verdict] = {n - 1: Verdict.BAD}
        pair = t.policy.traits.pair_bound
        confirmed: set[int] = set()   # judged at the whole-bisect bound (pair_bound)
        while True:
            if t.policy.traits.recalibrate:
                calibrate_endpoints(t)
                t.reopen_undecided(verdicts)
                confirmed.clear()   # judged under the model that went wrong: again
            step = next_step(n, verdicts)
            if step.done:
                todo = unconfirmed_pair(n, verdicts, confirmed) if pair else []
                if not todo:
                    return Found(step, rounds)
                # the answer rests on the final pair: its other end, judged again at the
                # bound (one at a time: a changed verdict moves the search on)
                rounds += t.confirm(todo[:1], verdicts, confirmed)
                continue
            assert step.test is not None
            t.measurer.prefetch([rng.commits[i].sha for i in lookahead(n, verdicts, step.test)])
            last = pair and ends_search(n, verdicts, step.test)
            outcome = t.test(rng.commits[step.test], Role.CONFIRM if last else Role.BISECT,
                             steps_left(n, verdicts))
            rounds += 0 if outcome.from_cache else 1
            verdicts[step.test] = outcome.verdict
            if last:
                confirmed.add(step.test)
            following = next_step(n, verdicts).test
            t.measurer.keep_only([rng.commits[following].sha] if following is not None else [])
