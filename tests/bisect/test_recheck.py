"""auto on a cap: deterministic at plain cost (one run per commit, the culprit's parent
re-checked), bayes the moment a commit shows the symptom in some runs only, and every
repeated run journaled: a resumed session does not start those servers again (counted in
the journal's servers table, one row per real server start, through the real CLI)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.driver import NullEvents
from vllm_bisect.bisect.measurement.evaluate import Evaluator
from vllm_bisect.bisect.measurement.executor import InlineExecutor
from vllm_bisect.bisect.measurement.measurer import Measurer
from vllm_bisect.bisect.policies import make_policy, resolve_strategy
from vllm_bisect.bisect.range import CommitInfo, commit_range, open_repo
from vllm_bisect.bisect.recheck import FLAKY_META, applies
from vllm_bisect.bisect.search.endpoints import intermittence
from vllm_bisect.bisect.search.steps import next_step
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.bisect.state.store import MeasurementStore
from vllm_bisect.bisect.tester import Tester as CommitTester
from vllm_bisect.builders import make_builder
from vllm_bisect.models import Outcome, Verdict
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.sim.history import sim_path
from vllm_bisect.spec import BisectSpec


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=600)


def run_json(spec: BisectSpec, tmp: Path) -> tuple[dict[str, Any], Path]:
    """``vllm-bisect run --json`` of ``spec`` in a new session under ``tmp``: the result
    document and the session."""
    session = tmp / "sess"
    r = cli("run", "--spec", str(write_spec(tmp / "s.toml", spec)), "--session", str(session),
            "--cache-dir", str(tmp / "cache"), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), session


def starts(session: Path) -> int:
    with sqlite3.connect(session / "journal.sqlite") as con:
        return int(con.execute("SELECT COUNT(*) FROM servers").fetchone()[0])


class StopAfter(NullEvents):
    """Interrupts a bisect (as Ctrl-C does) after its n-th judged commit."""

    def __init__(self, n: int) -> None:
        self.n, self.seen = n, 0

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise KeyboardInterrupt


def plain_starts(n: int, culprit: int) -> int:
    """What `git bisect run` starts: one server per binary-search step, no endpoints."""
    verdicts: dict[int, Verdict] = {n - 1: Verdict.BAD}
    count = 0
    while (step := next_step(n, verdicts)).test is not None:
        count += 1
        verdicts[step.test] = Verdict.BAD if step.test >= culprit else Verdict.GOOD
    return count


def test_a_deterministic_cap_costs_at_most_plain_plus_three_through_the_cli(
        tmp_path: Path) -> None:
    # the demo's shape: 64 commits, the cap planted at 41; the spec a user writes (the
    # symptom only: auto, intermittent_runs and recheck_runs at their defaults)
    h = history(tmp_path, n_commits=64, cap_at=41)
    spec = make_spec(h, verdict={"symptom": "length", "intermittent_runs": 8,
                                 "verify_samples": 0})
    assert spec.verdict.recheck_runs == 2 and spec.verdict.strategy == "auto"
    doc, session = run_json(spec, tmp_path)
    assert doc["first_bad"] == h.planted["length"]
    assert doc["strategy_chosen"] == "threshold" and "deterministic" in doc["strategy_reason"]
    plain = plain_starts(64, 40)  # the range's commits are 1..64: index 40 is commit 41
    # the bad endpoint + the search + the parent's two re-checks (the good endpoint is lazy:
    # the search judged commits good): plain + 3 (a count, not a time)
    assert starts(session) == doc["server_starts"] <= plain + 3
    indices = [p["index"] for p in doc["probed"]]
    assert 0 not in indices and indices.count(64) == 1


def test_the_default_verification_of_a_deterministic_cap_starts_no_server(
        tmp_path: Path) -> None:
    # issue 40: "a deterministic cap stays at <= plain + 3 starts by default", every phase
    # counted. The spec a user writes (verification on): the parent's re-checks and the
    # culprit's run are the verification; before, two fresh servers re-measured the pair
    h = history(tmp_path, n_commits=16, cap_at=9)
    # (the spec's default intermittent_runs; tests/helpers.py writes 1 for speed)
    spec = make_spec(h, verdict={"symptom": "length", "intermittent_runs": 8})
    assert spec.verdict.verify_samples > 0 and spec.verdict.recheck_runs == 2
    doc, session = run_json(spec, tmp_path)
    assert doc["first_bad"] == h.planted["length"]
    v = doc["verification"]
    assert v["source"] == "rechecks" and v["confirmed"] and v["parent_servers"] == 3
    assert "verify" not in doc["starts_by_phase"]
    assert sum(doc["starts_by_phase"].values()) == starts(session) <= plain_starts(16, 8) + 3
    md = " ".join((session / "report.md").read_text().split())
    assert "Verified by the search's own runs, with no fresh server" in md
    assert "missed it in all 3 runs" in md


def test_a_run_cut_during_the_rechecks_resumes_without_running_them_again(
        tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=16, cap_at=9)
    spec = make_spec(h, verdict={"symptom": "length", "intermittent_runs": 8,
                                 "verify_samples": 0, "recheck_runs": 3},
                     ops={"retries": 1, "cache_max_size": "1G"})
    session, cache = tmp_path / "sess", tmp_path / "cache"
    whole = run_bisect(spec, tmp_path / "whole", tmp_path / "cache-whole", NullEvents())
    judged = 1 + 4  # the bad endpoint (the good one is lazy) and four search steps
    # outcomes: the bad endpoint, the steps, then the parent's first re-check: cut there
    with pytest.raises(KeyboardInterrupt):
        run_bisect(spec, session, cache, StopAfter(judged + 1))
    before = starts(session)
    assert before == judged + 1
    r = cli("run", "--session", str(session), "--cache-dir", str(cache), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["first_bad"] == h.planted["length"] == whole.first_bad
    # only the two re-checks left were started again, nothing before the cut
    assert starts(session) - before == spec.verdict.recheck_runs - 1
    assert starts(session) == whole.server_starts
    # result.json counts the whole session, both calls (issue 40: before, the resumed call's)
    assert doc["server_starts"] == starts(session) and doc["calls"] == 2


FLAKY_SERVE = ("n=$(cat {marks} 2>/dev/null || echo 0); echo $((n + 1)) > {marks}; "
               "set -- {seeds}; shift $((n % {count})); "
               "PYTHONPATH=. VLLM_BISECT_SIM_PATH={sim} exec {py} "
               "-m vllm.entrypoints.cli.main serve {{model}} --port {{port}} --seed $1 "
               """--speculative-config '{{{{"method": "mtp", "num_speculative_tokens": 3}}}}'""")


def flaky_serve(tmp: Path, seeds: str) -> str:
    """A server per start, seeded by a global start counter: with cap_probability 0.5 seeds
    1, 3, 4, 7, 8 cap a bad commit's server, 2, 5, 6, 10, 15 do not."""
    return FLAKY_SERVE.format(marks=tmp / "starts.txt", seeds=seeds,
                              count=len(seeds.split()), sim=sim_path(), py=sys.executable)


