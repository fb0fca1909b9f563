"""The spread test: a delta is reported only outside the run-to-run spread."""

from __future__ import annotations

import pytest

from vllm_bisect.explain.stats import compare_sides


def test_sides_apart_by_more_than_their_spread_differ() -> None:
    s = compare_sides([100.0, 102.0], [130.0, 131.0])
    assert s.outside and s.diff == pytest.approx(29.5) and s.spread == 2.0
    assert s.ratio == pytest.approx(130.5 / 101.0)


def test_overlapping_or_close_sides_do_not() -> None:
    assert not compare_sides([100.0, 110.0], [108.0, 118.0]).outside   # overlap
    # apart, but by less than the spread within a side (10)
    assert not compare_sides([100.0, 110.0], [115.0, 116.0]).outside
    # apart and no spread, but under the 3% floor
    assert not compare_sides([100.0, 100.0], [102.0, 102.0]).outside
    # under the absolute floor (1 unit)
    assert not compare_sides([10.0, 10.0], [10.9, 10.9]).outside


def test_a_kernel_that_appears_is_outside_any_spread() -> None:
    s = compare_sides([0.0, 0.0], [50.0, 52.0])
    assert s.outside and s.ratio is None


def test_faster_is_outside_too_and_a_side_needs_a_server() -> None:
    assert compare_sides([200.0, 201.0], [150.0, 151.0]).outside
    with pytest.raises(ValueError):
        compare_sides([], [1.0])
