"""Multisection (pure): splits, work-conserving picks, round counts on deterministic verdicts."""

from __future__ import annotations

import heapq
import itertools
import random

import pytest

from vllm_bisect.bisect.search.multisection import choose, expected_left, ideal_rounds, useless
from vllm_bisect.bisect.search.steps import next_step
from vllm_bisect.models import Verdict


def test_ideal_rounds() -> None:
    assert ideal_rounds(200, 1) == 8
    assert ideal_rounds(200, 4) == 4   # the example: 8 rounds alone, 4 with 4 GPUs
    assert ideal_rounds(1, 4) == 0
    assert ideal_rounds(2, 1) == 1
    assert ideal_rounds(1000, 8) == 4


def test_idle_start_splits_evenly() -> None:
    n = 200
    picks = choose(n, {n - 1: Verdict.BAD}, (), 4)
    assert len(picks) == 4
    edges = [-1, *picks, n - 1]
    parts = [b - a for a, b in itertools.pairwise(edges)]
    assert max(parts) - min(parts) <= 1, parts


def test_one_worker_is_binary_search() -> None:
    rnd = random.Random(3)
    for _ in range(200):
        n = rnd.randint(2, 300)
        verdicts = {n - 1: Verdict.BAD}
        for i in rnd.sample(range(n - 1), min(n - 1, rnd.randint(0, 4))):
            verdicts[i] = rnd.choice([Verdict.SKIP, Verdict.GOOD])
        step = next_step(n, verdicts)
        picks = choose(n, verdicts, (), 1)
        if step.test is None:
            assert picks == []
        else:
            assert len(picks) == 1
            assert abs(picks[0] - step.test) <= 1


def test_freed_worker_takes_the_largest_gap() -> None:
    n = 100
    # busy at 24, 49, 74: a fifth worker splits one of the four ~25-commit segments
    pick = choose(n, {n - 1: Verdict.BAD}, (24, 49, 74), 1)
    assert len(pick) == 1 and pick[0] not in (24, 49, 74)
    # one busy point at 10: the free worker goes into the big right part
    pick = choose(n, {n - 1: Verdict.BAD}, (10,), 1)
    assert 50 <= pick[0] <= 60
    # and its choice minimises the expected candidates left
    best = min(range(11, 99), key=lambda p: expected_left(n, {n - 1: Verdict.BAD}, (10, p)))
    assert abs(pick[0] - best) <= 1


def test_never_picks_tested_skipped_or_busy() -> None:
    n = 20
    verdicts = {n - 1: Verdict.BAD, 9: Verdict.SKIP, 10: Verdict.SKIP, 4: Verdict.GOOD}
    picks = choose(n, verdicts, (14,), 8)
    assert not set(picks) & {9, 10, 14, 4}
    assert all(4 < p < 19 for p in picks)
    assert len(picks) == len(set(picks))


def test_nothing_to_do_when_resolved_or_only_skips_left() -> None:
    assert choose(10, {9: Verdict.BAD, 8: Verdict.GOOD}, (), 4) == []
    verdicts = {9: Verdict.BAD, 6: Verdict.GOOD, 7: Verdict.SKIP, 8: Verdict.SKIP}
    assert choose(10, verdicts, (), 4) == []


def test_useless_runs_are_outside_the_bounds() -> None:
    verdicts = {99: Verdict.BAD, 30: Verdict.GOOD, 60: Verdict.BAD}
    assert useless(100, verdicts, (10, 30, 45, 60, 80)) == [10, 30, 60, 80]


def synchronous(n: int, k: int, culprit: int, skips: set[int]) -> tuple[int | None, int]:
    """Rounds of k parallel tests until the search ends (deterministic verdicts)."""
    verdicts = {n - 1: Verdict.BAD}
    rounds = 0
    while not next_step(n, verdicts).done:
        picks = choose(n, verdicts, (), k)
        assert picks, verdicts
        rounds += 1
        for p in picks:
            verdicts[p] = (Verdict.SKIP if p in skips else
                           Verdict.BAD if p >= culprit else Verdict.GOOD)
    return next_step(n, verdicts).culprit, rounds


@pytest.mark.parametrize("n", [50, 200, 1000])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_rounds_bound_on_deterministic_verdicts(n: int, k: int) -> None:
    bound = ideal_rounds(n, k) + 1
    worst = 0
    for culprit in range(n):
        found, rounds = synchronous(n, k, culprit, set())
        assert found == culprit
        worst = max(worst, rounds)
    assert worst <= bound, (n, k, worst, bound)


def test_skips_still_find_the_culprit_or_the_candidates() -> None:
    rnd = random.Random(7)
    for _ in range(300):
        n, k = rnd.randint(5, 400), rnd.choice([2, 3, 4, 8])
        culprit = rnd.randrange(n)
        skips = {i for i in range(n - 1) if rnd.random() < 0.15}
        verdicts = {n - 1: Verdict.BAD}
        while not (step := next_step(n, verdicts)).done:
            for p in choose(n, verdicts, (), k):
                verdicts[p] = (Verdict.SKIP if p in skips else
                               Verdict.BAD if p >= culprit else Verdict.GOOD)
        assert culprit in step.candidates
        if step.culprit is not None:
            assert step.culprit == culprit


def test_work_conserving_with_uneven_probe_times() -> None:
    """Event-driven: each test takes a random time; a free worker starts the best commit at
    once, and runs made useless are dropped. The culprit is always found."""
    rnd = random.Random(11)
    for _ in range(200):
        n, k = rnd.randint(10, 500), rnd.choice([2, 4, 8])
        culprit = rnd.randrange(n)
        verdicts = {n - 1: Verdict.BAD}
        clock, heap, busy = 0.0, [], set()
        while not next_step(n, verdicts).done:
            for p in choose(n, verdicts, busy, k - len(busy)):
                busy.add(p)
                heapq.heappush(heap, (clock + rnd.uniform(1, 3), p))
            clock, p = heapq.heappop(heap)
            busy.discard(p)
            verdicts[p] = Verdict.BAD if p >= culprit else Verdict.GOOD
            for q in useless(n, verdicts, busy):
                busy.discard(q)
                heap = [(t, r) for t, r in heap if r != q]
                heapq.heapify(heap)
        assert next_step(n, verdicts).culprit == culprit
