"""The model of the range, pure (vllm_bisect.verdict.changepoint and changepoint_next):
drawn servers in, the posterior and the next measurement out."""

from __future__ import annotations

import math
import random

import pytest

from vllm_bisect.verdict.changepoint import (
    Prior,
    Server,
    posterior,
    requests_per_server,
    summarise,
)
from vllm_bisect.verdict.changepoint_next import NONE_DOUBT, anchor, choose, doubt

PRIOR = Prior(direction=1, min_step=math.log(1.05))


def server(rnd: random.Random, i: int, level: float, cv: float = 0.03,
           server_cv: float = 0.03, n: int = 3) -> Server:
    lvl = level * max(0.05, rnd.gauss(1, server_cv))
    out = summarise(i, [lvl * max(0.05, rnd.gauss(1, cv)) for _ in range(n)])
    assert out is not None
    return out


def test_one_slow_request_does_not_move_its_server() -> None:
    calm = summarise(0, [10.0, 10.1, 9.9, 10.05])
    slow = summarise(0, [10.0, 10.1, 9.9, 40.0])
    assert calm is not None and slow is not None
    assert abs(slow.mean - calm.mean) < 0.05    # (unfenced: log(40) pulls it up by 0.35)


def test_a_clean_step_between_two_measured_commits_holds_the_posterior() -> None:
    rnd = random.Random(3)
    servers = [server(rnd, i, 10.0 if i < 40 else 13.0) for i in (-1, 99, 50, 25, 37, 43)]
    post = posterior(100, servers, PRIOR)
    j, p = post.top()
    assert (post.bounds[j], post.bounds[j + 1]) == (37, 43)
    assert p > 0.95 and post.none < 0.02
    assert post.p_bad(37) < 0.02 and post.p_bad(43) > 0.98
    eff, lo, hi = post.effect_interval()
    assert lo < 1.3 < hi and 1.2 < eff < 1.4


def test_no_step_is_no_step_and_the_wrong_direction_is_not_a_regression() -> None:
    rnd = random.Random(4)
    flat = [server(rnd, i, 10.0) for i in (-1, 99, -1, 99, -1, 99, 50, 25, 75, 88, 94, 97)]
    assert posterior(100, flat, PRIOR).none > 0.9
    faster = [server(rnd, i, 10.0 if i < 40 else 7.0) for i in (-1, 99, -1, 99, 50, 25)]
    assert posterior(100, faster, PRIOR).step < 0.05       # ITL fell: not this symptom
    assert posterior(100, faster, Prior(direction=-1, min_step=math.log(1.05))).step > 0.99


def test_a_gradual_drift_is_not_named_a_step_but_drift_plus_step_is() -> None:
    rnd = random.Random(5)
    n = 200

    def level(i: int, step: bool) -> float:
        return 10.0 * (1 + 0.5 * (i + 1) / n) * (1.5 if step and i >= 120 else 1.0)

    idx = [-1, n - 1, 100, 50, 150, 25, 75, 125, 175, 12, 37, 62, 87, 112, 137, 162, 187]
    drift = posterior(n, [server(rnd, i, level(i, False), 0.01, 0.01) for i in idx], PRIOR)
    assert drift.drift > 0.5 and drift.top()[1] < 0.3
    both = posterior(n, [server(rnd, i, level(i, True), 0.01, 0.01)
                         for i in [*idx, 112, 118, 119, 120]], PRIOR)
    j, p = both.top()
    assert both.bounds[j + 1] == 120 and p > 0.95


def test_requests_per_server_follow_the_spreads() -> None:
    rnd = random.Random(6)
    # per-request noise 11%, server level 4%: about 10 requests a server at a start of 16
    servers = [server(rnd, i, 10.0 if i < 10 else 12.0, cv=0.11, server_cv=0.04, n=10)
               for i in (-1, 29, -1, 29, 15, 7, 11, 9, 3, 20)]
    post = posterior(30, servers, PRIOR)
    assert 5 <= requests_per_server(post, 16.0, 1, 40) < 40
    assert requests_per_server(post, 16.0, 1, 4) == 4


def test_a_clean_large_step_is_plain_bisection() -> None:
    """With a 2x step and 2% noise the chooser halves the likeliest interval each time,
    one server a commit: ceil(log2 n) servers past the two ends."""
    rnd = random.Random(7)
    n, k = 128, 77
    servers = [server(rnd, -1, 10.0, 0.02, 0.02), server(rnd, n - 1, 20.0, 0.02, 0.02)]
    picked = []
    for _ in range(40):
        post = posterior(n, servers, PRIOR)
        j, p = post.top()
        if p >= 0.99 and post.size(j) == 1:
            break
        nxt = choose(post, list(range(n)), 3, 0.99)
        assert nxt is not None
        picked.append(nxt.index)
        servers.append(server(rnd, nxt.index, 20.0 if nxt.index >= k else 10.0, 0.02, 0.02))
    assert post.bounds[j + 1] == k
    assert len(picked) == math.ceil(math.log2(n)), picked
    assert len(set(picked)) == len(picked)       # one server a commit


