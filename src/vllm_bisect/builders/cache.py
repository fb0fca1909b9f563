"""The artifact cache: venvs, wheels and images by key, with LRU eviction under a size cap.

Entries live under ``<cache>/artifacts/<key>`` (images live in docker's storage and are
recorded here by reference). An SQLite index keeps each entry's kind, commit, size and last
use. ``prune(max_bytes, keep)`` evicts least-recently-used entries until the total fits,
never touching entries of the commits in ``keep`` (the current session's endpoints).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)


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
        self.root = root
        self.max_bytes = max_bytes
        self.protected: set[str] = set()  # the current session's endpoints
        (root / "artifacts").mkdir(parents=True, exist_ok=True)
        # shared by prefetch threads: one connection, serialized by a lock
        self.con = sqlite3.connect(root / "artifacts.sqlite", timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
        self.lock = threading.RLock()
        self.con.execute("PRAGMA journal_mode=WAL")
        self.con.execute("""CREATE TABLE IF NOT EXISTS artifacts (
            key TEXT PRIMARY KEY, kind TEXT NOT NULL, commit_sha TEXT, size INTEGER NOT NULL,
            last_used REAL NOT NULL, location TEXT NOT NULL)""")

    def path(self, key: str) -> Path:
        return self.root / "artifacts" / key

    def register(self, key: str, location: Path | str, *, commit: str | None, kind: str,
                 size: int | None = None) -> None:
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
            if e.kind == "image":
                if remove_image is None:
                    continue
                try:
                    remove_image(e.location)
                except Exception as err:  # docker may be down: leave the record
                    logger.warning("cannot remove image %s: %s", e.location, err)
                    continue
            else:
                shutil.rmtree(e.location, ignore_errors=True)
            with self.lock:
                self.con.execute("DELETE FROM artifacts WHERE key = ?", (e.key,))
            total -= e.size
            evicted.append(e)
        return evicted

    def close(self) -> None:
        self.con.close()


def parse_size(text: str) -> int:
    """'50G', '500M', '1.5T', '1024' -> bytes."""
    t = text.strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)
