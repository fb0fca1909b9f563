"""The change-point detection on seeded synthetic series: one step, two steps, a step that
recovers, pure noise; the spread rule and the location window separately."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_bisect.watch.detect import (
    DetectOptions,
    Direction,
    best_split,
    detect,
    location_window,
    relative_spread,
)


def series(n: int, noise: float, seed: int, steps: dict[int, float]) -> list[float]:
    rng = np.random.default_rng(seed)
    x = 100.0 * (1 + noise * rng.standard_normal(n))
    for at, factor in steps.items():
        x[at:] *= factor
    return [float(v) for v in x]


def reported(values: list[float], **opts: float) -> list[tuple[int, int, int]]:
    return [(c.index, c.lo, c.hi) for c in detect(values, DetectOptions(**opts)) if c.reported]


@pytest.mark.parametrize("seed", range(5))
def test_one_step_is_found_with_its_window(seed: int) -> None:
    at = 20 + 3 * seed
    found = detect(series(60, 0.02, seed, {at: 1.05}))
    rep = [c for c in found if c.reported]
    assert len(rep) == 1
    c = rep[0]
    assert c.lo <= at <= c.hi and c.hi - c.lo <= 8
    assert c.direction(higher_is_better=False) is Direction.REGRESSION
    assert c.direction(higher_is_better=True) is Direction.IMPROVEMENT
    assert 0.03 < c.change < 0.07 and c.pvalue < 0.001


def test_two_steps_are_both_found() -> None:
    rep = reported(series(80, 0.02, 7, {25: 1.08, 55: 1.08}))
    assert len(rep) == 2
    assert rep[0][1] <= 25 <= rep[0][2] and rep[1][1] <= 55 <= rep[1][2]


def test_a_step_that_recovers_is_two_change_points_in_opposite_directions() -> None:
    found = [c for c in detect(series(80, 0.02, 3, {30: 1.10, 50: 1 / 1.10})) if c.reported]
    assert [c.index for c in found] == [30, 50] or (
        len(found) == 2 and found[0].lo <= 30 <= found[0].hi and found[1].lo <= 50 <= found[1].hi)
    assert found[0].after > found[0].before and found[1].after < found[1].before


def test_pure_noise_reports_nothing_in_most_series() -> None:
    alarms = sum(bool(reported(series(60, 0.02, 1000 + s, {}))) for s in range(40))
    assert alarms <= 4   # the benchmark measures the rate over 1000 series (docs/benchmarks.md)


def test_a_step_inside_the_run_to_run_spread_is_not_reported() -> None:
    # a 3% step in 5% point-to-point noise over 400 points: significant, but inside the spread
    values = series(400, 0.05, 11, {200: 1.03})
    found = detect(values, DetectOptions(window_len=200))
    assert found and not any(c.reported for c in found)
    assert all("spread" in c.why for c in found)


def test_relative_spread_ignores_the_step_itself() -> None:
    x = np.array(series(60, 0.02, 5, {30: 1.5}))
    assert relative_spread(x, [30]) == pytest.approx(0.02, rel=0.35)
    assert relative_spread(x, []) > 0.1


def test_best_split_and_location_window() -> None:
    seg = np.array([1.0] * 10 + [2.0] * 10)
    assert best_split(seg) == 10
    assert location_window(seg, 10, 0.99, 200, 0) == (0, 0)  # no noise: exact
    noisy = np.array(series(40, 0.02, 2, {20: 1.04}))
    lo, hi = location_window(noisy, best_split(noisy), 0.99, 400, 0)
    assert lo <= 0 <= hi and hi - lo >= 1


def test_short_or_broken_series_give_nothing() -> None:
    assert detect([1.0, 2.0, 3.0]) == []
    assert detect([1.0, 2.0, float("nan"), 4.0, 5.0]) == []
