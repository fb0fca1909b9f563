"""The Bayesian strategy: pure posterior/information tests, and a flaky cap bisected over a
real generated history (the cap hits only some requests)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.bisect.test_driver import run_driver
from tests.helpers import history, make_spec
from vllm_bisect.bisect.search.bayes import (
    FlakeModel,
    credible_set,
    decided,
    info_gain,
    marginal,
    next_commit,
    posterior,
)
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Verdict


def test_posterior_is_uniform_without_runs_and_moves_with_them() -> None:
    m = FlakeModel(q=0.5, eps=0.01)
    assert posterior(4, {}, m) == pytest.approx([0.25] * 4)
    # a run of commit 1 that showed the symptom: the culprit is at or below 1, almost surely
    post = posterior(4, {1: [True]}, m)
    assert post[0] + post[1] > 0.97
    # a clean run of commit 2 makes "2 is good" (culprit 3) likelier, but does not rule out
    # culprits at or below 2: the symptom is flaky
    post = posterior(4, {2: [False]}, m)
    assert post[3] > post[0] > 0.1


def brute_gain(post: list[float], i: int, m: FlakeModel) -> float:
    def h(p: list[float]) -> float:
        return -sum(x * math.log(x) for x in p if x > 0)

    total = 0.0
    for seen in (True, False):
        like = [(m.q if seen else 1 - m.q) if c <= i else (m.eps if seen else 1 - m.eps)
                for c in range(len(post))]
        z = sum(p * lk for p, lk in zip(post, like, strict=True))
        total += z * h([p * lk / z for p, lk in zip(post, like, strict=True)])
    return h(post) - total


def test_information_gain_matches_the_definition() -> None:
    rnd = random.Random(1)
    m = FlakeModel(q=0.6, eps=0.03)
    post = [rnd.random() for _ in range(30)]
    z = sum(post)
    post = [p / z for p in post]
    fast = info_gain(post, m)
    assert fast == pytest.approx([brute_gain(post, i, m) for i in range(30)], abs=1e-9)


def test_deterministic_symptom_is_bisection() -> None:
    m = FlakeModel(q=0.995, eps=0.005)
    assert next_commit(posterior(100, {}, m), m, set()) in (49, 50)


def simulate(n: int, q: float, seed: int, confidence: float = 0.99) -> tuple[bool, int]:
    rnd = random.Random(seed)
    culprit = rnd.randrange(n)
    bad_runs = [rnd.random() < q for _ in range(6)]
    model = FlakeModel.estimate(sum(bad_runs) or 1, 6, 0, 6)
    return search(culprit, q, rnd, {}, lambda runs: (posterior(n, runs, model), model), 300,
                  confidence)


Belief = Callable[[dict[int, list[bool]]], tuple[list[float], FlakeModel]]


def search(culprit: int, q: float, rnd: random.Random, runs: dict[int, list[bool]],
           belief: Belief, limit: int, confidence: float = 0.99) -> tuple[bool, int]:
    """Run the commit the belief picks (a bad one shows the symptom with probability q) until
    one commit holds ``confidence``: (that commit is the culprit, runs taken)."""
    for t in range(limit):
        post, model = belief(runs)
        top = decided(post, confidence)
        if top is not None:
            return top == culprit, t
        i = next_commit(post, model, set())
        assert i is not None
        runs.setdefault(i, []).append(i >= culprit and rnd.random() < q)
    return False, limit


def test_flaky_symptom_found_at_the_target_confidence() -> None:
    # a symptom that shows in 60% of runs of a bad commit: plain bisect is usually wrong
    results = [simulate(200, 0.6, seed) for seed in range(60)]
    accuracy = sum(ok for ok, _ in results) / len(results)
    assert accuracy >= 0.95
    assert sum(t for _, t in results) / len(results) < 40


def simulate_marginal(n: int, q: float, seed: int) -> tuple[bool, int]:
    """As the search runs it: the flake rates integrated out, from the endpoints' runs on."""
    rnd = random.Random(seed)
    culprit = rnd.randrange(n)
    runs: dict[int, list[bool]] = {-1: [False] * 4, n - 1: [rnd.random() < q for _ in range(4)]}
    return search(culprit, q, rnd, runs, lambda r: marginal(n, r), 400)


def test_the_flake_rate_integrated_out_is_not_misled_by_lucky_endpoint_runs() -> None:
    # four runs of the bad endpoint that all showed a q = 0.5 symptom: the point estimate
    # (q = 0.83) takes five misses at a commit for proof it is good (P(culprit) 0.0001);
    # integrated out, q may well be lower: 17x the doubt
    n = 16
    runs = {-1: [False] * 4, n - 1: [True] * 4, 7: [True], 6: [False] * 5}
    point = posterior(n, runs, FlakeModel.estimate(4, 4, 0, 4))
    post, model = marginal(n, runs)
    assert post[6] > 10 * point[6]
    assert 0.5 < model.q < 0.9 and model.eps < 0.05
    results = [simulate_marginal(300, 0.5, seed) for seed in range(30)]
    assert sum(ok for ok, _ in results) >= 29  # at 0.99 confidence


def test_credible_set() -> None:
    assert credible_set([0.05, 0.9, 0.05], 0.9) == [1]
    assert credible_set([0.05, 0.5, 0.45], 0.9) == [1, 2]


def test_flaky_cap_bisected_through_the_driver(tmp_path: Path) -> None:
    # the cap hits 60% of requests from commit 9 on; one request per run
    from tests.bisect.test_auto_driver import seeded_serve

    # seeded servers: the random caps repeat run to run, so the test cannot flake at the
    # 1 - confidence rate the method allows by design
    h = history(tmp_path, n_commits=16, cap_at=9, cap_probability=0.6)
    spec = make_spec(h, build={"kind": "command", "serve": seeded_serve(tmp_path)},
                     verdict={"symptom": "length", "strategy": "bayes",
                                 "calibration_runs": 5, "confidence": 0.95,
                                 "verify_samples": 0})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["length"], r.candidates
    assert r.confidence is not None and r.confidence >= 0.95
    assert r.rounds <= 60
    # resumed: the journal holds every run, the posterior is rebuilt, nothing runs again
    again = run_driver(spec, tmp_path)
    assert again.first_bad == r.first_bad and again.server_starts == 0


def test_bayes_refuses_a_symptom_the_bad_endpoint_never_shows(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6)
    spec = make_spec(h, verdict={"symptom": "length", "strategy": "bayes",
                                 "calibration_runs": 2, "verify_samples": 0})
    with pytest.raises(NotReproduced, match="0 of 8 runs"):
        run_driver(spec, tmp_path)


def test_bayes_runs_again_a_commit_whose_first_server_died(tmp_path: Path) -> None:
    from tests.bisect.test_driver import flaky_serve

    # every commit's first server dies and is not retried: the search must run it again
    # (fresh), not look the cached failure up again and again
    h = history(tmp_path, n_commits=6, cap_at=3)
    spec = make_spec(h, build={"kind": "command", "serve": flaky_serve(tmp_path)},
                     ops={"retries": 0},
                     verdict={"symptom": "length", "strategy": "bayes", "calibration_runs": 2,
                              "confidence": 0.95, "verify_samples": 0, "max_runs": 30})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["length"], r.candidates
    skips = [o for o in r.probed if o.verdict is Verdict.SKIP]
    assert skips and all("exited" in o.reason for o in skips)
