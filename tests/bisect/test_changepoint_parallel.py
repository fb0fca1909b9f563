"""The model of the range on k workers through the real Driver, journal, measurer and
multi-symptom loop (its rest checks) on virtual time (vllm_bisect.sim.virtual): rounds of
servers at once, the same answers as one worker."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.bisect.test_changepoint_cli import run_cmd
from tests.bisect.test_changepoint_search import spec
from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.multi import MultiResult, run_symptoms
from vllm_bisect.bisect.policies import Plan
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Phase
from vllm_bisect.sim.virtual import More, VirtualCluster, commit_range
from vllm_bisect.sim.virtual_steps import StepsScenario, steps_scenario
from vllm_bisect.spec import BisectSpec


class Watched(VirtualCluster):
    """The virtual cluster, keeping what ran at once: each round's commits (the indices in
    flight together, as each submit found them) and the most in flight."""

    def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **kw)
        self.together: list[set[int]] = []
        self.most = 0

    def submit(self, commit: str, more: More = None) -> int:
        task = super().submit(commit, more)
        now = {self.index[c] for c, _ in self.pending.values()}
        self.most = max(self.most, len(now))
        self.together.append(now)
        return task


def run(sp: BisectSpec, s: StepsScenario, workers: int, tmp: Path,
        seed: int = 1) -> tuple[MultiResult, CommitRange, Watched]:
    rng = commit_range(s.n)
    cluster = Watched(s, rng, workers, random.Random(seed), first_batch=sp.probe.requests)
    journal = SessionJournal(tmp)
    try:
        def driver(spec_: BisectSpec, r: CommitRange, plan: Plan) -> Driver:
            return Driver(spec_, r, cluster, journal, None, plan=plan,
                          executor=cluster if workers > 1 else None)
        return run_symptoms(sp, rng, driver, NullEvents()), rng, cluster
    finally:
        journal.close()


def named(multi: MultiResult) -> set[str]:
    return {c.commit for c in multi.culprits if c.commit is not None and c.confirmed}


@pytest.mark.parametrize(("workers", "seed"), [(2, 1), (2, 2), (4, 1), (4, 3)])
def test_k_workers_name_the_culprit_in_fewer_rounds_than_one(tmp_path: Path, workers: int,
                                                             seed: int) -> None:
    n, at = 300, 37 + 71 * seed
    # unbuildable commits where the first splits land: skipped, not measured again
    s = dataclasses.replace(steps_scenario(n, ((at, 1.4),), cv=0.03, server_cv=0.03),
                            unbuildable=frozenset({59, 99, 119, 149, 199}))
    one, rng, _ = run(spec(), s, 1, tmp_path / "one", seed)
    multi, _, cluster = run(spec(), s, workers, tmp_path / "k", seed)
    assert named(one) == named(multi) == {rng.commits[at].sha}
    r, r1 = multi.result, one.result
    assert r.workers == workers and r.strategy_chosen == "changepoint"
    assert r.model is not None and r.model.p >= 0.99
    # servers ran at once: fewer rounds than servers, and than one worker's rounds
    assert r.rounds < r1.rounds and r.rounds < r.server_starts
    assert cluster.most == workers
    assert cluster.together[1] == {-1, n - 1}      # the ends: the first round, together
    if workers > 2:   # beside them, the range split evenly (no model yet)
        assert cluster.together[workers - 1] == {-1, n - 1, *(
            round(j * n / (workers - 1)) - 1 for j in range(1, workers - 1))}
    assert set(r.starts_by_phase) <= {Phase.ENDPOINTS.value, Phase.SEARCH.value,
                                      Phase.REST.value}
    assert r.server_starts == cluster.starts == sum(r.starts_by_phase.values())
    tried = [i for i in cluster.tried if i in s.unbuildable]
    assert tried and len(cluster.together) - cluster.starts == len(tried)   # tried once each


def test_two_steps_are_both_named_on_two_workers(tmp_path: Path) -> None:
    # the rest check after the first culprit finds the second step and bisects it (the same
    # search, k servers a round)
    multi, rng, cluster = run(spec(itl_factor=1.15), steppy(120), 2, tmp_path, 4)
    assert named(multi) == {rng.commits[30].sha, rng.commits[90].sha}
    assert cluster.most == 2


def steppy(n: int) -> StepsScenario:
    return steps_scenario(n, ((30, 1.3), (90, 1.3)), cv=0.03, server_cv=0.03)


@pytest.mark.parametrize("workers", [2, 4])
def test_a_range_without_the_step_is_refused_on_k_workers(tmp_path: Path, workers: int) -> None:
    with pytest.raises(NotReproduced, match="did not reproduce: P\\(no itl step"):
        run(spec(), steps_scenario(60, (), cv=0.03, server_cv=0.03), workers, tmp_path, 5)


def test_vllm_bisect_run_on_two_workers_runs_servers_at_once_and_names_the_culprit(
        tmp_path: Path) -> None:
    """`vllm-bisect run` (the real CLI, source builds, simulator servers) with
    parallel.workers = 2 on a generated history with a 2x ITL step."""
    h = history(tmp_path, n_commits=24, slow_at=13, slow_factor=2.0, noise_cv=0.02,
                server_cv=0.02, step_ms=5.0)
    sp = write_spec(tmp_path / "s.toml", make_spec(
        h, verdict={"symptom": "itl", "strategy": "changepoint"}, probe={"requests": 2},
        parallel={"workers": 2}, ops={"serialize_startup": False, "startup_timeout_s": 60}))
    session = tmp_path / "sess"
    r = subprocess.run(run_cmd(sp, session, tmp_path / "cache"), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((session / "result.json").read_text())
    assert doc["first_bad"] == h.planted["itl"]
    assert doc["strategy_chosen"] == "changepoint" and doc["workers"] == 2
    assert doc["model"]["p"] >= 0.99
    starts = sum(doc["starts_by_phase"].values())
    assert starts == r.stderr.count("starting server")
    assert 0 < doc["rounds"] < starts          # rounds of two servers at once
    # two servers of the search alive at the same time (the journal's server rows)
    con = sqlite3.connect(session / "journal.sqlite")
    rows = sorted(con.execute("SELECT started, stopped FROM servers").fetchall())
    con.close()
    assert all(stopped is not None for _, stopped in rows)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(rows)), rows
