"""Binary search over a first-parent commit list, skip-aware (pure: no I/O).

Indexing: ``commits[0..n-1]`` are the commits in (good, bad], oldest first; index ``-1`` is
the good endpoint and ``n-1`` the bad one. The state is the set of verdicts known so far;
``next_step`` says which commit to test next, or that the search is over.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from vllm_bisect.models import Verdict


@dataclass(frozen=True)
class Bounds:
    last_good: int   # highest index known good (-1: the good endpoint)
    first_bad: int   # lowest index known bad


@dataclass(frozen=True)
class Step:
    """Either a commit index to test, or the end: a culprit or a set of candidates."""

    test: int | None = None
    culprit: int | None = None
    candidates: tuple[int, ...] = ()

    @property
    def done(self) -> bool:
        return self.test is None


def bounds(n: int, verdicts: Mapping[int, Verdict]) -> Bounds:
    """The tightest good/bad bounds. A bad below a good is inconsistent: the lowest bad above
    the highest good wins (as git bisect does, the newest evidence does not reorder history)."""
    good = max((i for i, v in verdicts.items() if v is Verdict.GOOD), default=-1)
    bad = min((i for i, v in verdicts.items() if v is Verdict.BAD and i > good), default=n - 1)
    return Bounds(good, bad)


def nearest_untested(lo: int, hi: int, verdicts: Mapping[int, Verdict]) -> int | None:
    """The untested index in (lo, hi) nearest the midpoint, alternating sides around it."""
    if hi - lo < 2:
        return None
    mid = (lo + hi) // 2
    for offset in range(hi - lo):
        for cand in (mid - offset, mid + offset) if offset else (mid,):
            if lo < cand < hi and cand not in verdicts:
                return cand
    return None


def next_step(n: int, verdicts: Mapping[int, Verdict]) -> Step:
    b = bounds(n, verdicts)
    if b.first_bad - b.last_good == 1:
        return Step(culprit=b.first_bad, candidates=(b.first_bad,))
    cand = nearest_untested(b.last_good, b.first_bad, verdicts)
    if cand is None:  # only skipped commits separate good from bad
        return Step(candidates=tuple(range(b.last_good + 1, b.first_bad + 1)))
    return Step(test=cand)


def ends_search(n: int, verdicts: Mapping[int, Verdict], testing: int) -> bool:
    """Whether the search is over after ``testing`` whichever verdict it gets (good or bad):
    then it is one of the two commits the answer rests on."""
    return all(next_step(n, {**verdicts, testing: v}).done for v in (Verdict.GOOD, Verdict.BAD))


def unconfirmed_pair(n: int, verdicts: Mapping[int, Verdict],
                     confirmed: Collection[int]) -> list[int]:
    """The interior commits of the final pair (the last good, the first bad) not yet judged
    at the whole-bisect bound; the endpoints are what they are by definition."""
    b = bounds(n, verdicts)
    return [i for i in (b.first_bad, b.last_good) if 0 <= i < n - 1 and i not in confirmed]


def lookahead(n: int, verdicts: Mapping[int, Verdict], testing: int) -> list[int]:
    """The commits the search would test next after ``testing``, for each verdict it may get
    (good, bad): what to prefetch while ``testing`` is being measured."""
    ahead = []
    for v in (Verdict.GOOD, Verdict.BAD):
        step = next_step(n, {**verdicts, testing: v})
        if step.test is not None and step.test not in ahead:
            ahead.append(step.test)
    return ahead
