"""The bootstrap effect estimate."""

from __future__ import annotations

import math
import random

from vllm_bisect.verdict.stats import (
    Interval,
    bootstrap_change,
    bootstrap_interval,
    server_change,
    server_spread,
)


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
    assert e is not None and e.ci_low is None and "no CI from 1 request a side" in e.describe()
    assert bootstrap_change([], [1.0], "x") is None


def test_no_ci_is_printed_from_two_values_a_side() -> None:
    """issue 42: "95% bootstrap CI over 2 vs 2 requests" was printed; now none below 5."""
    e = bootstrap_change([10.0, 10.4], [13.0, 13.5], "ITL")
    assert e is not None and e.ci_low is None and e.ci_high is None
    text = e.describe(" ms")
    assert "bootstrap CI" not in text and "no CI from 2 requests a side" in text, text


def test_samples_without_spread_have_a_point_ci() -> None:
    e = bootstrap_change([512.0] * 5, [128.0] * 5, "output tokens")
    assert e is not None and e.ci_low == e.ci_high == e.change == -0.75
    one_side = bootstrap_change([10.0, 10.5, 9.5, 10.2, 9.9], [20.0] * 5, "ITL")
    assert one_side is not None and one_side.ci_low is not None and one_side.ci_high is not None
    assert one_side.ci_low <= one_side.change <= one_side.ci_high and one_side.ci_low > 0.8


def test_a_deterministic_change_is_its_own_evidence() -> None:
    """issue 50: a cap verified by its re-checks (the parent 3 runs, the culprit 1) said "no
    CI from 3 vs 1 requests"; no spread on either side is the change itself, said so."""
    e = bootstrap_change([160.0] * 3, [128.0], "output tokens", servers=(3, 1))
    assert e is not None and e.interval is Interval.EXACT and e.ci_low == e.ci_high == e.change
    text = e.describe("", ("the parent", "the culprit"))
    assert ("160 on each of the parent's 3 requests on 3 servers, 128 on each of the "
            "culprit's 1 request; no spread" in text), text
    one = bootstrap_change([160.0], [128.0], "output tokens")   # one value a side shows nothing
    assert one is not None and one.interval is Interval.NONE
    assert "1000 -> 128" in bootstrap_change([1000.0] * 3, [128.0] * 3, "x").describe()


def test_a_two_level_interval_rests_on_the_servers() -> None:
    """A server is the two-level measurement's unit: the interval of two commits' change
    counts each side's server level (tau) and request noise (sigma), estimated from every
    server of the session, so one server a side with 10 requests is not read as 10
    independent samples; said with the servers and what the noise came from."""
    rnd = random.Random(3)

    def servers(level: float, k: int, n: int) -> list[list[float]]:
        out = []
        for _ in range(k):
            b = level * math.exp(rnd.gauss(0, 0.1))          # this server's level: tau 0.1
            out.append([b * math.exp(rnd.gauss(0, 0.02)) for _ in range(n)])   # sigma 0.02
        return out

    ends = [servers(1.8, 4, 5), servers(2.7, 4, 5)]      # the endpoints' calibration
    parent, culprit = servers(1.8, 1, 10), servers(2.7, 1, 10)
    spread = server_spread([*ends, parent, culprit])
    assert spread is not None and spread.servers == 10 and spread.commits == 4
    assert 0.05 < spread.tau2 ** 0.5 < 0.2 and 0.01 < spread.sigma2 ** 0.5 < 0.04, spread
    e = server_change(parent, culprit, "ITL", spread)
    assert e is not None and e.interval is Interval.SERVERS
    assert e.ci_low is not None and e.ci_high is not None
    assert e.ci_low < 0.5 < e.ci_high, e   # the true change: +50%
    text = e.describe(" ms")
    assert "t interval over the servers' means: 10 requests a side on one server each; " \
        "server level ~" in text and "from 10 servers of 4 commits" in text, text
    # the requests alone (one server a side) say far less than they seem to
    naive = bootstrap_change(parent[0], culprit[0], "ITL")
    assert naive is not None and naive.ci_low is not None and naive.ci_high is not None
    assert naive.ci_high - naive.ci_low < (e.ci_high - e.ci_low) / 3
    assert server_change(parent, culprit, "ITL", None) is None


def test_the_bootstrap_interval_is_scipys_without_loading_scipy_stats() -> None:
    """bootstrap_interval draws what scipy.stats.bootstrap draws and computes its BCa and
    percentile intervals: the same numbers on random samples, ties, degenerate ones (NaN
    where scipy's are); the t quantile of server_change is scipy.stats.t's."""
    import warnings

    import numpy as np
    from scipy.special import stdtrit
    from scipy.stats import bootstrap, t

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        den = np.mean(x, axis=axis)
        return np.mean(y, axis=axis) / np.where(den == 0, np.nan, den) - 1.0

    rnd = random.Random(5)
    cases = [([1.0, 1, 1, 1, 1.0001], [5.0] * 5), ([0.0, 0, 0, 0, 1], [1.0, 2, 3, 4, 5]),
             ([1.0, 2, 3, 4, 5], [2.0] * 5)]
    for k in range(40):
        b = [rnd.lognormvariate(0, 0.3) for _ in range(rnd.randint(5, 30))]
        a = [rnd.lognormvariate(0.2, 0.5) for _ in range(rnd.randint(5, 30))]
        cases.append(([round(x, 1) for x in b], a) if k % 5 == 0 else (b, a))
    for seed, (b, a) in enumerate(cases):
        for method in ("BCa", "percentile"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = bootstrap((b, a), ratio, n_resamples=2000, vectorized=True, method=method,
                                rng=np.random.default_rng(seed)).confidence_interval
            mine = bootstrap_interval(b, a, 2000, seed, bca=method == "BCa")
            assert np.allclose(mine, (ref.low, ref.high), rtol=1e-12, atol=1e-12,
                               equal_nan=True), (seed, method, mine, ref)
    for df in (1, 3, 12, 200):
        assert math.isclose(float(stdtrit(df, 0.975)), float(t.ppf(0.975, df)), rel_tol=1e-12)


def test_a_reports_statistics_leave_scipy_stats_unloaded() -> None:
    """Every `vllm-bisect run` writes a report with these intervals; scipy.stats took 0.4-0.9
    s of CPU to load in each (the suite starts ~150 such runs)."""
    import subprocess
    import sys

    code = ("import sys, random; from vllm_bisect.verdict.stats import *\n"
            "r = random.Random(1); xs = [[r.gauss(10, 1) for _ in range(8)] for _ in range(4)]\n"
            "assert bootstrap_change(xs[0], xs[1], 'ITL').ci_low is not None\n"
            "assert server_change(xs[:2], xs[2:], 'ITL', server_spread([xs[:2], xs[2:]]))\n"
            "from vllm_bisect.verdict.changepoint_rate import _rate_summary\n"
            "_rate_summary(3, 1, 0.2)\n"
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out
