"""Parallel bisects over real generated histories, real venv builds, real simulator servers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.driver import BisectResult, NullEvents
from vllm_bisect.bisect.search.multisection import ideal_rounds
from vllm_bisect.errors import NotReproduced, SpecError
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.runtime.gpulock import gpu_locks
from vllm_bisect.spec import BisectSpec


class Recorder(NullEvents):
    def __init__(self) -> None:
        self.phases: list[tuple[str, str]] = []

    def on_phase(self, commit: str, phase: str) -> None:
        self.phases.append((commit, phase))


def session_processes(session_id: str) -> list[int]:
    """Live processes started for this session (they carry VLLM_BISECT_SESSION)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes().split(b"\0")
            state = (p / "stat").read_text().split()[2]
        except OSError:
            continue
        if f"VLLM_BISECT_SESSION={session_id}".encode() in env and state != "Z":
            out.append(int(p.name))
    return out


def journal_rows(session: Path) -> tuple[str, list[str], list[tuple[int, float | None]]]:
    con = sqlite3.connect(session / "journal.sqlite")
    sid = con.execute("SELECT value FROM meta WHERE key = 'id'").fetchone()[0]
    commits = [r[0] for r in con.execute("SELECT commit_sha FROM outcomes")]
    servers = [(int(r[0]), r[1]) for r in con.execute("SELECT pid, stopped FROM servers")]
    con.close()
    return sid, commits, servers


def bisect(spec: BisectSpec, tmp: Path, events: NullEvents | None = None) -> BisectResult:
    return run_bisect(spec, tmp / "session", tmp / "cache", events or NullEvents())


def test_four_workers_find_the_culprit_in_fewer_rounds(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=40, cap_at=23, unbuildable=(15,))
    spec = make_spec(h, parallel={"workers": 4})
    result = bisect(spec, tmp_path)
    assert result.first_bad == h.planted["length"]
    assert result.workers == 4
    assert 1 <= result.rounds <= ideal_rounds(40, 4) + 1 < 6  # one worker needs ceil(log2 40)
    data = json.loads((tmp_path / "session" / "result.json").read_text())
    assert data["rounds"] == result.rounds and data["workers"] == 4
    sid, _, servers = journal_rows(tmp_path / "session")
    assert servers and all(stopped is not None for _, stopped in servers)
    assert session_processes(sid) == []


def test_auto_on_a_noisy_symptom_with_workers_runs_the_model_k_servers_a_round(
        tmp_path: Path) -> None:
    # with k workers auto runs the model of the range, k measurements a round from one
    # posterior (docs/benchmarks.md, session 30: at an H100's start and request costs it
    # matches the two-level multisection's wall with fewer starts); the reason says so
    h = history(tmp_path, n_commits=16, slow_at=9, slow_factor=2.0, step_ms=5.0)
    spec = make_spec(h, parallel={"workers": 3},
                     verdict={"symptom": "itl", "verify_samples": 0, "rest_check": False})
    result = bisect(spec, tmp_path)
    assert result.first_bad == h.planted["itl"]
    assert result.workers == 3 and result.strategy_chosen == "changepoint"
    assert "with 3 workers it picks 3 measurements a round" in result.strategy_reason
    # one worker needs 4 steps and the ends' round; three: fewer rounds than servers
    assert result.rounds < result.server_starts, (result.rounds, result.server_starts)


def test_useless_runs_are_cancelled_and_torn_down(tmp_path: Path) -> None:
    # n = 30 with 4 workers: while the endpoints are verified, the two other workers start on
    # commits 9 and 19 (a three-way split). The cap is at 4, so once 9 is bad, 19 (whose server
    # takes two minutes to start) is useless: cancelled.
    h = history(tmp_path, n_commits=30, cap_at=5, slow_start=(20,), slow_start_s=120.0)
    # (the simulator needs no GPU memory profiling: start-ups need not wait for each other)
    spec = make_spec(h, parallel={"workers": 4}, ops={"serialize_startup": False})
    rec = Recorder()
    started = time.monotonic()
    result = bisect(spec, tmp_path, rec)
    assert time.monotonic() - started < 60
    assert result.first_bad == h.planted["length"]
    slow = {h.shas[20]}  # commit index i is plan number i + 1
    cancelled = {c for c, phase in rec.phases if phase.startswith("cancelled")}
    assert slow <= cancelled
    sid, journaled, servers = journal_rows(tmp_path / "session")
    assert not slow & set(journaled)            # a cancelled run is never recorded
    assert all(stopped is not None for _, stopped in servers)
    assert session_processes(sid) == []
    # and a second run of the same spec does not think they were measured
    assert not {o.commit for o in result.probed} & slow


