"""The virtual download link (vllm_bisect.sim.link) and the virtual cluster prefetching
through it: the Driver's prefetch calls change the wall, never the verdicts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.sim.link import Link
from vllm_bisect.sim.virtual import Scenario, VirtualCluster, commit_range
from vllm_bisect.spec import parse_spec


def test_independent_link_runs_every_transfer_at_full_rate() -> None:
    link = Link(independent=True)
    link.prefetch({1: 5.0, 2: 5.0}, now=0.0)
    assert link.need(1, 5.0, now=3.0) == pytest.approx(2.0)
    assert link.need(2, 5.0, now=7.0) == 0.0          # done at 5
    assert link.need(3, 4.0, now=10.0) == pytest.approx(4.0)   # never prefetched


def test_shared_link_splits_the_rate_and_a_dropped_prefetch_frees_it() -> None:
    link = Link(independent=False)
    link.prefetch({1: 5.0, 2: 5.0}, now=0.0)
    link.keep_only({1}, now=4.0)                 # 2 min of each done; 2 is dropped
    assert link.need(1, 5.0, now=4.0) == pytest.approx(3.0)
    shared = Link(independent=False)
    shared.prefetch({1: 5.0, 2: 5.0}, now=0.0)
    assert shared.need(1, 5.0, now=4.0) == pytest.approx(6.0)   # 3 left at half rate
    assert 2 in shared.done


def test_a_foreground_fetch_shares_the_link_with_running_prefetches() -> None:
    link = Link(independent=False)
    link.prefetch({1: 5.0, 2: 5.0}, now=0.0)
    # three transfers at a third each: the needed one is done at 15
    assert link.need(3, 5.0, now=0.0) == pytest.approx(15.0)


def test_prefetches_wait_for_the_pool() -> None:
    link = Link(independent=True, pool=2)
    link.prefetch({1: 5.0, 2: 5.0, 3: 5.0}, now=0.0)
    assert link.need(3, 5.0, now=0.0) == pytest.approx(10.0)   # starts when 1 is done
    link.forget(3)
    assert link.need(3, 5.0, now=10.0) == pytest.approx(5.0)   # a failed one, again


def test_advance_until_something_not_on_the_way_is_an_error() -> None:
    with pytest.raises(ValueError, match="not being fetched"):
        Link(independent=True).advance(until=9)


def _bisect(tmp: Path, link: Link | None) -> tuple[str, int, int, float]:
    s = Scenario(n=300, culprit=123, unbuildable=frozenset({40, 200}), symptom="itl",
                 effect=1.3, cv=0.10, crash_rate=0.03)
    spec = parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                       "probe": {"max_tokens": 256},
                       "verdict": {"symptom": "itl", "itl_factor": 1.15, "verify_samples": 0,
                                   "strategy": "twolevel"}})
    rng = commit_range(s.n)
    cluster = VirtualCluster(s, rng, 1, random.Random(11), first_batch=spec.probe.requests,
                             link=link)
    journal = SessionJournal(tmp)
    try:
        result = Driver(spec, rng, cluster, journal, None,
                        prefetcher=cluster if link is not None else None).run()
    finally:
        journal.close()
    assert result.first_bad is not None
    return result.first_bad, cluster.starts, cluster.samples, cluster.clock


def test_prefetch_changes_the_wall_not_the_bisect(tmp_path: Path) -> None:
    plain = _bisect(tmp_path / "none", None)
    fast = _bisect(tmp_path / "independent", Link(independent=True))
    shared = _bisect(tmp_path / "shared", Link(independent=False))
    assert plain[0] == commit_range(300).sha(123)
    # the same answer, server starts and requests: the link draws from its own stream
    assert fast[:3] == plain[:3] == shared[:3]
    assert fast[3] < shared[3] < plain[3]