def test_the_ends_in_doubt_get_another_server_first() -> None:
    rnd = random.Random(8)
    # the new end barely above the old one: "no step" is credible, the ends are measured
    servers = [server(rnd, -1, 10.0), server(rnd, 99, 10.3)]
    post = posterior(100, servers, PRIOR)
    assert doubt(post, 99) == post.none > 0.2
    nxt = choose(post, list(range(100)), 3, 0.99)
    assert nxt is not None and nxt.index in (-1, 99) and not nxt.new


@pytest.mark.parametrize("seed", range(3))
def test_calibration_of_p_on_a_small_sample(seed: int) -> None:
    """Of culprits named at P >= 0.99 (1.3x step, 2-5% noise at both levels, n 32..300),
    at most the binomial allowance are wrong (the full check is benchmarks/bench_cost.py)."""
    rnd = random.Random(100 + seed)
    named = wrong = 0
    for _ in range(12):
        n, cv, scv = rnd.randint(32, 300), rnd.uniform(0.02, 0.05), rnd.uniform(0.02, 0.05)
        k = rnd.randrange(n)
        servers = [server(rnd, e, 13.0 if e >= k else 10.0, cv, scv) for e in (-1, n - 1)]
        for _ in range(60):
            post = posterior(n, servers, PRIOR)
            j, p = post.top()
            if p >= 0.99 and post.size(j) == 1:
                named += 1
                wrong += post.bounds[j + 1] != k
                break
            nxt = choose(post, list(range(n)), 2, 0.99)
            assert nxt is not None
            servers.append(server(rnd, nxt.index, 13.0 if nxt.index >= k else 10.0, cv, scv))
    assert named >= 10
    assert wrong <= 1     # P(>= 2 wrong of 12 | 1% each) < 0.01


def _exact_server(i: int, level: float, k: int = 10, sd: float = 0.05) -> Server:
    """A server whose requests have exactly ``level`` as their log mean and ``sd`` spread."""
    rnd = random.Random(i * 1000 + round(level * 1000))
    xs = [rnd.gauss(0, 1) for _ in range(k)]
    m = sum(xs) / k
    s = (sum((x - m) ** 2 for x in xs) / (k - 1)) ** 0.5
    out = summarise(i, [math.exp(level + sd * (x - m) / s) for x in xs])
    assert out is not None
    return out


def test_a_commit_in_doubt_with_more_servers_than_the_weaker_side_sends_it_there() -> None:
    # the old side well measured (4 servers), the new side one server at its end; commit 20
    # in between with two servers: its doubt is the new level's, so the new end is measured
    prior = Prior(direction=1, min_step=math.log(1.05))
    old = [_exact_server(-1, 0.0), _exact_server(-1, 0.02), _exact_server(5, 0.01),
           _exact_server(10, 0.0), _exact_server(29, 0.18)]
    post = posterior(30, [*old, _exact_server(20, 0.10), _exact_server(20, 0.09)], prior)
    assert post.none + post.drift <= NONE_DOUBT and 0.05 < post.p_bad(20) < 0.95
    assert anchor(post, 20, set(range(30))) == 29
    # with fewer servers of its own than the weaker side has, the commit itself
    post = posterior(30, [*old, _exact_server(29, 0.17), _exact_server(20, 0.10)], prior)
    assert 0.05 < post.p_bad(20) < 0.95
    assert anchor(post, 20, set(range(30))) == 20


def test_two_steps_put_the_plateau_on_the_bad_side_of_the_first() -> None:
    # levels 0 / log 1.3 / 2 log 1.3 with the steps at 10 and 20 (request spread only):
    # one step cannot fit three levels (its P spreads, a drift and a large server spread
    # take the rest); with two steps the first bad commit's interval holds it all
    servers = [_exact_server(i, (0.262 if i >= 10 else 0) + (0.262 if i >= 20 else 0), 5)
               for i in (-1, 31, 15, 7, 25, 12, 9, 18)]
    one = posterior(32, servers, Prior(direction=1, min_step=math.log(1.15)))
    two = posterior(32, servers, Prior(direction=1, min_step=math.log(1.15), step=0.43,
                                       two_step=0.05))
    j, p = two.top()
    assert (two.bounds[j], two.bounds[j + 1]) == (9, 12) and p > 0.99
    assert one.top()[1] < 0.9 and two.tau < one.tau
