"""Prefetch: obtain the artifacts of the next possible commits while one is being probed.

``Prefetcher`` wraps a builder. ``prefetch(commits)`` starts ``prepare`` for each in a small
thread pool; ``prepare(commit)`` returns a prefetched artifact (waiting for it if needed, and
re-raising its ArtifactUnavailable) or prepares it directly; ``keep_only(commits)`` cancels
prefetches that the last verdict made useless: pending ones never start; running ones are
told to stop (builders whose ``prepare`` takes a ``cancel`` event check it between chunks of
a download or pull), so they stop taking bandwidth from the artifact that is needed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from vllm_bisect.builders.base import Artifact, Builder, prepare
from vllm_bisect.errors import Cancelled

logger = logging.getLogger(__name__)


class PrefetchSink(Protocol):
    """What the search tells a prefetcher: the :class:`Prefetcher`, or the virtual
    cluster's download link (``sim/virtual.py``) in the benchmarks."""

    def prefetch(self, commits: Iterable[str]) -> None: ...

    def keep_only(self, commits: Iterable[str]) -> None: ...


class Prefetcher:
    def __init__(self, builder: Builder, workers: int = 2) -> None:
        self.builder = builder
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prefetch")
        self.futures: dict[str, Future[Artifact]] = {}
        self.stops: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.cancelled: list[str] = []

    def _prepare(self, commit: str, stop: threading.Event) -> Artifact:
        return prepare(self.builder, commit, stop)

    def prefetch(self, commits: Iterable[str]) -> None:
        with self.lock:
            for c in commits:
                if c not in self.futures:
                    logger.info("prefetching %s", c[:12])
                    self.stops[c] = threading.Event()
                    self.futures[c] = self.pool.submit(self._prepare, c, self.stops[c])

    def keep_only(self, commits: Iterable[str]) -> None:
        wanted = set(commits)
        with self.lock:
            for c, f in list(self.futures.items()):
                if c in wanted:
                    continue
                if not f.cancel():
                    self.stops[c].set()  # running: ask it to stop between chunks
                del self.futures[c]
                self.cancelled.append(c)

    def prepare(self, commit: str) -> Artifact:
        with self.lock:
            future = self.futures.pop(commit, None)
        if future is None or future.cancelled():
            return self.builder.prepare(commit)
        try:
            return future.result()
        except Cancelled:
            return self.builder.prepare(commit)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
