"""The driver over real generated histories, real venv builds, real servers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.driver import BisectResult, Driver
from vllm_bisect.bisect.measurement.evaluate import Evaluator
from vllm_bisect.bisect.range import commit_range, open_repo
from vllm_bisect.bisect.state.journal import ResultCache
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.builders import make_builder
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Verdict
from vllm_bisect.sim.history import sim_path
from vllm_bisect.spec import BisectSpec


def run_driver(spec: BisectSpec, tmp: Path, session: str = "session") -> BisectResult:
    repo = open_repo(spec.range.repo)
    rng = commit_range(repo, spec.range.good, spec.range.bad)
    cache_dir = tmp / "cache"
    with Session(tmp / session) as s:
        assert s.journal is not None
        ev = Evaluator(spec, make_builder(spec, repo, cache_dir, s.logs), s.logs, s.journal, s.id)
        cache = ResultCache(cache_dir / "results.sqlite")
        return Driver(spec, rng, ev, s.journal, cache).run()


def test_finds_cap_with_unbuildable_commits(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=20, cap_at=13, unbuildable=(10, 11))
    r = run_driver(make_spec(h), tmp_path)
    assert r.first_bad == h.planted["length"]
    skipped = [o.commit for o in r.probed if o.verdict is Verdict.SKIP]
    assert skipped and set(skipped) <= set(h.unbuildable)
    assert all("build" in o.reason for o in r.probed if o.verdict is Verdict.SKIP)


def test_only_skipped_commits_give_candidates(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=12, cap_at=7, unbuildable=(5, 6))
    r = run_driver(make_spec(h), tmp_path)
    assert r.first_bad is None
    assert r.candidates == list(h.shas[5:8])  # 5 and 6 unbuildable, 7 the culprit
    assert h.planted["length"] in r.candidates


def test_itl_regression_with_factor(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=10, slow_at=4, slow_factor=5.0, step_ms=5.0)
    spec = make_spec(h, verdict={"symptom": "itl", "itl_factor": 2.0})
    r = run_driver(spec, tmp_path)
    assert r.first_bad == h.planted["itl"]


def test_endpoint_that_does_not_reproduce(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6)  # nothing planted: bad judges good
    with pytest.raises(NotReproduced, match=r"bad endpoint .* judged good"):
        run_driver(make_spec(h), tmp_path)


def test_unbuildable_good_endpoint_is_not_reproduced(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=2, unbuildable=(0,))
    with pytest.raises(NotReproduced, match=r"good endpoint .* could not be tested"):
        run_driver(make_spec(h), tmp_path)


def test_second_symptom_reuses_cached_measurements(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=12, cap_at=6, slow_at=6, slow_factor=4.0, step_ms=5.0)
    # three requests a server: the least the model of the range (auto on itl) takes from a
    # cached measurement
    first = run_driver(make_spec(h, probe={"requests": 3}), tmp_path, "s1")
    second = run_driver(make_spec(h, probe={"requests": 3},
                                  verdict={"symptom": "itl", "itl_factor": 2.0}), tmp_path, "s2")
    assert second.strategy_chosen == "changepoint"
    assert first.first_bad == second.first_bad == h.shas[6]
    assert second.server_starts < first.server_starts
    assert any(o.from_cache for o in second.probed)


def cli(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_bisect.cli", *args], capture_output=True,
                          text=True, timeout=300, **kw)  # type: ignore[call-overload]


def test_resume_after_sigkill_does_not_reprobe(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=40, cap_at=29, step_ms=2.0)
    spec = write_spec(tmp_path / "spec.toml", make_spec(h, probe={"max_tokens": 200}))
    session = tmp_path / "session"
    proc = subprocess.Popen([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                             "--session", str(session)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    db = session / "journal.sqlite"
    import sqlite3

    try:
        deadline = time.monotonic() + 120
        done = 0
        while time.monotonic() < deadline and done < 3:
            time.sleep(0.2)
            if db.exists():
                with contextlib.suppress(sqlite3.OperationalError), sqlite3.connect(db) as con:
                    # (the run may not have created its tables yet: poll again)
                    done = con.execute("SELECT count(*) FROM outcomes").fetchone()[0]
        assert done >= 3, "driver made no progress"
    finally:  # (its servers die with it: parent-death signal)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with sqlite3.connect(db) as con:
        before = [r[0] for r in con.execute("SELECT commit_sha FROM outcomes ORDER BY seq")]
    r = cli("run", "--session", str(session), "--json")  # spec comes from the session
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["first_bad"] == h.planted["length"]
    # the first call's verdicts are the session's (in probed: the whole session, issue 50),
    # and the resumed call started no server for them
    assert set(before) <= {p["commit"] for p in doc["probed"]}
    with sqlite3.connect(db) as con:
        second = con.execute("SELECT started FROM runs ORDER BY seq").fetchall()[-1][0]
        again = {r[0] for r in con.execute("SELECT commit_sha FROM starts WHERE created >= ?",
                                           (second,))}
    assert not set(before) & again, set(before) & again
    # no server survives the kill or the resume
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(h.path.parent) not in ps and "VLLM_BISECT" not in ps
    assert not [ln for ln in ps.splitlines() if "vllm-bisect" in ln and "serve" in ln
                and "worktrees" in ln]


def test_session_is_locked(tmp_path: Path) -> None:
    from vllm_bisect.errors import SessionError

    with Session(tmp_path / "s"), pytest.raises(SessionError, match="in use"), \
            Session(tmp_path / "s"):
        pass


def flaky_serve(tmp: Path) -> str:
    """A serve command that exits on its first start at each commit, then serves."""
    marks = tmp / "marks"
    marks.mkdir()
    return (f"if [ ! -e {marks}/{{commit}} ]; then touch {marks}/{{commit}}; "
            "echo 'RuntimeError: CUDA error: an illegal memory access' >&2; exit 3; fi; "
            f"PYTHONPATH=. VLLM_BISECT_SIM_PATH={sim_path()} exec {sys.executable} "
            "-m vllm.entrypoints.cli.main serve {model} --port {port} "
            """--speculative-config '{{"method": "mtp", "num_speculative_tokens": 3}}'""")


def test_a_server_that_dies_once_is_tried_again(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=3)
    spec = make_spec(h, build={"kind": "command", "serve": flaky_serve(tmp_path)})
    r = run_driver(spec, tmp_path)
    # every commit's first server died; the retry measured it, so nothing was skipped
    assert r.first_bad == h.planted["length"]
    assert all(o.verdict is not Verdict.SKIP for o in r.probed)
    assert r.server_starts == 2 * len(r.probed)


def test_without_retries_a_dead_server_is_a_skip(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=3)
    spec = make_spec(h, build={"kind": "command", "serve": flaky_serve(tmp_path)},
                     ops={"retries": 0})
    with pytest.raises(NotReproduced, match=r"good endpoint .* could not be tested: .*exit"):
        run_driver(spec, tmp_path)
