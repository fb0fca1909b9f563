"""SQLite persistence: the session journal (in the session dir) and the result cache.

Every write commits at once (WAL mode), so a run killed with SIGKILL loses at most the
commit that was being measured. The result cache is keyed by
``BisectSpec.measurement_key(commit)`` (commit, build, serve, probe) and shared by every
session that uses the same cache dir, so a second bisect of another symptom reuses it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

from vllm_bisect.errors import SessionError
from vllm_bisect.models import EvalStatus, Evaluation, Outcome, Verdict

SCHEMA_VERSION = 1


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # parallel workers record their servers' pids: one connection, used under a lock
        con = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as err:
        raise SessionError(f"cannot open database {path}: {err}",
                           hint="the file is damaged or not a vllm-bisect database; "
                                "move it away and start a new session") from None
    return con


class ResultCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = _connect(path)
        self.con.execute("""CREATE TABLE IF NOT EXISTS results (
            key TEXT PRIMARY KEY, commit_sha TEXT NOT NULL, status TEXT NOT NULL,
            evaluation TEXT NOT NULL, created REAL NOT NULL)""")

    def get(self, key: str) -> Evaluation | None:
        row = self.con.execute("SELECT evaluation FROM results WHERE key = ?", (key,)).fetchone()
        return Evaluation.model_validate_json(row[0]) if row else None

    def put(self, key: str, ev: Evaluation) -> None:
        if ev.status in (EvalStatus.FAILED, EvalStatus.CANCELLED):
            return  # a serve/probe failure may be transient: never cached across sessions
        self.con.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
                         (key, ev.commit, ev.status.value, ev.model_dump_json(), time.time()))

    def close(self) -> None:
        self.con.close()


class SessionJournal:
    def __init__(self, session_dir: Path) -> None:
        self.dir = session_dir
        self._lock = threading.Lock()
        self.con = _connect(session_dir / "journal.sqlite")
        self.con.executescript("""
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS outcomes (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, commit_sha TEXT NOT NULL,
                key TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT NOT NULL,
                evaluation TEXT NOT NULL, created REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS servers (
                pid INTEGER NOT NULL, commit_sha TEXT NOT NULL, started REAL NOT NULL,
                stopped REAL);
        """)
        have = self.get_meta("schema")
        if have is None:
            self.set_meta("schema", str(SCHEMA_VERSION))
        elif have != str(SCHEMA_VERSION):
            raise SessionError(f"session {session_dir} has journal schema {have}, "
                               f"this vllm-bisect writes {SCHEMA_VERSION}",
                               hint="start a new session directory")

    def get_meta(self, key: str) -> str | None:
        row = self.con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def record(self, key: str, outcome: Outcome, ev: Evaluation) -> None:
        with self._lock:
            self._record(key, outcome, ev)

    def _record(self, key: str, outcome: Outcome, ev: Evaluation) -> None:
        self.con.execute(
            "INSERT INTO outcomes (commit_sha, key, verdict, reason, evaluation, created) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (outcome.commit, key, outcome.verdict.value, outcome.reason, ev.model_dump_json(),
             time.time()))

    def verdict_history(self) -> dict[str, list[tuple[Verdict, str]]]:
        """Every recorded (verdict, evaluation status) per measurement key, oldest first
        (the Bayesian strategy runs a commit more than once)."""
        out: dict[str, list[tuple[Verdict, str]]] = {}
        with self._lock:
            rows = self.con.execute(
                "SELECT key, verdict, evaluation FROM outcomes ORDER BY seq").fetchall()
        for key, verdict, ev in rows:
            status = str(json.loads(ev).get("status", ""))
            out.setdefault(key, []).append((Verdict(verdict), status))
        return out

    def evaluations(self) -> dict[str, Evaluation]:
        """The latest evaluation per measurement key recorded in this session."""
        rows = self.con.execute("SELECT key, evaluation FROM outcomes ORDER BY seq").fetchall()
        return {k: Evaluation.model_validate_json(e) for k, e in rows}

    def server_started(self, pid: int, commit: str) -> None:  # (called from worker threads)
        with self._lock:
            self.con.execute("INSERT INTO servers VALUES (?, ?, ?, NULL)",
                             (pid, commit, time.time()))

    def server_stopped(self, pid: int) -> None:
        with self._lock:
            self.con.execute("UPDATE servers SET stopped = ? WHERE pid = ? AND stopped IS NULL",
                             (time.time(), pid))

    def unstopped_servers(self) -> list[int]:
        return [int(r[0]) for r in self.con.execute(
            "SELECT pid FROM servers WHERE stopped IS NULL")]

    def close(self) -> None:
        self.con.close()
