"""One session opener (issue 52 item 2): :func:`open_session` closes everything it opened
when the code inside it raises (an error, Ctrl-C): the executor's evaluations in flight are
cancelled and their servers torn down, the prefetcher's workers stopped; and ``vllm-bisect
run``, which opens its session there, leaves no server and no worker behind when its caller
raises. Real sessions on a ``sim history`` repository, real simulator servers."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.bisect.test_parallel import session_processes
from tests.helpers import history, make_spec
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.range import CommitInfo, open_repo
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.bisect.wiring import open_session
from vllm_bisect.models import Outcome


def test_the_executors_evaluations_in_flight_end_when_the_caller_raises(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=4)
    spec = make_spec(h, parallel={"workers": 2})
    with Session(tmp_path / "session", spec) as session:
        with pytest.raises(KeyboardInterrupt), \
                open_session(spec, tmp_path / "cache", session=session,
                             repo=open_repo(h.path)) as opened:
            executor = opened.bench.executor
            assert executor.workers == 2
            executor.submit(h.shas[1])
            executor.submit(h.shas[2])
            assert executor.in_flight() == 2
            raise KeyboardInterrupt   # a Ctrl-C while both are measured
        # closed on the way out: both cancelled and collected, their servers torn down
        assert executor.in_flight() == 0
        assert not [t for t in threading.enumerate() if t.name.startswith("eval-")]
        assert session_processes(session.id) == []


def test_the_prefetchers_workers_stop_when_the_caller_raises(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6)
    spec = make_spec(h, ops={"prefetch": True})
    with Session(tmp_path / "session", spec) as session:
        with pytest.raises(RuntimeError, match="the caller's"), \
                open_session(spec, tmp_path / "cache", session=session,
                             repo=open_repo(h.path), prefetch=True) as opened:
            prefetcher = opened.bench.prefetcher
            assert prefetcher is not None
            prefetcher.prefetch(h.shas[1:5])
            raise RuntimeError("the caller's own error")
        # the workers end (each after the artifact it was preparing, if any); left open,
        # they would wait for more work for ever
        for t in prefetcher.pool.threads:
            t.join(timeout=300)
            assert not t.is_alive(), t.name


class RaisesOnFirstOutcome(NullEvents):
    """A caller whose own code fails at the first commit judged."""

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        raise KeyboardInterrupt


def test_a_run_whose_caller_raises_leaves_no_server_or_worker(tmp_path: Path) -> None:
    from vllm_bisect.run_bisect import run_bisect

    h = history(tmp_path, n_commits=12, cap_at=6)
    spec = make_spec(h, parallel={"workers": 2})
    session_dir = tmp_path / "session"
    with pytest.raises(KeyboardInterrupt):
        run_bisect(spec, session_dir, tmp_path / "cache", RaisesOnFirstOutcome())
    with Session(session_dir) as session:   # the session's lock released
        assert session_processes(session.id) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("eval-")]
