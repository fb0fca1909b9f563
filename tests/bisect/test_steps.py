"""The pure search strategy."""

from __future__ import annotations

import math
import random

import pytest

from vllm_bisect.bisect.search.steps import bounds, nearest_untested, next_step
from vllm_bisect.models import Verdict


def bisect(n: int, culprit: int, skipped: frozenset[int] = frozenset()) -> tuple[object, int]:
    verdicts: dict[int, Verdict] = {n - 1: Verdict.BAD}
    probes = 0
    while True:
        step = next_step(n, verdicts)
        if step.done:
            return step, probes
        assert step.test is not None and step.test not in verdicts
        probes += 1
        if step.test in skipped:
            verdicts[step.test] = Verdict.SKIP
        else:
            verdicts[step.test] = Verdict.BAD if step.test >= culprit else Verdict.GOOD


@pytest.mark.parametrize("n", [1, 2, 3, 16, 17, 100, 1024])
def test_finds_every_culprit_within_log2_probes(n: int) -> None:
    for culprit in range(n):
        step, probes = bisect(n, culprit)
        assert step.culprit == culprit  # type: ignore[attr-defined]
        assert probes <= math.ceil(math.log2(max(n, 2)))


def test_skips_alternate_around_the_midpoint() -> None:
    verdicts = {9: Verdict.BAD, 4: Verdict.SKIP}
    assert nearest_untested(-1, 9, verdicts) == 3
    verdicts[3] = Verdict.SKIP
    assert nearest_untested(-1, 9, verdicts) == 5


def test_only_skipped_between_gives_candidates() -> None:
    n = 10
    step, _ = bisect(n, culprit=5, skipped=frozenset({4, 5}))
    assert step.culprit is None  # type: ignore[attr-defined]
    assert step.candidates == (4, 5, 6)  # 4 and 5 untestable: any of 4, 5, 6 may be first bad  # type: ignore[attr-defined]


def test_random_histories_with_skips() -> None:
    rnd = random.Random(1)
    for _ in range(300):
        n = rnd.randint(2, 300)
        culprit = rnd.randrange(n)
        skipped = frozenset(i for i in range(n - 1) if rnd.random() < 0.15)
        step, _ = bisect(n, culprit, skipped)
        cands = step.candidates  # type: ignore[attr-defined]
        assert culprit in cands
        assert all(c in skipped or c == cands[-1] for c in cands)


def test_bounds_ignore_bad_below_good() -> None:
    b = bounds(10, {2: Verdict.BAD, 5: Verdict.GOOD, 9: Verdict.BAD})
    assert (b.last_good, b.first_bad) == (5, 9)


def test_lookahead_gives_both_possible_next_tests() -> None:
    from vllm_bisect.bisect.search.steps import lookahead

    verdicts = {15: Verdict.BAD}
    first = next_step(16, verdicts).test
    assert first == 7
    assert lookahead(16, verdicts, 7) == [11, 3]  # good -> (7, 15), bad -> (-1, 7)
    assert lookahead(2, {1: Verdict.BAD}, 0) == []  # either verdict ends the search
