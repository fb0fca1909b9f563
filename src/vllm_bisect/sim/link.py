"""A download link in virtual time: what prefetching artifacts saves, and what it cannot.

The model of :class:`~vllm_bisect.builders.prefetch.Prefetcher` (a pool of two download
threads) over one network link, for the virtual cluster. Work is in minutes at the link's
full rate (an artifact of 5 minutes takes 5 minutes alone on the link).

- ``independent``: every transfer runs at the full rate whatever else runs (a registry
  close by, a fat pipe: what bench_prefetch.py calls independent bandwidth);
- shared (``independent=False``): the transfers running at one time share the rate
  equally (processor sharing), the foreground one included: a prefetch slows down the
  artifact that is needed now.

Prefetches wait in FIFO order for one of the pool's ``pool`` threads; a foreground fetch
(``need`` of an artifact nobody prefetched) runs at once beside them. ``keep_only`` drops the
transfers no longer wanted, running or waiting (their progress is lost); finished artifacts
stay (the builders' cache keeps them).
"""

from __future__ import annotations

import math

EPS = 1e-9


class Link:
    def __init__(self, independent: bool, pool: int = 2) -> None:
        self.independent = independent
        self.pool = pool
        self.t = 0.0                       # virtual time simulated up to
        self.queue: dict[int, float] = {}  # prefetches, FIFO: item -> work left (minutes)
        self.fg: dict[int, float] = {}     # foreground fetches
        self.done: set[int] = set()

    def _active(self) -> list[tuple[dict[int, float], int]]:
        return ([(self.queue, i) for i in list(self.queue)[:self.pool]]
                + [(self.fg, i) for i in self.fg])

    def advance(self, to: float = math.inf, until: int | None = None) -> None:
        """Run the link to time ``to``, or (``until``) until that item is done."""
        while until is None or until not in self.done:
            active = self._active()
            if not active:
                if until is not None:
                    raise ValueError(f"{until} is not being fetched")
                self.t = max(self.t, to)
                return
            rate = 1.0 if self.independent else 1.0 / len(active)
            step = min(d[i] for d, i in active) / rate
            if until is None:
                step = min(step, to - self.t)
                if step <= 0:
                    return
            self.t += step
            for d, i in active:
                d[i] -= step * rate
                if d[i] <= EPS:
                    del d[i]
                    self.done.add(i)

    def prefetch(self, items: dict[int, float], now: float) -> None:
        """Queue these (item -> size in minutes) unless done or already on the way."""
        self.advance(now)
        for i, size in items.items():
            if i not in self.done and i not in self.queue and i not in self.fg:
                self.queue[i] = size

    def keep_only(self, wanted: set[int], now: float) -> None:
        self.advance(now)
        for i in [i for i in self.queue if i not in wanted]:
            del self.queue[i]

    def need(self, i: int, size: float, now: float) -> float:
        """The artifact is needed at ``now``: the minutes spent waiting for it."""
        self.advance(now)
        if i in self.done:
            return 0.0
        if i not in self.queue:
            self.fg[i] = size
        self.advance(until=i)
        return self.t - now

    def forget(self, i: int) -> None:
        """A failed artifact (unbuildable): the next need fetches it again."""
        self.done.discard(i)
