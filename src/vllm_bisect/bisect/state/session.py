"""A session directory: its lock, its journal, its logs, and the servers it left behind."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import sqlite3
import time
from pathlib import Path
from typing import IO

from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import FatalError, SessionError
from vllm_bisect.runtime.process import kill_group
from vllm_bisect.spec import BisectSpec
from vllm_bisect.spec import stored_spec as load_stored

logger = logging.getLogger(__name__)


def default_cache_dir() -> Path:
    env = os.environ.get("VLLM_BISECT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vllm-bisect"


def usable_cache_dir(path: Path) -> Path:
    """``path``, created if need be, as a writable directory; else a :class:`SessionError`
    that names it (a file there, a file above it, no permission)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SessionError(f"--cache-dir {path} cannot be a directory: {err.strerror}",
                           hint="pass a directory, or a path where one can be created, to "
                                "--cache-dir (or leave it out: the default is "
                                f"{default_cache_dir()})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SessionError(f"--cache-dir {path} is not writable",
                           hint="pass a directory you can write to --cache-dir")
    return path


def stored_meta(session_dir: Path, key: str) -> str | None:
    """A value an earlier run of this session recorded (its spec, its cache dir)."""
    try:
        j = SessionJournal(session_dir)
        try:
            return j.get_meta(key)
        finally:
            j.close()
    except sqlite3.DatabaseError as e:
        raise SessionError(f"the journal of session {session_dir} is damaged: {e}",
                           hint="start a new session (another --session); measured results "
                                "stay in the cache dir") from None


def stored_spec(session_dir: Path) -> BisectSpec:
    """The spec an earlier run of this session used (for a resume without --spec)."""
    text = stored_meta(session_dir, "spec")
    if text is None:
        raise FatalError(f"session {session_dir} has no stored spec", hint="pass --spec FILE")
    return load_stored(text, source=f"{session_dir}/journal.sqlite")  # JSON, or older TOML


def new_session_dir(root: Path | None = None) -> Path:
    root = root or Path.cwd() / "vllm-bisect-sessions"
    return root / (time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3))


class Session:
    """Opened with ``with Session(dir) as s:``; holds an exclusive lock while open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.logs = path / "logs"
        self._lock: IO[str] | None = None
        self.journal: SessionJournal | None = None

    def __enter__(self) -> Session:
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SessionError(f"cannot create session directory {self.path}: {err.strerror}",
                               hint="pass a writable --session DIR") from None
        self._lock = open(self.path / "lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SessionError(f"session {self.path} is in use by another vllm-bisect process",
                               hint="wait for it to finish, or use another --session") from None
        self._lock.write(str(os.getpid()))
        self._lock.flush()
        self.journal = SessionJournal(self.path)
        if self.journal.get_meta("id") is None:
            self.journal.set_meta("id", secrets.token_hex(6))
        self.reap_orphans()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.journal is not None:
            self.journal.close()
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()

    @property
    def id(self) -> str:
        assert self.journal is not None
        return self.journal.get_meta("id") or ""

    def reap_orphans(self) -> None:
        """Kill server groups a killed earlier run left (only if they carry our session id)."""
        assert self.journal is not None
        for pid in self.journal.unstopped_servers():
            if _belongs_to(pid, self.id):
                logger.warning("stopping server pid %d left by an interrupted run", pid)
                kill_group(pid, grace_s=5.0)
            self.journal.server_stopped(pid)


def _belongs_to(pid: int, session_id: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"VLLM_BISECT_SESSION={session_id}".encode() in environ.split(b"\0")
