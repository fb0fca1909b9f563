"""Prefetch: obtain the artifacts of the next possible commits while one is being probed.

``Prefetcher`` wraps a builder. ``prefetch(commits)`` starts ``prepare`` for each in a small
thread pool; ``prepare(commit)`` returns a prefetched artifact (waiting for it if needed, and
re-raising its ArtifactUnavailable) or prepares it directly; ``keep_only(commits)`` cancels
prefetches that the last verdict made useless: pending ones never start; running ones are
told to stop (builders whose ``prepare`` takes a ``cancel`` event check it between chunks of
a download or pull), so they stop taking bandwidth from the artifact that is needed.

The workers are daemon threads (:class:`DaemonPool`): a prefetch stalled on a dripping index
never keeps the process alive after one Ctrl-C (ThreadPoolExecutor's workers are joined at
interpreter exit, so the run stayed up until the download ended, and a second Ctrl-C ended
it with a traceback). What a killed prefetch leaves (a ``.part`` file, a venv without its
done mark) is never used: it is made again.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol, TypeVar

from vllm_bisect.builders.base import Artifact, Builder, prepare
from vllm_bisect.errors import Cancelled

logger = logging.getLogger(__name__)


class PrefetchSink(Protocol):
    """What the search tells a prefetcher: the :class:`Prefetcher`, or the virtual
    cluster's download link (``sim/virtual.py``) in the benchmarks."""

    def prefetch(self, commits: Iterable[str]) -> None: ...

    def keep_only(self, commits: Iterable[str]) -> None: ...


T = TypeVar("T")
_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class DaemonPool:
    """A small thread pool whose workers are daemon threads (never joined at exit)."""

    def __init__(self, workers: int, name: str) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
                        for i in range(workers)]
        self.started = False
        self.lock = threading.Lock()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        self.jobs.put((future, fn, args))
        with self.lock:
            if not self.started:
                self.started = True
                for t in self.threads:
                    t.start()
        return future

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as err:  # handed to whoever waits on the future
                future.set_exception(err)

    def shutdown(self) -> None:
        """Cancel what has not started; running jobs are left to end (or to the exit)."""
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in self.threads:
            self.jobs.put(None)


class Prefetcher:
    def __init__(self, builder: Builder, workers: int = 2) -> None:
        self.builder = builder
        self.pool = DaemonPool(workers, "prefetch")
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

    def prepare(self, commit: str, cancel: threading.Event | None = None) -> Artifact:
        """The prefetched artifact (waiting for it), else ``prepare`` now. ``cancel`` (the
        measurement's: a Ctrl-C, a verdict that made it useless) ends the wait with
        Cancelled and stops the prefetch between chunks: a prefetch stalled on a dripping
        index held the measurement, and the run's shutdown after one Ctrl-C, until the
        download's deadline."""
        with self.lock:
            future = self.futures.pop(commit, None)
            stop = self.stops.get(commit)
        if future is None or future.cancelled():
            return prepare(self.builder, commit, cancel)
        while True:
            try:
                return future.result(timeout=0.2 if cancel is not None else None)
            except FutureTimeout:
                assert cancel is not None
                if cancel.is_set():
                    if stop is not None:
                        stop.set()
                    raise Cancelled(f"waiting for the prefetch of {commit[:12]} "
                                    "cancelled") from None
            except Cancelled:
                return prepare(self.builder, commit, cancel)

    def close(self) -> None:
        with self.lock:
            for stop in self.stops.values():
                stop.set()  # running downloads stop between chunks
        self.pool.shutdown()
