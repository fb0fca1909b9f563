"""The artifact cache: venvs, wheels and images by key, with LRU eviction under a size cap.

Entries live under ``<cache>/artifacts/<key>`` (images live in docker's storage and are
recorded here by reference). An SQLite index keeps each entry's kind, commit, size and last
use. ``prune(max_bytes, keep)`` evicts least-recently-used entries until the total fits,
never touching entries of the commits in ``keep`` (the current session's endpoints).

Containment: a key is one plain path component, and nothing outside ``<cache>/artifacts`` is
ever recorded or deleted (a record pointing elsewhere, from an older version or a tampered
index, is dropped, its target left alone). Several runs may share one cache:
``key_lock(key)`` is a per-key file lock held while an entry is made, and eviction skips an
entry whose lock is held.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.errors import disk_full

logger = logging.getLogger(__name__)

KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,200}$")


@dataclass(frozen=True)
class CacheEntry:
    key: str
    kind: str
    commit: str | None
    size: int
    last_used: float
    location: str


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


class ArtifactCache:
    def __init__(self, root: Path, max_bytes: int | None = None) -> None:
        self.root = root.absolute()  # records hold absolute paths, whatever the cwd
        self.max_bytes = max_bytes
        self.protected: set[str] = set()  # the current session's endpoints
        self.lock = threading.RLock()
        try:
            (root / "artifacts").mkdir(parents=True, exist_ok=True)
            (root / "locks").mkdir(exist_ok=True)
        except OSError as err:
            raise disk_full(err, str(root)) or err from None
        self.con = self._open(root / "artifacts.sqlite")

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        """The index; a damaged one is moved aside (its entries are forgotten, with a warning:
        the artifacts it listed are remade on demand)."""
        for attempt in range(2):
            # shared by prefetch threads: one connection, serialized by a lock
            con = sqlite3.connect(path, timeout=30.0, isolation_level=None,
                                  check_same_thread=False)
            try:
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("""CREATE TABLE IF NOT EXISTS artifacts (
                    key TEXT PRIMARY KEY, kind TEXT NOT NULL, commit_sha TEXT,
                    size INTEGER NOT NULL, last_used REAL NOT NULL, location TEXT NOT NULL)""")
                con.execute("SELECT count(*) FROM artifacts").fetchone()
                return con
            except sqlite3.DatabaseError as err:
                con.close()
                fault = disk_full(err, str(path))
                if fault is not None or attempt:
                    raise fault or err from None
                aside = quarantine(path)
                logger.warning("artifact index %s is damaged (%s): moved to %s, starting a "
                               "new one", path, err, aside)
        raise AssertionError("unreachable")

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def path(self, key: str) -> Path:
        if not KEY.match(key) or ".." in key:
            raise ValueError(f"not a cache key: {key!r}")
        return self.artifacts / key

    def inside(self, location: Path | str) -> bool:
        """Is location (symlinks resolved) strictly inside <cache>/artifacts?"""
        base = self.artifacts.resolve()
        try:
            resolved = Path(location).resolve()
        except (OSError, RuntimeError):
            return False
        return resolved != base and resolved.is_relative_to(base)

    @contextlib.contextmanager
    def key_lock(self, key: str, blocking: bool = True) -> Iterator[bool]:
        """An exclusive lock on one entry across processes; yields False when ``blocking`` is
        off and another holder has it."""
        self.path(key)  # validates the key
        with open(self.root / "locks" / f"{key}.lock", "a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def register(self, key: str, location: Path | str, *, commit: str | None, kind: str,
                 size: int | None = None) -> None:
        if kind != "image" and not self.inside(location):
            raise ValueError(f"refusing to record {location} outside the cache {self.artifacts}")
        if size is None:
            size = dir_size(Path(location)) if Path(location).exists() else 0
        with self.lock:
            self.con.execute("INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?, ?, ?, ?)",
                             (key, kind, commit, size, time.time(), str(location)))
        if self.max_bytes is not None:
            keep = self.protected | ({commit} if commit else set())  # never the one just made
            for e in self.prune(self.max_bytes, keep=keep, remove_image=self.remove_image):
                logger.info("cache over %d bytes: evicted %s %s", self.max_bytes, e.kind, e.key)

    def protect(self, commits: Iterable[str]) -> None:
        self.protected.update(commits)

    @staticmethod
    def remove_image(ref: str) -> None:
        from vllm_bisect.builders.dockerd import docker_client

        docker_client().images.remove(ref, force=True)

    def touch(self, key: str) -> None:
        with self.lock:
            self.con.execute("UPDATE artifacts SET last_used = ? WHERE key = ?",
                             (time.time(), key))

    def entries(self) -> list[CacheEntry]:
        with self.lock:
            rows = self.con.execute("SELECT key, kind, commit_sha, size, last_used, location "
                                    "FROM artifacts ORDER BY last_used").fetchall()
        return [CacheEntry(*r) for r in rows]

    def total_size(self) -> int:
        return sum(e.size for e in self.entries())

    def prune(self, max_bytes: int, keep: Iterable[str] = (),
              remove_image: Callable[[str], None] | None = None) -> list[CacheEntry]:
        """Evict LRU entries until the total is at most max_bytes; returns what was evicted."""
        protected = set(keep)
        total = self.total_size()
        evicted = []
        for e in self.entries():  # oldest use first
            if total <= max_bytes:
                break
            if e.commit is not None and e.commit in protected:
                continue
            if self.evict(e, remove_image):
                total -= e.size
                evicted.append(e)
        return evicted

    def evict(self, e: CacheEntry, remove_image: Callable[[str], None] | None = None) -> bool:
        """Remove one entry and its record (False: left alone, in use or not removable)."""
        if e.kind == "image":
            if remove_image is None:
                return False
            try:
                remove_image(e.location)
            except Exception as err:  # docker may be down: leave the record
                logger.warning("cannot remove image %s: %s", e.location, err)
                return False
        elif not self.inside(e.location):
            logger.warning("cache record %s points outside %s (%s): record dropped, "
                           "nothing deleted", e.key, self.artifacts, e.location)
        else:
            lock = (self.key_lock(e.key, blocking=False) if KEY.match(e.key)
                    else contextlib.nullcontext(True))
            with lock as free:
                if not free:  # another run is making or using it right now
                    return False
                shutil.rmtree(e.location, ignore_errors=True)
        with self.lock:
            self.con.execute("DELETE FROM artifacts WHERE key = ?", (e.key,))
        return True

    def close(self) -> None:
        self.con.close()


def quarantine(path: Path) -> Path:
    """Move a damaged database (and its WAL files) aside; returns where it went."""
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}{suffix}", f"{aside}{suffix}")
    return aside


def parse_size(text: str) -> int:
    """'50G', '500M', '1.5T', '1024' -> bytes."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)
