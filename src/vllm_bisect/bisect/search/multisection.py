"""Multisection: which commits k workers should test, given what is known and in flight (pure).

Same indexing as :mod:`vllm_bisect.bisect.search.steps` (``-1`` the good endpoint, ``n-1`` the bad
one). With the culprit equally likely anywhere in ``(last_good, first_bad]``, a set of test
points splits that interval into segments and the expected number of candidates left after
their verdicts is ``sum(len(seg)**2) / len(interval)``. :func:`choose` places new points to
minimise it given the points already in flight: a segment of length ``L`` holding ``p`` new
points costs ``L**2 / (p + 1)``, so points go one at a time to the segment where one more point
saves most (optimal for this convex, separable cost), and each segment's points split it
evenly. From an idle start that is plain ``k+1``-section; when one worker frees up while others
are busy it is the most useful single commit for the current state (work-conserving).

Skipped commits stay candidates (one of them may be the culprit) but are never tested again;
a split point that lands on a tested, skipped or busy commit moves to the nearest free one in
its segment.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Mapping

from vllm_bisect.bisect.search.steps import bounds
from vllm_bisect.models import Verdict


def ideal_rounds(n: int, workers: int) -> int:
    """ceil(log_{k+1} n): rounds of k parallel tests that isolate one of n commits."""
    if n <= 1:
        return 0
    rounds, reach = 0, 1
    while reach < n:
        reach *= workers + 1
        rounds += 1
    return rounds


def _segments(lo: int, hi: int, points: Collection[int]) -> list[tuple[int, int]]:
    """Open intervals (a, b) between consecutive points in (lo, hi): a test at a point
    separates the candidates a+1..b from b+1.. (its own index belongs to the left part)."""
    edges = [lo, *sorted(p for p in points if lo < p < hi), hi]
    return list(itertools.pairwise(edges))


def _free(a: int, b: int, target: float, taken: Collection[int]) -> int | None:
    """The index in (a, b) nearest ``target`` that is not taken."""
    best: int | None = None
    for i in range(a + 1, b):
        if i in taken:
            continue
        if best is None or abs(i - target) < abs(best - target):
            best = i
    return best


def choose(n: int, verdicts: Mapping[int, Verdict], in_flight: Collection[int],
           free_workers: int) -> list[int]:
    """Up to ``free_workers`` new commit indices to test now (fewest when few are useful)."""
    if free_workers <= 0:
        return []
    b = bounds(n, verdicts)
    if b.first_bad - b.last_good <= 1:
        return []
    busy = [p for p in in_flight if b.last_good < p < b.first_bad]
    segs = _segments(b.last_good, b.first_bad, busy)
    extra = [0] * len(segs)  # new points given to each segment
    taken: set[int] = set(verdicts) | set(in_flight)
    free_in = [sum(1 for i in range(a + 1, c) if i not in taken) for a, c in segs]
    for _ in range(free_workers):
        best, gain = -1, 0.0
        for j, (a, c) in enumerate(segs):
            if extra[j] >= free_in[j]:
                continue
            length = c - a
            g = length * length * (1 / (extra[j] + 1) - 1 / (extra[j] + 2))
            if g > gain:
                best, gain = j, g
        if best < 0:
            break
        extra[best] += 1
    out: list[int] = []
    for j, (a, c) in enumerate(segs):
        for m in range(1, extra[j] + 1):
            pick = _free(a, c, a + (c - a) * m / (extra[j] + 1), taken)
            if pick is not None:
                taken.add(pick)
                out.append(pick)
    return sorted(out)


def useless(n: int, verdicts: Mapping[int, Verdict], in_flight: Collection[int]) -> list[int]:
    """In-flight indices whose verdict can no longer change the answer: outside
    ``(last_good, first_bad)``. Their runs should be cancelled."""
    b = bounds(n, verdicts)
    return sorted(p for p in in_flight if not b.last_good < p < b.first_bad)


def expected_left(n: int, verdicts: Mapping[int, Verdict], points: Collection[int]) -> float:
    """Expected candidates left after verdicts at ``points`` (the quantity choose minimises)."""
    b = bounds(n, verdicts)
    total = b.first_bad - b.last_good
    if total <= 0:
        return 0.0
    return sum((c - a) ** 2 for a, c in _segments(b.last_good, b.first_bad, points)) / total


def speedup_ideal(n: int, workers: int) -> float:
    """log2(n) / log_{k+1}(n): the round-count speed-up k workers can give at best."""
    if n <= 1:
        return 1.0
    return math.log(workers + 1) / math.log(2)
