"""The studies' journal: ``studies.sqlite`` in the session directory.

Every trial (study, measurement key) is written as it is judged, so a study interrupted at
any point resumes without measuring again what it had measured: the searches are
deterministic and ask the journal first. The finished study's JSON is kept too.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from vllm_bisect.errors import SessionError
from vllm_bisect.models import Evaluation, Verdict


class StudyJournal:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self.con = sqlite3.connect(path, timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
            self.con.execute("PRAGMA journal_mode=WAL")
            self.con.executescript("""
                CREATE TABLE IF NOT EXISTS trials (
                    study TEXT NOT NULL, key TEXT NOT NULL, label TEXT NOT NULL,
                    commit_sha TEXT NOT NULL, verdict TEXT NOT NULL, reason TEXT NOT NULL,
                    evaluation TEXT NOT NULL, created REAL NOT NULL,
                    PRIMARY KEY (study, key));
                CREATE TABLE IF NOT EXISTS results (
                    study TEXT PRIMARY KEY, doc TEXT NOT NULL, created REAL NOT NULL);
            """)
        except sqlite3.DatabaseError as err:
            raise SessionError(f"cannot open {path}: {err}",
                               hint="move the damaged file away and run the study again") from None

    def get(self, study: str, key: str) -> Evaluation | None:
        with self._lock:
            row = self.con.execute("SELECT evaluation FROM trials WHERE study = ? AND key = ?",
                                   (study, key)).fetchone()
        return Evaluation.model_validate_json(row[0]) if row else None

    def record(self, study: str, key: str, label: str, verdict: Verdict, reason: str,
               ev: Evaluation) -> None:
        with self._lock:
            self.con.execute("INSERT OR REPLACE INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (study, key, label, ev.commit, verdict.value, reason,
                              ev.model_dump_json(), time.time()))

    def save_result(self, study: str, doc: dict[str, Any]) -> None:
        with self._lock:
            self.con.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?)",
                             (study, json.dumps(doc), time.time()))

    def result(self, study: str) -> dict[str, Any] | None:
        with self._lock:
            row = self.con.execute("SELECT doc FROM results WHERE study = ?",
                                   (study,)).fetchone()
        return dict(json.loads(row[0])) if row else None

    def close(self) -> None:
        self.con.close()