def test_gpus_are_pinned_per_worker_and_locked(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BISECT_LOCK_DIR", str(tmp_path / "locks"))
    h = history(tmp_path, n_commits=12, cap_at=6)
    spec = make_spec(h, parallel={"gpus": "0,1,2,3", "gpus_per_probe": 2})
    # another session holds GPU 2 for the first few seconds: the bisect waits and says who
    release = threading.Event()
    held = threading.Event()

    def other_session() -> None:
        with gpu_locks([2], session="other-session", commit="f" * 40):
            held.set()
            release.wait(10)

    t = threading.Thread(target=other_session)
    t.start()
    held.wait(5)
    threading.Timer(3.0, release.set).start()
    rec = Recorder()
    result = bisect(spec, tmp_path, rec)
    t.join()
    assert result.first_bad == h.planted["length"]
    assert result.workers == 2
    waits = [p for _, p in rec.phases if "GPU 2 is held by session other-session" in p]
    assert waits and "ffffffffffff" in waits[0]
    seen = {str(ev.environment["env"].get("CUDA_VISIBLE_DEVICES"))  # type: ignore[union-attr]
            for ev in result.evaluations.values()}
    assert seen <= {"0,1", "2,3"} and len(seen) == 2


def test_bad_gpu_flags_are_spec_errors(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4, cap_at=2)
    with pytest.raises(SpecError, match="needs 6 GPUs"):
        bisect(make_spec(h, parallel={"gpus": "0,1", "workers": 3, "gpus_per_probe": 2}),
               tmp_path)
    with pytest.raises(SpecError, match="not a list of GPU indices"):
        bisect(make_spec(h, parallel={"gpus": "zero,one"}), tmp_path / "b")


def test_ctrl_c_tears_down_every_worker_and_resume_finishes(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=30, cap_at=8, slow_start=(5, 10, 15, 20, 25),
                slow_start_s=6.0)
    spec_file = write_spec(tmp_path / "spec.toml", make_spec(
        h, parallel={"workers": 4}, ops={"serialize_startup": False}))
    session = tmp_path / "session"
    argv = [sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec_file),
            "--session", str(session), "--cache-dir", str(tmp_path / "cache"), "--json"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until four servers are starting at once
            if (session / "journal.sqlite").exists():
                try:
                    _, _, servers = journal_rows(session)
                except (sqlite3.OperationalError, TypeError):  # tables or the id not written yet
                    servers = []
                if sum(1 for _, stopped in servers if stopped is None) >= 4:
                    break
            time.sleep(0.2)
        else:
            proc.kill()
            pytest.fail("four servers never ran at once")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:  # a failed test leaves no run (nor, by parent-death signal, servers) behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr.decode()[-2000:]
    assert b"resume with" in stderr
    sid, first, servers = journal_rows(session)
    assert all(stopped is not None for _, stopped in servers)
    assert session_processes(sid) == []
    again = subprocess.run(argv, capture_output=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    data = json.loads(again.stdout)
    assert data["first_bad"] == h.planted["length"]
    # the first call's verdicts are the session's (probed: the whole session, issue 50), and
    # nothing recorded before Ctrl-C is measured again (no start of it in the second call)
    assert set(first) <= {p["commit"] for p in data["probed"]}
    con = sqlite3.connect(session / "journal.sqlite")
    second = con.execute("SELECT started FROM runs ORDER BY seq").fetchall()[-1][0]
    again_started = {r[0] for r in con.execute(
        "SELECT commit_sha FROM starts WHERE created >= ?", (second,))}
    con.close()
    assert not set(first) & again_started


def test_endpoints_that_do_not_reproduce_stop_every_worker(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=30, slow_start=(10, 20), slow_start_s=120.0)  # no regression
    spec = make_spec(h, parallel={"workers": 4}, ops={"serialize_startup": False})
    started = time.monotonic()
    with pytest.raises(NotReproduced, match=r"bad endpoint .* judged good"):
        bisect(spec, tmp_path)
    assert time.monotonic() - started < 60  # the interior runs were cancelled, not awaited
    sid, journaled, servers = journal_rows(tmp_path / "session")
    assert set(journaled) == {h.good, h.bad}
    assert all(stopped is not None for _, stopped in servers)
    assert session_processes(sid) == []
