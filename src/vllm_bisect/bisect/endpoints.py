"""The endpoints: verified (threshold policies) or calibrated on (learning policies) before
the search; the bisect is refused (``NotReproduced``) unless good judges good and bad bad."""

from __future__ import annotations

import math

from vllm_bisect.bisect.multisection import ideal_rounds
from vllm_bisect.bisect.policy import MoreSamples, Role
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.strategy import next_step
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Evaluation, Outcome, Verdict


def steps(n: int) -> int:
    """Binary-search steps over n commits."""
    return math.ceil(math.log2(max(2, n)))


def prefetch_first(t: Tester) -> None:
    """While the good endpoint is measured: the bad one and the first commit to test."""
    rng, n = t.rng, len(t.rng.commits)
    first = next_step(n, {n - 1: Verdict.BAD}).test
    t.measurer.prefetch([rng.bad.sha] + ([rng.commits[first].sha] if first is not None else []))


def verify_endpoints(t: Tester) -> None:
    """One at a time: the good endpoint first (no need to build bad if good fails)."""
    rng, k = t.rng, steps(len(t.rng.commits))
    prefetch_first(t)
    good = t.test(rng.good, Role.GOOD_ENDPOINT, k + 1)
    if good.verdict is Verdict.SKIP:
        check_endpoints(rng, good, None)
    check_endpoints(rng, good, t.test(rng.bad, Role.BAD_ENDPOINT, k))


def check_endpoints(rng: CommitRange, good: Outcome, bad: Outcome | None) -> None:
    """Raise NotReproduced unless good judged good and bad judged bad."""
    if good.verdict is Verdict.SKIP:
        raise NotReproduced(f"the good endpoint {rng.good.sha[:12]} could not be tested: "
                            f"{good.reason}", hint="pick a good commit that builds and serves")
    problems = []
    if good.verdict is not Verdict.GOOD:
        problems.append(f"good endpoint {rng.good.sha[:12]} judged {good.verdict}: {good.reason}")
    if bad is not None and bad.verdict is not Verdict.BAD:
        problems.append(f"bad endpoint {rng.bad.sha[:12]} judged {bad.verdict}: {bad.reason}")
    if problems:
        raise NotReproduced("did not reproduce: " + "; ".join(problems),
                            hint="check the verdict thresholds against both measurements "
                                 "(shown above), or the range")


def search_tests(n: int, workers: int) -> int:
    """How many commits the search may judge (a learning policy splits its error budget
    over them): k per round of a k-worker multisection."""
    return max(steps(n), workers * ideal_rounds(n, workers))


def calibrate_endpoints(t: Tester) -> None:
    """Let the policy calibrate on both endpoints (measured at once when there are workers,
    again with more samples when it asks)."""
    rng, n = t.rng, len(t.rng.commits)
    prefetch_first(t)
    k = steps(n)

    def endpoints(more: MoreSamples | None) -> tuple[Evaluation, Evaluation]:
        t.test_batch([(rng.good, Role.GOOD_ENDPOINT, k + 1), (rng.bad, Role.BAD_ENDPOINT, k)],
                     more)
        return t.evaluations[rng.good.sha], t.evaluations[rng.bad.sha]

    t.policy.calibrate(endpoints, search_tests(n, t.measurer.workers))
