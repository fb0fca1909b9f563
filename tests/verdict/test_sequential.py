"""Calibration and the sequential test on synthetic noisy series."""

from __future__ import annotations

import math
import random

import pytest

from vllm_bisect.verdict.sequential import SequentialJudge, SequentialTest, SeqVerdict, calibrate


def draw(rnd: random.Random, mean: float, cv: float, n: int) -> list[float]:
    return [mean * max(0.05, rnd.gauss(1.0, cv)) for _ in range(n)]


def run(test: SequentialTest, rnd: random.Random, mean: float, cv: float) -> tuple[SeqVerdict, int]:
    samples: list[float] = []
    while True:
        samples += draw(rnd, mean, cv, test.next_batch(len(samples)))
        v = test.decide(samples)
        if v is not SeqVerdict.MORE:
            return v, len(samples)


def test_calibration_refuses_same_or_tiny_differences() -> None:
    rnd = random.Random(0)
    same = calibrate(draw(rnd, 10, 0.1, 8), draw(rnd, 10, 0.1, 8))
    assert not same.ok and "do not differ" in same.reason
    tiny = calibrate(draw(rnd, 10, 0.001, 8), draw(rnd, 10.2, 0.001, 8), min_effect=0.05)
    assert not tiny.ok and "below the minimum effect" in tiny.reason
    ok = calibrate(draw(rnd, 10, 0.1, 8), draw(rnd, 13, 0.1, 8))
    assert ok.ok and 0.15 < ok.effect < 0.45


@pytest.mark.parametrize("effect,cv,max_mean_samples", [(7.0, 0.02, 3.5), (1.3, 0.10, 12.0)])
def test_sprt_error_rate_and_cost(effect: float, cv: float, max_mean_samples: float) -> None:
    rnd = random.Random(42)
    cal = calibrate(draw(rnd, 10, cv, 10), draw(rnd, 10 * effect, cv, 10))
    assert cal.ok
    test = SequentialTest(cal, alpha_total=0.01, expected_steps=10)
    wrong = unknown = 0
    used = []
    trials = 400
    for i in range(trials):
        truth_bad = i % 2 == 0
        v, n = run(test, rnd, 10 * effect if truth_bad else 10, cv)
        used.append(n)
        if v is SeqVerdict.UNKNOWN:
            unknown += 1
        elif (v is SeqVerdict.BAD) != truth_bad:
            wrong += 1
    assert wrong / trials <= 0.005  # the per-step budget is 0.001
    assert unknown / trials <= 0.01
    assert sum(used) / trials <= max_mean_samples


def test_cap_gives_unknown_for_a_commit_between_the_endpoints() -> None:
    rnd = random.Random(3)
    cal = calibrate(draw(rnd, 10, 0.05, 10), draw(rnd, 20, 0.05, 10))
    test = SequentialTest(cal, max_samples=12)
    assert test.decide([14.1] * 12) is SeqVerdict.UNKNOWN  # exactly between on the log scale
    assert test.decide([14.1] * 3) is SeqVerdict.MORE


def test_evidence_is_tempered_by_an_imprecise_reference() -> None:
    rnd = random.Random(5)
    few = calibrate(draw(rnd, 10, 0.1, 5), draw(rnd, 13, 0.1, 5))
    many = calibrate(draw(rnd, 10, 0.1, 40), draw(rnd, 13, 0.1, 40))
    commit = [10.0 * math.exp(0.1 * z) for z in (-1, 1) * 100]  # at the good mean, CV 10%
    # the evidence cannot exceed what the endpoints' own precision allows
    assert -few.log_bf(commit) <= 1.1 * few.ceiling()
    assert -many.log_bf(commit) > -few.log_bf(commit)
    assert many.ceiling() > 6 * few.ceiling()


def test_a_commit_noisier_than_the_endpoints_gives_less_evidence() -> None:
    rnd = random.Random(6)
    cal = calibrate(draw(rnd, 10, 0.05, 20), draw(rnd, 13, 0.05, 20))
    quiet = [10.0 * (1 + 0.05 * z) for z in (-1, 1, -1, 1)]
    noisy = [10.0 * (1 + 0.30 * z) for z in (-1, 1, -1, 1)]  # same mean, 6x the spread
    assert cal.log_bf(quiet) < cal.log_bf(noisy) < 0


def test_learning_moves_the_reference_and_adds_samples() -> None:
    def series(mean: float, n: int) -> list[float]:  # log spread exactly 0.1
        return [mean * math.exp(0.1 * z) for z in (-1, 1) * (n // 2)] + [mean] * (n % 2)

    cal = calibrate(series(10, 5), series(13, 5))
    more = cal.learn(series(10.5, 6), bad=False).learn(series(13, 6), bad=True)
    assert (more.n_good, more.n_bad) == (11, 11)
    # the worst case (a good commit is told apart by the bad reference's precision) improves
    assert more.ceiling() > 1.5 * cal.ceiling()
    assert cal.mu_good < more.mu_good < math.log(10.5)
    judge = SequentialJudge(SequentialTest(cal))
    assert judge.learn([], SeqVerdict.UNKNOWN) is judge  # undecided commits teach nothing


def test_precision_rule_and_one_at_a_time_growth() -> None:
    rnd = random.Random(8)
    rough = SequentialTest(calibrate(draw(rnd, 10, 0.15, 5), draw(rnd, 13, 0.15, 5)))
    sharp = SequentialTest(calibrate(draw(rnd, 10, 0.02, 5), draw(rnd, 70, 0.02, 5)))
    assert not rough.precise() and sharp.precise()
    assert [sharp.next_batch(h) for h in (0, 3, 4, 39, 40)] == [3, 1, 1, 1, 0]
