"""The bot's job queue in SQLite: survives restarts, deduplicates, is bounded."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class Job:
    id: int
    repo: str
    issue: int
    user: str
    spec: dict[str, Any]
    status: JobStatus
    comment_id: int | None


class QueueFull(Exception):
    pass


class JobQueue:
    def __init__(self, path: Path, max_queued: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.con = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self.lock = threading.Lock()
        self.max_queued = max_queued
        self.con.executescript("""
            PRAGMA journal_mode=WAL;
            CREATE TABLE IF NOT EXISTS jobs (
                id INTEGER PRIMARY KEY AUTOINCREMENT, dedupe TEXT NOT NULL, repo TEXT NOT NULL,
                issue INTEGER NOT NULL, user TEXT NOT NULL, spec TEXT NOT NULL,
                status TEXT NOT NULL, comment_id INTEGER, created REAL NOT NULL,
                result TEXT);
            CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, seen REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, at REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS comment_forms (repo TEXT NOT NULL,
                issue INTEGER NOT NULL, body TEXT NOT NULL, issue_body TEXT NOT NULL,
                at REAL NOT NULL, PRIMARY KEY (repo, issue));
        """)
        # a job that was running when the bot stopped runs again (its session resumes)
        self.con.execute("UPDATE jobs SET status = 'queued' WHERE status = 'running'")

    def seen(self, keys: list[str], window_s: float) -> bool:
        """True if any key (a delivery id, a body hash) was recorded within window_s."""
        with self.lock:
            marks = ",".join("?" * len(keys))
            return self.con.execute(f"SELECT 1 FROM deliveries WHERE id IN ({marks}) AND "
                                    "seen > ? LIMIT 1", (*keys, time.time() - window_s)
                                    ).fetchone() is not None

    def record(self, keys: list[str], window_s: float) -> None:
        """Record handled keys (and forget those older than window_s)."""
        now = time.time()
        with self.lock:
            self.con.execute("DELETE FROM deliveries WHERE seen < ?", (now - window_s,))
            self.con.executemany("INSERT OR REPLACE INTO deliveries VALUES (?, ?)",
                                 [(k, now) for k in keys])

    def reply_once(self, key: str, window_s: float | None = None) -> bool:
        """True (and remembered) the first time ``key`` asks within window_s (None: ever):
        one polite reply per outsider per issue, one rate-limit reply per window."""
        now = time.time()
        with self.lock:
            row = self.con.execute("SELECT at FROM replies WHERE key = ?", (key,)).fetchone()
            if row is not None and (window_s is None or row[0] > now - window_s):
                return False
            self.con.execute("INSERT OR REPLACE INTO replies VALUES (?, ?)", (key, now))
            return True

    def save_form(self, repo: str, issue: int, body: str, issue_body: str) -> None:
        """Keep ``body`` (a comment holding the form) as the issue's latest corrected form,
        with the issue's text as it was then (answers edited in the issue later are newer)."""
        with self.lock:
            self.con.execute("INSERT OR REPLACE INTO comment_forms VALUES (?, ?, ?, ?, ?)",
                             (repo, issue, body, issue_body, time.time()))

    def latest_form(self, repo: str, issue: int) -> tuple[str, str]:
        """(the issue's latest form posted in a comment, the issue's text then); ("", "")."""
        with self.lock:
            row = self.con.execute("SELECT body, issue_body FROM comment_forms WHERE repo = ? "
                                   "AND issue = ?", (repo, issue)).fetchone()
        return (str(row[0]), str(row[1])) if row else ("", "")

    def forget_reply(self, key: str) -> None:
        with self.lock:
            self.con.execute("DELETE FROM replies WHERE key = ?", (key,))

    @staticmethod
    def dedupe_key(repo: str, issue: int, spec: dict[str, Any]) -> str:
        blob = json.dumps([repo, issue, spec], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    def enqueue(self, repo: str, issue: int, user: str, spec: dict[str, Any]) -> tuple[Job, bool]:
        """(job, created): an identical open request returns the existing job."""
        key = self.dedupe_key(repo, issue, spec)
        with self.lock:
            row = self.con.execute("SELECT * FROM jobs WHERE dedupe = ? AND status IN "
                                   "('queued', 'running')", (key,)).fetchone()
            if row:
                return self._job(row), False
            queued = self.con.execute("SELECT count(*) FROM jobs WHERE status = 'queued'"
                                      ).fetchone()[0]
            if queued >= self.max_queued:
                raise QueueFull
            cur = self.con.execute(
                "INSERT INTO jobs (dedupe, repo, issue, user, spec, status, created) "
                "VALUES (?, ?, ?, ?, ?, 'queued', ?)",
                (key, repo, issue, user, json.dumps(spec), time.time()))
            row = self.con.execute("SELECT * FROM jobs WHERE id = ?", (cur.lastrowid,)).fetchone()
            return self._job(row), True

    def recent(self, column: str, value: str, window_s: float = 3600.0) -> int:
        assert column in ("user", "repo")
        with self.lock:
            return int(self.con.execute(f"SELECT count(*) FROM jobs WHERE {column} = ? AND "
                                        "created > ?", (value, time.time() - window_s)
                                        ).fetchone()[0])

    def set_comment(self, job_id: int, comment_id: int) -> None:
        with self.lock:
            self.con.execute("UPDATE jobs SET comment_id = ? WHERE id = ?", (comment_id, job_id))

    def claim(self) -> Job | None:
        with self.lock:
            row = self.con.execute("SELECT * FROM jobs WHERE status = 'queued' ORDER BY id "
                                   "LIMIT 1").fetchone()
            if row is None:
                return None
            self.con.execute("UPDATE jobs SET status = 'running' WHERE id = ?", (row[0],))
            return self._job(row)

    def finish(self, job_id: int, ok: bool, result: dict[str, Any]) -> None:
        with self.lock:
            self.con.execute("UPDATE jobs SET status = ?, result = ? WHERE id = ?",
                             ("done" if ok else "failed", json.dumps(result), job_id))

    def get(self, job_id: int) -> Job:
        with self.lock:
            return self._job(self.con.execute("SELECT * FROM jobs WHERE id = ?",
                                              (job_id,)).fetchone())

    @staticmethod
    def _job(row: tuple[Any, ...]) -> Job:
        return Job(id=row[0], repo=row[2], issue=row[3], user=row[4], spec=json.loads(row[5]),
                   status=JobStatus(row[6]), comment_id=row[7])
