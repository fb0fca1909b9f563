"""A careless user's mistakes through the real CLI: each ends in a clear error with the right
hint and no traceback (issue 18)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.builders.test_command import sim_env
from tests.config_specs import config_spec
from tests.conftest import closed_port
from tests.helpers import history, make_spec, write_spec
from tests.test_cli import cli
from vllm_bisect.bisect.state.journal import ResultCache
from vllm_bisect.bisect.state.session import MARKER
from vllm_bisect.errors import SessionError
from vllm_bisect.models import EvalStatus, Evaluation
from vllm_bisect.report.render import load
from vllm_bisect.sim.config_history import generate_config_history


def clean(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr[-3000:]
    assert "error:" in r.stderr and "hint:" in r.stderr, r.stderr[-3000:]


def test_triage_of_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "report.md"
    f.write_bytes("good: v0.11.0 bad: main, caf\xe9 ITL doubled\n".encode("latin-1"))
    r = cli("triage", str(f))
    assert r.returncode == 2
    clean(r)
    assert "is not UTF-8 text" in r.stderr and "iconv" in r.stderr


def test_probe_on_a_closed_port_says_nothing_listens() -> None:
    with closed_port() as port:
        r = cli("probe", "--url", f"http://127.0.0.1:{port}", "--model", "m")
    assert r.returncode == 1
    clean(r)
    assert "nothing accepts connections" in r.stderr
    assert "log" not in r.stderr.lower() and "died" not in r.stderr


def test_report_on_a_directory_that_is_not_a_session(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    r = cli("report", str(tmp_path))
    assert r.returncode == 2
    clean(r)
    assert "is not a vllm-bisect session directory" in r.stderr
    assert "resume" not in r.stderr and "finish it" not in r.stderr
    with pytest.raises(SessionError, match="is not a directory"):
        load(tmp_path / "nope")
    session = tmp_path / "s"
    session.mkdir()
    (session / "journal.sqlite").write_bytes(b"")
    with pytest.raises(SessionError, match="has not finished"):
        load(session)
    (session / "result.json").write_text("{broken")
    with pytest.raises(SessionError, match="cannot be read"):
        load(session)


def test_a_serve_command_that_fails_everywhere_points_to_its_log(tmp_path: Path) -> None:
    h = generate_config_history(tmp_path / "configs", n_commits=3, gen_cap_at=2)
    spec = config_spec(h, "length", sim_env(tmp_path), startup_timeout_s=30).with_overrides(
        build={"serve": "echo 'unrecognized arguments: --bogus' >&2; exit 2"})
    session = tmp_path / "session"
    r = cli("run", "--spec", str(write_spec(tmp_path / "s.toml", spec)), "--session",
            str(session), "--cache-dir", str(tmp_path / "c"))
    assert r.returncode == 3
    clean(r)
    log = session / "logs" / f"serve-{h.good[:12]}.log"
    assert "unrecognized arguments" in log.read_text()
    flat = " ".join(r.stderr.split())
    assert f"serve-{h.good[:12]}.log" in flat and "serve command" in flat


def test_a_damaged_result_cache_is_set_aside_with_a_warning(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    cache = tmp_path / "cache2"
    cache.mkdir()
    (cache / "results.sqlite").write_bytes(b"this is not a database" * 200)
    r = cli("run", "--spec", str(spec), "--session", str(tmp_path / "s"), "--cache-dir",
            str(cache), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "is damaged" in r.stderr
    assert json.loads(r.stdout)["first_bad"] == h.planted["length"]
    assert list(cache.glob("results.sqlite.damaged-*"))


def test_result_cache_damaged_mid_file_recovers(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    rc = ResultCache(path)
    for i in range(300):
        rc.put(f"k{i}", Evaluation(commit=f"{i:040d}", status=EvalStatus.UNAVAILABLE,
                                   reason="x" * 200))
    rc.close()
    data = bytearray(path.read_bytes())
    data[4096 * 2:4096 * 4] = b"\xa5" * 8192  # pages 3-4: a torn write, a bad disk
    path.write_bytes(bytes(data))
    rc = ResultCache(path)  # quarantined on open, or on the first query
    assert rc.get("k5") is None
    rc.put("k5", Evaluation(commit="5" * 40, status=EvalStatus.UNAVAILABLE))
    assert rc.get("k5") is not None
    assert list(tmp_path.glob("results.sqlite.damaged-*"))


def test_a_damaged_session_journal_is_a_clear_error(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    session = tmp_path / "session"
    session.mkdir()
    (session / "journal.sqlite").write_bytes(b"garbage" * 1000)
    r = cli("run", "--session", str(session), "--spec", str(spec))
    assert r.returncode == 2
    clean(r)
    assert "damaged" in r.stderr and "new session" in r.stderr


def test_a_full_disk_is_the_disk_full_error(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    for name in ("spec.toml", f"logs/serve-{h.good[:12]}.log"):  # the session dir, a log
        session = tmp_path / name.replace("/", "-")
        (session / "logs").mkdir(parents=True)
        (session / MARKER).write_text('{"tool": "vllm-bisect"}')   # a session of ours
        (session / name).symlink_to("/dev/full")  # every write: ENOSPC
        r = cli("run", "--spec", str(spec), "--session", str(session), "--cache-dir",
                str(tmp_path / "c"))
        assert r.returncode == 2, r.stderr[-3000:]
        clean(r)
        assert "no space left" in r.stderr and "cache prune" in r.stderr


def test_the_session_remembers_its_cache_dir(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=3, cap_at=2)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    session, mine = tmp_path / "session", tmp_path / "my cache"
    # given relative to the cwd (the source builder's git worktrees once landed beside the
    # repository instead), resumed from another cwd
    r = cli("run", "--spec", str(spec), "--session", str(session), "--cache-dir", "my cache",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (mine / "worktrees").is_dir() and (mine / "results.sqlite").is_file()
    assert f"--cache-dir '{mine}'" in " ".join(r.stderr.split())  # in the resume command
    default = Path(os.environ["VLLM_BISECT_CACHE_DIR"])
    r = cli("run", "--session", str(session), "--json")  # resume without --cache-dir
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"--cache-dir '{mine}'" in " ".join(r.stderr.split())
    assert not (default / "results.sqlite").exists()  # nothing went to the default cache


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_works_when_started_with_sigint_ignored(tmp_path: Path) -> None:
    """`vllm-bisect run &` from a script starts it with SIGINT ignored."""
    h = history(tmp_path, n_commits=12, cap_at=9, slow_start=(6,), slow_start_s=120.0)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    session = tmp_path / "session"
    proc = subprocess.Popen([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec", str(spec),
                             "--session", str(session)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_ignore_sigint)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the slow commit's server is starting
            try:
                with sqlite3.connect(session / "journal.sqlite") as con:
                    running = con.execute("SELECT commit_sha FROM servers WHERE stopped IS NULL"
                                          ).fetchall()
            except sqlite3.Error:
                running = []
            if (h.shas[6],) in running:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the slow commit never started")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"resume with" in err
    with sqlite3.connect(session / "journal.sqlite") as con:
        assert con.execute("SELECT count(*) FROM servers WHERE stopped IS NULL").fetchone() == (0,)


@pytest.mark.parametrize("value", ["inf", "nan", "1e308"])
def test_probe_timeout_must_be_finite_and_bounded(value: str) -> None:
    r = cli("probe", "--url", "http://127.0.0.1:9", "--model", "m", "--timeout", value)
    assert r.returncode == 2, r.stderr
    assert "--timeout" in r.stderr and "Traceback" not in r.stderr
