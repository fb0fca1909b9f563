"""SQLite persistence: the session journal (in the session dir) and the result cache.

Every write commits at once (WAL mode): a run killed with SIGKILL loses at most the commit
being measured. The result cache is keyed by ``BisectSpec.measurement_key(commit)`` (commit,
build, serve, probe), shared by the sessions of one cache dir (another symptom reuses it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path

from pydantic import ValidationError

from vllm_bisect.builders.cache import quarantine
from vllm_bisect.errors import BisectError, SessionError, storage_fault
from vllm_bisect.models import EvalStatus, Evaluation, Outcome, Verdict

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1


def _connect(path: Path) -> sqlite3.Connection:
    try:
        return _connect_raw(path)
    except sqlite3.DatabaseError as err:
        raise unusable(path, err) from None


def _connect_raw(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    # parallel workers record their servers' pids: one connection, used under a lock
    con = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError:
        con.close()
        raise
    return con


def intact(path: Path) -> bool:
    """Whether the database file passes SQLite's ``quick_check``, read without writing
    anything (``immutable``: no lock, no WAL or -shm file), so a full disk or a file size
    limit cannot fail it; a file that does not exist is intact (nothing to damage)."""
    if not path.exists():
        return True
    try:
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            return con.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        finally:
            con.close()
    except sqlite3.DatabaseError:
        return False


def unusable(path: Path, err: sqlite3.DatabaseError) -> BisectError:
    """The error for a database that cannot be opened or written: the storage's fault
    (a full disk, a file size limit) named as such; an intact file said intact; only a file
    whose integrity check fails called damaged. Nothing is moved here."""
    fault = storage_fault(err, path)
    if fault is not None:
        return fault
    if intact(path):
        return SessionError(f"cannot use the database {path}: {err} (the file itself passes "
                            "its integrity check: nothing was moved)",
                            hint="check the free space, the file size limit (ulimit -f) and "
                                 "the permissions where it lies, then run again")
    return SessionError(f"cannot open the database {path}: {err}",
                        hint="the file is damaged or not a vllm-bisect database (its "
                             "integrity check fails); move it away and start a new session")


class ResultCache:
    """Shared by every session of a cache dir. It is only a cache: a file whose integrity
    check fails is moved aside with a warning and a new one started (what it held is
    measured again); a write that fails on an intact file (a full disk, ``ulimit -f``) is
    an error naming the cause, and the file stays where it is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = self._open()

    def _open(self) -> sqlite3.Connection:
        for attempt in range(2):
            con: sqlite3.Connection | None = None
            try:
                con = _connect_raw(self.path)
                con.execute("""CREATE TABLE IF NOT EXISTS results (
                    key TEXT PRIMARY KEY, commit_sha TEXT NOT NULL, status TEXT NOT NULL,
                    evaluation TEXT NOT NULL, created REAL NOT NULL)""")
                check = con.execute("PRAGMA quick_check").fetchall()
                if check != [("ok",)]:
                    raise sqlite3.DatabaseError(f"quick_check: {check[0][0] if check else '?'}")
                return con
            except sqlite3.DatabaseError as err:
                if con is not None:
                    con.close()
                if attempt:
                    raise unusable(self.path, err) from None
                self._damaged(err)
        raise AssertionError("unreachable")

    def _damaged(self, err: sqlite3.DatabaseError) -> None:
        """Move the file aside, only when its integrity check fails; else the error."""
        if storage_fault(err, self.path) is not None or intact(self.path):
            raise unusable(self.path, err) from None
        aside = quarantine(self.path)
        logger.warning("the result cache %s is damaged (%s): moved to %s; starting an empty "
                       "one (its measurements are taken again)", self.path, err, aside)

    def _reopen(self, err: sqlite3.DatabaseError) -> None:
        self.con.close()
        self._damaged(err)
        self.con = self._open()

    def get(self, key: str) -> Evaluation | None:
        try:
            row = self.con.execute("SELECT evaluation FROM results WHERE key = ?",
                                   (key,)).fetchone()
        except sqlite3.DatabaseError as err:
            self._reopen(err)
            return None
        if row is None:
            return None
        try:
            return Evaluation.model_validate_json(row[0])
        except (ValidationError, ValueError) as err:  # another version's row: measure again
            logger.info("ignoring an unreadable cached result %s: %s", key[:12], err)
            return None

    def put(self, key: str, ev: Evaluation) -> None:
        if ev.status in (EvalStatus.FAILED, EvalStatus.CANCELLED) or ev.transient:
            return  # a serve/probe failure, an index 5xx may be transient: never cached
        row = (key, ev.commit, ev.status.value, ev.model_dump_json(), time.time())
        try:
            self.con.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)", row)
        except sqlite3.DatabaseError as err:
            self._reopen(err)
            self.con.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)", row)

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
            CREATE TABLE IF NOT EXISTS starts (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, commit_sha TEXT NOT NULL,
                phase TEXT NOT NULL, created REAL NOT NULL, done INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS runs (
                seq INTEGER PRIMARY KEY AUTOINCREMENT, started REAL NOT NULL,
                seen REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS artifacts (
                commit_sha TEXT PRIMARY KEY, artifact TEXT NOT NULL);
        """)
        cols = {r[1] for r in self.con.execute("PRAGMA table_info(outcomes)")}
        # told: 1 a judged commit of the result, 0 kept for what follows only (a rest check's);
        # judge: the symptom, "/rest" for a rest check's search ('': a journal from before)
        for col, sql in (("told", "told INTEGER NOT NULL DEFAULT 1"),
                         ("judge", "judge TEXT NOT NULL DEFAULT ''")):
            if col not in cols:
                self.con.execute(f"ALTER TABLE outcomes ADD COLUMN {sql}")
        # (worked: this call's seconds by the monotonic clock; a journal from before it has
        # only the wall-clock started/seen, which a clock jump would stretch)
        if "worked" not in {r[1] for r in self.con.execute("PRAGMA table_info(runs)")}:
            self.con.execute("ALTER TABLE runs ADD COLUMN worked REAL")
        self._run: int | None = None
        self._since = 0   # the last outcome journaled before this call (begin_run)
        self._t0 = time.monotonic()
        have = self.get_meta("schema")
        if have is None:
            self.set_meta("schema", str(SCHEMA_VERSION))
        elif have != str(SCHEMA_VERSION):
            raise SessionError(f"session {session_dir} has journal schema {have}, "
                               f"this vllm-bisect writes {SCHEMA_VERSION}",
                               hint="start a new session directory")

    def locked(self) -> threading.Lock:
        """The lock every write from a worker thread holds (``with journal.locked():``)."""
        return self._lock

    def get_meta(self, key: str) -> str | None:
        row = self.con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def record(self, key: str, outcome: Outcome, ev: Evaluation, told: bool = True,
               judge: str = "") -> None:   # (judge: MeasurementStore.judge)
        with self._lock:
            self.con.execute(
                "INSERT INTO outcomes (commit_sha, key, verdict, reason, evaluation, created, "
                "told, judge) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (outcome.commit, key, outcome.verdict.value, outcome.reason,
                 ev.model_dump_json(), time.time(), int(told), judge))
        self.touch_run()

    def verdict_history(self, judge: str | None = None) -> dict[str, list[tuple[Verdict, str]]]:
        """Every recorded (verdict, evaluation status) per measurement key, oldest first (the
        Bayesian strategy runs a commit more than once); ``judge``: that judge's only (a key
        holds every symptom's measurement, a verdict is one search's: a rest check's "good"
        at the bad end, the culprit's level, is not a cap's)."""
        out: dict[str, list[tuple[Verdict, str]]] = {}
        with self._lock:
            rows = self.con.execute(
                "SELECT key, verdict, evaluation FROM outcomes WHERE ? IS NULL OR judge IN "
                "('', ?) ORDER BY seq", (judge, judge)).fetchall()
        for n, (key, verdict, ev) in enumerate(rows, 1):
            try:
                out.setdefault(key, []).append((Verdict(verdict),
                                                str(json.loads(ev).get("status", ""))))
            except (ValueError, AttributeError) as err:
                raise self._damaged(n, err) from None
        return out

    def evaluation_history(self) -> list[tuple[str, Evaluation]]:
        """Every recorded (measurement key, evaluation), oldest first: one per server the
        model of the range measured (a resumed session rebuilds it from these; ``dict()`` of
        it: the latest per key). A row that cannot be read is a :class:`SessionError` (never
        a crash, never skipped: a learning policy replays every verdict)."""
        with self._lock:
            rows = self.con.execute("SELECT key, evaluation FROM outcomes ORDER BY seq").fetchall()
        out = []
        for n, (k, e) in enumerate(rows, 1):
            try:
                out.append((str(k), Evaluation.model_validate_json(e)))
            except (ValidationError, ValueError) as err:
                raise self._damaged(n, err) from None
        return out

    def evaluations_of(self, key: str) -> list[Evaluation]:
        """Every evaluation journaled under ``key`` (a commit run more than once), oldest
        first."""
        rows = self.con.execute("SELECT evaluation FROM outcomes WHERE key = ? ORDER BY seq",
                                (key,)).fetchall()
        out = []
        for n, (e,) in enumerate(rows, 1):
            try:
                out.append(Evaluation.model_validate_json(e))
            except (ValidationError, ValueError) as err:
                raise self._damaged(n, err) from None
        return out

    def earlier_outcomes(self) -> list[tuple[Outcome, Evaluation]]:
        """Every outcome the calls before this one journaled (a resumed session's first
        call, ...), oldest first, each with the evaluation it judged."""
        rows = self.con.execute(
            "SELECT seq, commit_sha, verdict, reason, evaluation FROM outcomes WHERE seq <= ? "
            "AND told = 1 ORDER BY seq", (self._since,)).fetchall()
        out = []
        for n, (_, commit, verdict, reason, e) in enumerate(rows, 1):
            try:
                ev = Evaluation.model_validate_json(e)
                out.append((Outcome(commit=commit, verdict=Verdict(verdict), reason=reason,
                                    measurement=ev.measurement), ev))
            except (ValidationError, ValueError) as err:
                raise self._damaged(n, err) from None
        return out

    def artifact_prepared(self, commit: str, artifact: str) -> None:  # (worker threads)
        """The artifact a call prepared for ``commit`` (JSON): a later call (a resume) reads
        its packages without preparing it again."""
        with self._lock:
            self.con.execute("INSERT OR REPLACE INTO artifacts VALUES (?, ?)", (commit, artifact))

    def prepared_artifacts(self) -> dict[str, str]:
        """commit -> the artifact (JSON) some call of this session prepared for it."""
        with self._lock:
            rows = self.con.execute("SELECT commit_sha, artifact FROM artifacts").fetchall()
        return {str(c): str(a) for c, a in rows}

    def _damaged(self, n: int, err: Exception) -> SessionError:
        why = str(err).splitlines()
        return SessionError(
            f"the journal {self.dir / 'journal.sqlite'} is damaged: its outcome #{n} cannot be "
            f"read ({why[0] if why else type(err).__name__})",
            hint=f"move {self.dir} away and start again (under `git bisect run`: rerun the "
                 "hook, it starts a new journal); measured results stay in the cache dir")

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

    # -- what the session cost, over every call that worked on it (a resume included) -----
    def begin_run(self) -> None:
        """This call works on the session from now (its wall time counts from here)."""
        now = time.time()
        with self._lock:
            self._t0 = time.monotonic()
            cur = self.con.execute("INSERT INTO runs (started, seen, worked) VALUES (?, ?, 0)",
                                   (now, now))
            self._run = cur.lastrowid
            self._since = int(self.con.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM outcomes").fetchone()[0])

    def touch_run(self) -> None:
        """This call is still working (a kill -9 loses at most the time since)."""
        if self._run is None:
            return
        with self._lock:
            self.con.execute("UPDATE runs SET seen = ?, worked = ? WHERE seq = ?",
                             (time.time(), time.monotonic() - self._t0, self._run))

    def wall_s(self) -> float:
        """Seconds worked on the session, every call together (by the monotonic clock: a
        wall-clock jump mid-run does not count; a row from before ``worked``: its wall time)."""
        row = self.con.execute("SELECT SUM(COALESCE(worked, seen - started)) FROM runs"
                               ).fetchone()
        return float(row[0] or 0.0)

    def runs(self) -> int:
        return int(self.con.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def start_pending(self, commit: str, phase: str) -> int:  # (worker threads too)
        """A server is about to be started for ``commit``: counted once :meth:`start_done`
        says it was, or, if this call is killed first, when a server process of that commit
        was recorded after it (``servers``)."""
        with self._lock:
            cur = self.con.execute(
                "INSERT INTO starts (commit_sha, phase, created, done) VALUES (?, ?, ?, 0)",
                (commit, phase, time.time()))
        self.touch_run()
        return int(cur.lastrowid or 0)

    def start_done(self, row: int, started: bool) -> None:
        """The attempt ended: a server was started (kept), or none was (no artifact,
        cancelled before it ran: forgotten)."""
        with self._lock:
            if started:
                self.con.execute("UPDATE starts SET done = 1 WHERE seq = ?", (row,))
            else:
                self.con.execute("DELETE FROM starts WHERE seq = ?", (row,))
        self.touch_run()

    def starts_by_phase(self) -> dict[str, int]:
        """Server starts of the whole session, per phase (an attempt a killed call left
        pending counts when its server process was started in that call: a server of the
        commit that a later call started is that call's own start)."""
        rows = self.con.execute(
            "SELECT phase, COUNT(*) FROM starts WHERE done = 1 OR EXISTS (SELECT 1 FROM "
            "servers WHERE servers.commit_sha = starts.commit_sha AND servers.started >= "
            "starts.created AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.started > "
            "starts.created AND runs.started <= servers.started)) GROUP BY phase").fetchall()
        return {str(p): int(n) for p, n in rows}

    def starts_by_commit(self) -> dict[str, int]:
        rows = self.con.execute(
            "SELECT commit_sha, COUNT(*) FROM starts WHERE done = 1 GROUP BY commit_sha"
            ).fetchall()
        return {str(c): int(n) for c, n in rows}

    def close(self) -> None:
        # the time up to now (an interrupted call's too); a full disk or a damaged file here
        # must not hide the error the call is ending with
        with contextlib.suppress(sqlite3.Error):
            self.touch_run()
        self.con.close()
