"""Delta debugging on pure predicates: the issue's bound, interactions, untestable subsets."""

from __future__ import annotations

import math

import pytest

from vllm_bisect.isolate.ddmin import Result, Subset, minimize, split


def needs(*guilty: int, broken: tuple[int, ...] = ()) -> tuple[list[Subset], object]:
    calls: list[Subset] = []

    def test(s: Subset) -> Result:
        calls.append(s)
        if any(b in s for b in broken) and not all(g in s for g in broken):
            return Result.UNRESOLVED
        return Result.FAIL if all(g in s for g in guilty) else Result.PASS

    return calls, test


@pytest.mark.parametrize("guilty", range(20))
def test_one_guilty_of_twenty_within_the_issue_bound(guilty: int) -> None:
    calls, test = needs(guilty)
    r = minimize(20, test)  # type: ignore[arg-type]
    assert r.minimal == (guilty,)
    assert r.tests == len(calls) <= math.ceil(math.log2(20)) + 1  # 6, under the issue's 9
    assert r.descent_held


def test_two_items_needed_together_fall_back_to_ddmin() -> None:
    calls, test = needs(3, 14)
    r = minimize(20, test)  # type: ignore[arg-type]
    assert r.minimal == (3, 14)
    assert not r.descent_held
    assert len(set(calls)) == len(calls)  # memoized: no subset asked twice


def test_untestable_subsets_are_not_verdicts() -> None:
    # 0 and 1 only import together (a module and its new helper); 7 is guilty
    _, test = needs(7, broken=(0, 1))
    r = minimize(12, test)  # type: ignore[arg-type]
    assert r.minimal == (7,)


def test_guilty_pair_that_only_builds_together() -> None:
    _, test = needs(4, 5, broken=(4, 5))
    r = minimize(9, test)  # type: ignore[arg-type]
    assert r.minimal == (4, 5)


def test_known_results_are_not_rerun() -> None:
    calls, test = needs(2)
    r = minimize(4, test, known={(0, 1): Result.PASS})  # type: ignore[arg-type]
    assert r.minimal == (2,) and (0, 1) not in calls


def test_split_is_contiguous_and_complete() -> None:
    parts = split(list(range(7)), 3)
    assert parts == [(0, 1, 2), (3, 4), (5, 6)]
    assert split([1], 2) == [(1,)]
