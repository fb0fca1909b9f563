"""Prefetch: obtain the artifacts of the next possible commits while one is being probed.

``Prefetcher`` wraps a builder. ``prefetch(commits)`` starts ``prepare`` for each in a small
thread pool; ``prepare(commit)`` returns a prefetched artifact (waiting for it if needed, and
re-raising its ArtifactUnavailable) or prepares it directly; ``keep_only(commits)`` cancels
prefetches that have not started and that the last verdict made useless. A prefetch already
running is left to finish: its artifact lands in the cache, where a later step may use it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

from vllm_bisect.builders.base import Artifact, Builder

logger = logging.getLogger(__name__)


class Prefetcher:
    def __init__(self, builder: Builder, workers: int = 2) -> None:
        self.builder = builder
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prefetch")
        self.futures: dict[str, Future[Artifact]] = {}
        self.lock = threading.Lock()
        self.cancelled: list[str] = []

    def prefetch(self, commits: Iterable[str]) -> None:
        with self.lock:
            for c in commits:
                if c not in self.futures:
                    logger.info("prefetching %s", c[:12])
                    self.futures[c] = self.pool.submit(self.builder.prepare, c)

    def keep_only(self, commits: Iterable[str]) -> None:
        wanted = set(commits)
        with self.lock:
            for c, f in list(self.futures.items()):
                if c not in wanted and f.cancel():
                    del self.futures[c]
                    self.cancelled.append(c)

    def prepare(self, commit: str) -> Artifact:
        with self.lock:
            future = self.futures.pop(commit, None)
        if future is None or future.cancelled():
            return self.builder.prepare(commit)
        return future.result()

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
