"""Delta debugging over items (pure: no I/O).

``minimize(n, test)`` finds a small subset of items ``0..n-1`` whose test FAILS (reproduces
the symptom), given that all n fail and none pass. It first descends optimistically, halving
the failing set and assuming that when one half passes the other half carries the cause (one
test per level, ceil(log2 n) + 1 tests for a single guilty item); the final single item is
confirmed. When that assumption breaks (the cause needs items from both halves) or a half
cannot be tested (UNRESOLVED: it does not build or import), it falls back to Zeller's ddmin
(subsets, then complements, doubling the granularity) from the smallest set confirmed to
fail. The result is 1-minimal: removing any one item of it no longer fails (or cannot be
tested). Every test is memoized, so a resumed search re-asks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class Result(StrEnum):
    FAIL = "fail"              # the symptom reproduces with this subset
    PASS = "pass"              # it does not
    UNRESOLVED = "unresolved"  # the subset could not be tested (build, import, serve failure)


Subset = tuple[int, ...]
TestFn = Callable[[Subset], Result]


@dataclass
class Memo:
    """Memoizes ``test`` and counts the subsets it actually ran (``known`` ones are free)."""

    test: TestFn
    known: dict[Subset, Result] = field(default_factory=dict)
    ran: list[tuple[Subset, Result]] = field(default_factory=list)

    def __call__(self, subset: Subset) -> Result:
        key = tuple(sorted(subset))
        if key not in self.known:
            r = self.test(key)
            self.known[key] = r
            self.ran.append((key, r))
        return self.known[key]


@dataclass(frozen=True)
class Minimized:
    minimal: Subset
    tests: int                              # tests run (not counting known ones)
    log: tuple[tuple[Subset, Result], ...]  # in the order they ran
    descent_held: bool                      # the optimistic descent alone found it


def split(items: Sequence[int], n: int) -> list[Subset]:
    """``items`` in n contiguous near-equal parts (the first parts get the extra items)."""
    k, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        size = k + (1 if i < r else 0)
        if size:
            out.append(tuple(items[start:start + size]))
        start += size
    return out


def descend(cur: Subset, t: Memo) -> tuple[Subset, bool]:
    """Optimistic halving; returns the smallest set confirmed to fail and whether the
    descent reached a single confirmed item."""
    confirmed, pending = cur, False
    while len(cur) > 1:
        a, b = split(cur, 2)
        ra = t(a)
        if ra is Result.FAIL:
            cur, confirmed, pending = a, a, False
            continue
        if ra is Result.PASS:  # the cause is in b, if it is in one half at all
            cur, pending = b, True
            continue
        if t(b) is Result.FAIL:  # a untestable: b must be tried for real
            cur, confirmed, pending = b, b, False
            continue
        return confirmed, False
    if pending and t(cur) is Result.FAIL:
        confirmed, pending = cur, False
    return confirmed, len(confirmed) == 1 and not pending


def ddmin(cfg: Subset, t: Memo) -> Subset:
    """Zeller's ddmin from a failing ``cfg`` (memoized ``t``)."""
    n = 2
    while len(cfg) >= 2:
        parts = split(cfg, min(n, len(cfg)))
        reduced = False
        for part in parts:
            if t(part) is Result.FAIL:
                cfg, n, reduced = part, 2, True
                break
        if not reduced and len(parts) > 2:
            for part in parts:
                comp = tuple(i for i in cfg if i not in part)
                if t(comp) is Result.FAIL:
                    cfg, n, reduced = comp, max(n - 1, 2), True
                    break
        if not reduced:
            if len(parts) >= len(cfg):
                break
            n = min(len(cfg), 2 * len(parts))
    return cfg


def minimize(n: int, test: TestFn, known: dict[Subset, Result] | None = None) -> Minimized:
    """A 1-minimal failing subset of ``range(n)``. The full set is taken to fail and the
    empty set to pass (they are the culprit and its parent) unless ``known`` says otherwise."""
    everything = tuple(range(n))
    memo = Memo(test, {(): Result.PASS, everything: Result.FAIL, **(known or {})})
    if n == 0:
        return Minimized((), 0, (), True)
    start, held = descend(everything, memo)
    minimal = start if held else ddmin(start, memo)
    return Minimized(minimal, len(memo.ran), tuple(memo.ran), held)
