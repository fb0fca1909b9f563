"""A session directory: its lock, its journal, its logs, and the servers it left behind."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import sqlite3
import time
from pathlib import Path
from typing import IO, Any

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


MARKER = "vllm-bisect-session.json"
# what decides a bisect's verdicts: a session resumed with other values is another bisect
KEY_SECTIONS = {"range": {"good", "bad", "search", "first_parent"}, "build": True,
                "serve": True, "probe": True, "verdict": True}


def session_key(spec: BisectSpec) -> str:
    """The key of the bisect ``spec`` describes (its range, build, serve, probe and verdict;
    not [ops], [parallel], [explain] or where the checkout is)."""
    blob = json.dumps(_keyed(spec), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _keyed(spec: BisectSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", include=KEY_SECTIONS)  # type: ignore[arg-type]


def _differences(old: dict[str, Any], new: dict[str, Any], at: str = "") -> list[str]:
    """The dotted keys whose values differ between two spec dumps."""
    out: list[str] = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{at}{k}.")
        elif a != b:
            out.append(f"{at}{k} ({a!r} -> {b!r})")
    return out


def _marker(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("tool") == "vllm-bisect" else None


def _write_marker(path: Path, key: str | None) -> None:
    doc = {"tool": "vllm-bisect", "kind": "session", "spec_key": key,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (path / MARKER).write_text(json.dumps(doc, indent=1) + "\n")


def claim(path: Path, spec: BisectSpec | None = None, *, force: bool = False,
          create: bool = True) -> None:
    """Make ``path`` a session of this bisect, or refuse: an existing directory that is not a
    session (no marker, no journal, not empty) is never adopted (its report.md / result.json
    would be overwritten); a session started with another spec (its marker's key, else the
    spec its journal stored) is refused unless ``force``, which moves the earlier run into
    ``replaced-<time>/`` and starts over. A symlink is followed: the session is where it
    points. Creates a new one (unless not ``create``) and writes the marker, with the spec's
    key when given. A session with no journal yet has nothing to protect from another spec."""
    where = path.resolve() if path.is_symlink() else path
    if where.exists() and not where.is_dir():
        raise SessionError(f"--session {path} is a file, not a session directory",
                           hint="pass a new directory (or leave --session out)")
    if where.is_dir():
        mark = _marker(where)
        legacy = mark is None and (where / "journal.sqlite").exists()
        if mark is None and not legacy and any(where.iterdir()):
            shown = ", ".join(sorted(p.name for p in where.iterdir())[:5])
            raise SessionError(
                f"--session {path} exists and is not a vllm-bisect session (no {MARKER}; it "
                f"holds {shown}): nothing in it is touched",
                hint="pass a new or empty directory to --session (or leave it out for a new "
                     "one under ./vllm-bisect-sessions)")
        if spec is not None and (where / "journal.sqlite").exists():
            _check_same_spec(path, where, spec, (mark or {}).get("spec_key"), force)
    elif not create:
        return
    else:
        try:
            where.mkdir(parents=True)
        except OSError as err:
            raise SessionError(f"cannot create session directory {path}: {err.strerror}",
                               hint="pass a writable --session DIR") from None
    mark = _marker(where)
    if mark is None or (spec is not None and mark.get("spec_key") != session_key(spec)):
        _write_marker(where, session_key(spec) if spec is not None else None)


def _check_same_spec(path: Path, where: Path, spec: BisectSpec, key: str | None,
                     force: bool) -> None:
    stored: BisectSpec | None = None
    if (where / "journal.sqlite").exists():
        with contextlib.suppress(FatalError):
            stored = stored_spec(where)
    new = session_key(spec)
    if key is None and stored is not None:
        key = session_key(stored)
    if key is None or key == new:
        return
    if force:
        _start_over(where)
        return
    changed = _differences(_keyed(stored), _keyed(spec)) if stored is not None else []
    raise SessionError(
        f"session {path} was started with another spec (key {key}, this one {new})"
        + (": " + "; ".join(changed[:6]) + ("; ..." if len(changed) > 6 else "")
           if changed else ""),
        hint="resume it with its own spec (or without --spec: the stored one is used), pass "
             "a new --session for this spec, or --force to start this session over (the "
             "earlier run is moved into replaced-<time>/ inside it)")


def _start_over(where: Path) -> None:
    """Move everything of the earlier run (not the lock, not earlier replaced-*) aside."""
    with open(where / "lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SessionError(f"session {where} is in use by another vllm-bisect process",
                               hint="wait for it to finish, or use another --session") from None
        aside = where / f"replaced-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
        aside.mkdir()
        for p in where.iterdir():
            if p.name != "lock" and p != aside and not p.name.startswith("replaced-"):
                p.rename(aside / p.name)
        logger.warning("session %s: the earlier run was moved to %s (--force)", where, aside)


def new_session_dir(root: Path | None = None) -> Path:
    root = root or Path.cwd() / "vllm-bisect-sessions"
    return root / (time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3))


class Session:
    """Opened with ``with Session(dir) as s:``; holds an exclusive lock while open."""

    def __init__(self, path: Path, spec: BisectSpec | None = None) -> None:
        self.path = path
        self.spec = spec   # the bisect it is for (its key goes into the marker)
        self.logs = path / "logs"
        self._lock: IO[str] | None = None
        self.journal: SessionJournal | None = None

    def __enter__(self) -> Session:
        claim(self.path, self.spec)   # never adopt a directory that is not a session
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
