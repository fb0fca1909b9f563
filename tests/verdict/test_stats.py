"""The bootstrap effect estimate."""

from __future__ import annotations

import random

from vllm_bisect.verdict.stats import bootstrap_change


def test_ci_covers_the_true_change_and_excludes_zero() -> None:
    rnd = random.Random(1)
    before = [10 * rnd.gauss(1, 0.05) for _ in range(20)]
    after = [72 * rnd.gauss(1, 0.05) for _ in range(20)]
    e = bootstrap_change(before, after, "ITL")
    assert e is not None and e.ci_low is not None and e.ci_high is not None
    assert e.ci_low < 6.2 < e.ci_high and e.ci_low > 5.5  # true change +620%
    assert "+6" in e.describe(" ms") and "95% bootstrap CI" in e.describe()


def test_no_change_ci_contains_zero() -> None:
    rnd = random.Random(2)
    e = bootstrap_change([rnd.gauss(5, 0.3) for _ in range(15)],
                         [rnd.gauss(5, 0.3) for _ in range(15)], "ITL")
    assert e is not None and e.ci_low is not None and e.ci_high is not None
    assert e.ci_low < 0 < e.ci_high


def test_too_few_samples_has_no_ci() -> None:
    e = bootstrap_change([1000.0], [128.0], "output tokens")
    assert e is not None and e.ci_low is None and "no CI from 1 vs 1 requests" in e.describe()
    assert bootstrap_change([], [1.0], "x") is None


def test_no_ci_is_printed_from_two_values_a_side() -> None:
    """issue 42: "95% bootstrap CI over 2 vs 2 requests" was printed; now none below 5."""
    e = bootstrap_change([10.0, 10.4], [13.0, 13.5], "ITL")
    assert e is not None and e.ci_low is None and e.ci_high is None
    text = e.describe(" ms")
    assert "bootstrap CI" not in text and "no CI from 2 vs 2 requests" in text, text


def test_samples_without_spread_have_a_point_ci() -> None:
    e = bootstrap_change([512.0] * 5, [128.0] * 5, "output tokens")
    assert e is not None and e.ci_low == e.ci_high == e.change == -0.75
    one_side = bootstrap_change([10.0, 10.5, 9.5, 10.2, 9.9], [20.0] * 5, "ITL")
    assert one_side is not None and one_side.ci_low is not None and one_side.ci_high is not None
    assert one_side.ci_low <= one_side.change <= one_side.ci_high and one_side.ci_low > 0.8