def test_a_culprits_parent_that_shows_the_cap_on_a_recheck_switches_to_bayes_and_resumes(
        tmp_path: Path) -> None:
    # 4 commits, cap from commit 3 on (index 2). Starts: the bad endpoint (seed 1: shown; the
    # good endpoint is lazy), the search: index 1 (good), index 2 (seed 5: the cap missed,
    # judged good), so the threshold search ends at the bad endpoint with index 2 as the
    # parent; its re-check (seed 1) shows the cap: bayes from every run so far
    h = history(tmp_path, n_commits=4, cap_at=3, cap_probability=0.5)
    seeds = "1 2 5 1 3 5 4 6 7 10 8 15 1 2 3 4 5 6 7 8 10 15"
    spec = make_spec(h, build={"kind": "command", "serve": flaky_serve(tmp_path, seeds)},
                     verdict={"symptom": "length", "verify_samples": 0, "confidence": 0.9,
                              "intermittent_runs": 4})
    session, cache = tmp_path / "sess", tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):  # cut in bayes's calibration, after the switch
        run_bisect(spec, session, cache, StopAfter(6))
    journal = SessionJournal(session)
    reason = journal.get_meta(FLAKY_META)
    journal.close()
    assert reason is not None and "re-check 1" in reason and "some runs only" in reason
    before = starts(session)
    r = cli("run", "--session", str(session), "--cache-dir", str(cache), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["strategy_chosen"] == "bayes" and doc["strategy_reason"] == reason
    assert doc["first_bad"] == h.planted["length"]
    # nothing before the cut again; result.json counts both calls (issue 40)
    started_now = starts(session) - before
    assert doc["server_starts"] == starts(session) and doc["calls"] == 2
    assert started_now == sum(doc["starts_by_phase"].values()) - before


@contextmanager
def commit_tester(spec: BisectSpec, session_dir: Path, cache_dir: Path,
               stop_after: int = 0) -> Iterator[CommitTester]:
    """The hook's Tester (one worker, the spec's policy) over a real session and cache."""
    repo = open_repo(spec.range.repo)
    rng = commit_range(repo, spec.range.good, spec.range.bad)
    cache = ResultCache(cache_dir / "results.sqlite")
    with Session(session_dir) as s:
        assert s.journal is not None
        ev = Evaluator(spec, make_builder(spec, repo, cache_dir, s.logs), s.logs, s.journal, s.id)
        store = MeasurementStore(spec, s.journal, cache)
        measurer = Measurer(InlineExecutor(ev.evaluate), store)
        policy = make_policy(spec, resolve_strategy(spec).strategy)
        yield CommitTester(rng, store, measurer, policy, StopAfter(stop_after))
    cache.close()


def test_the_hooks_intermittence_check_replays_its_journaled_runs(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=3)
    spec = make_spec(h, verdict={"symptom": "length", "intermittent_runs": 4})
    choice = resolve_strategy(spec)
    assert applies(spec, choice)
    with pytest.raises(KeyboardInterrupt), \
            commit_tester(spec, tmp_path / "s", tmp_path / "c", stop_after=3) as t:
        intermittence(t, spec, choice)
    assert starts(tmp_path / "s") == 3  # the good endpoint and two bad-endpoint runs
    with commit_tester(spec, tmp_path / "s", tmp_path / "c") as t:
        new = intermittence(t, spec, choice)
    assert new is not None and "in all 4 runs: deterministic" in new.reason
    assert starts(tmp_path / "s") == 5  # two more (4 bad-endpoint runs in all), not 3 + 5
