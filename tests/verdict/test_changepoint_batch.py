"""The model of the range on k workers, pure (vllm_bisect.verdict.changepoint_batch): a round
of measurements from one posterior."""

from __future__ import annotations

import math
import random

import pytest

from tests.verdict.test_changepoint import PRIOR, server
from vllm_bisect.verdict.changepoint import Server, posterior
from vllm_bisect.verdict.changepoint_batch import choose_batch, quantile_splits
from vllm_bisect.verdict.changepoint_next import choose


def rounds_to_find(n: int, culprit: int, workers: int, seed: int) -> tuple[int, list[list[int]]]:
    """Rounds of ``choose_batch`` on a clean 2x step (2% noise) until one commit holds 0.99;
    each round's commits."""
    rnd = random.Random(seed)

    def at(i: int) -> Server:
        return server(rnd, i, 20.0 if i >= culprit else 10.0, 0.02, 0.02)
    servers = [at(-1), at(n - 1)]
    rounds: list[list[int]] = []
    for _ in range(40):
        post = posterior(n, servers, PRIOR)
        j, p = post.top()
        if p >= 0.99 and post.size(j) == 1:
            assert post.bounds[j + 1] == culprit
            return len(rounds), rounds
        picks = choose_batch(post, list(range(n)), 3, 0.99, workers)
        assert 1 <= len(picks) <= workers
        rounds.append([c.index for c in picks])
        servers += [at(c.index) for c in picks]
    raise AssertionError(f"not found in 40 rounds: {rounds}")


def test_one_worker_is_the_one_worker_rule() -> None:
    rnd = random.Random(5)
    n = 60
    servers = [server(rnd, -1, 10.0), server(rnd, n - 1, 13.0)]
    for i in (30, 15, 22, 26):   # a search under way, and its posteriors on the way
        post = posterior(n, servers, PRIOR)
        assert choose_batch(post, list(range(n)), 4, 0.99, 1) == [
            choose(post, list(range(n)), 4, 0.99)]
        servers.append(server(rnd, i, 13.0 if i >= 24 else 10.0))


def test_a_flat_posterior_is_split_into_equal_parts() -> None:
    """The ends alone (a clear step, culprit anywhere): k workers get the plain
    (k + 1)-section, new commits, each once."""
    rnd = random.Random(2)
    n = 100
    post = posterior(n, [server(rnd, -1, 10.0, 0.02, 0.02),
                         server(rnd, n - 1, 20.0, 0.02, 0.02)], PRIOR)
    picks = choose_batch(post, list(range(n)), 3, 0.99, 3)
    assert [c.new for c in picks] == [True] * 3
    # P(first bad <= c) = (c + 1) / n at 1/4, 2/4, 3/4
    assert [c.index for c in picks] == [24, 49, 74]
    assert quantile_splits(post, list(range(n)), {49}, 1) in ([48], [50])   # (49 taken)


@pytest.mark.parametrize(("workers", "seed"), [(2, 1), (2, 2), (4, 1), (4, 2)])
def test_k_workers_find_a_clean_step_in_about_log_k_plus_1_rounds(workers: int,
                                                                  seed: int) -> None:
    n, culprit = 250, 1 + (97 * seed) % 248
    one, _ = rounds_to_find(n, culprit, 1, seed)
    k, rounds = rounds_to_find(n, culprit, workers, seed)
    assert all(len(set(r)) == len(r) for r in rounds)       # distinct commits a round
    assert k <= math.ceil(math.log(n, workers + 1)) + 2, rounds
    assert k < one                   # (one worker: about ceil(log2 n) = 8)


def test_the_final_pair_in_doubt_measures_its_doubtful_commits_again_and_splits_nothing(
        ) -> None:
    """Commits 19 and 20 measured once each on either side of a small step (1.08x under 3%
    noise): the pair is the likeliest interval but unsure; the round measures again the
    commits in doubt (the pair's, the ends while "no step" is credible), each once, the
    most doubtful first (one worker's choice), and no new commit."""
    rnd = random.Random(4)
    n, k = 40, 20
    servers = [server(rnd, i, 10.8 if i >= k else 10.0)
               for i in (-1, n - 1, 10, 30, 15, 25, 17, 22, 19, 20)]
    post = posterior(n, servers, PRIOR)
    j, p = post.top()
    assert (post.bounds[j], post.bounds[j + 1]) == (19, 20) and p < 0.99
    picks = choose_batch(post, list(range(n)), 3, 0.99, 4)
    assert picks[0] == choose(post, list(range(n)), 3, 0.99)
    assert {19, 20} <= {c.index for c in picks} <= {-1, 17, 19, 20, n - 1}
    assert not any(c.new for c in picks) and len({c.index for c in picks}) == len(picks) == 4
    assert choose_batch(post, list(range(n)), 3, 0.99, 2) == picks[:2]
