"""What the model of the range measures next (pure): where the model is in doubt.

Candidates: another server at a measured commit (the ends of the two most likely intervals,
and both ends of the range while "no step" or "a drift" is still credible), or a first server
at an unmeasured commit (the one that splits the posterior in half, or the middle of the most
likely interval). A measured commit whose side is in doubt goes first (doubt per server it
already has); else the likeliest interval is split. On a clean, large step this picks the
posterior's median commit, one server each: plain bisection. (A one-step entropy lookahead
was tried first and dropped: docs/benchmarks.md, issue 48.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from vllm_bisect.verdict.changepoint import Posterior, Prior, Server, posterior

NONE_DOUBT = 0.2     # while the search narrows: the ends are measured again past this P(none)
SEARCH_DOUBT = 0.15   # while the search narrows: a commit this unsure of its side is measured again
ANCHOR_SURE = 0.05    # a commit this sure of its side tells that side's level
LONE_SHIFT = 1.5      # a lone end's reading this many server sds the other way (below)


@dataclass(frozen=True)
class Choice:
    """Measure commit ``index`` on a fresh server with ``requests`` requests; ``new``: the
    commit has no server yet; ``doubt``: why (1.0 for a split)."""

    index: int
    requests: int
    new: bool
    doubt: float


def _split(post: Posterior, usable: Sequence[int], measured: set[int]) -> list[int]:
    """Unmeasured usable commits that split the posterior: the one nearest its median, and
    the middle of the most likely interval (when that interval has an interior)."""
    pk = post.per_commit()
    total = float(pk.sum())
    if total <= 0:
        return []
    cum = pk.cumsum() / total
    free = [c for c in usable if c not in measured and 0 <= c < post.n - 1]
    if not free:
        return []
    out = [min(free, key=lambda c: (abs(cum[c] - 0.5), c))]
    j, _ = post.top()
    lo, hi = post.bounds[j], post.bounds[j + 1]
    inside = [c for c in free if lo < c < hi]
    if inside:
        mid = (lo + hi) / 2
        out.append(min(inside, key=lambda c: (abs(c - mid), c)))
    return sorted(set(out))


def _again(post: Posterior, limit: int) -> list[int]:
    """Measured commits worth another server: the ends of the two most likely intervals,
    and both ends of the range while "no step" or "drift" is credible."""
    order = sorted(range(len(post.interval)), key=lambda j: -post.interval[j])[:2]
    out: set[int] = set()
    for j in order:
        out.update((post.bounds[j], post.bounds[j + 1]))
    if post.none + post.drift > 0.01:
        out.update((-1, post.n - 1))
    return sorted(c for c in out if post.by_commit.get(c, 0) < limit)


def anchor(post: Posterior, c: int, usable: set[int]) -> int:
    """Where a server settles commit ``c``'s doubt: ``c`` itself, unless it already has as
    many servers as the side with fewest (the servers at commits surely on that side, that
    side's end included): then its doubt is the levels' (a commit measured again and again
    cannot tell a level nobody measured well), and the weaker side's sure commit nearest
    the boundary gets the server. Only while a step is believed (P(none) + P(drift) at most
    ``NONE_DOUBT``)."""
    if c in (-1, post.n - 1) or post.none + post.drift > NONE_DOUBT:
        return c    # (no step, or a drift, still credible: the ends and the commit tell)
    sides: dict[bool, list[int]] = {False: [], True: []}
    for i in post.by_commit:
        p = 0.0 if i == -1 else 1.0 if i == post.n - 1 else post.p_bad(i)
        if min(p, 1 - p) <= ANCHOR_SURE:
            sides[p > 0.5].append(i)
    count = {side: sum(post.by_commit[i] for i in ids) for side, ids in sides.items()}
    weak = min(count, key=lambda side: (count[side], side))
    ids = [i for i in sides[weak] if i in usable]
    if post.by_commit.get(c, 0) < count[weak] or not ids:
        return c
    return min(ids) if weak else max(ids)


def doubt(post: Posterior, c: int, final: bool = True) -> float:
    """How unsure the model is of commit ``c``'s side: min(P(bad), P(good)) for a commit
    inside the range; for the old and new ends, P(no step that matters), counted while the
    search narrows only past ``NONE_DOUBT`` (the commits it measures inside the range tell
    that too)."""
    if c == -1 or c == post.n - 1:
        return post.none if final or post.none > NONE_DOUBT else 0.0
    p = post.p_bad(c)
    return min(p, 1.0 - p)


def in_doubt(post: Posterior, usable: Sequence[int], confidence: float,
             per_commit_limit: int) -> tuple[bool, list[int], list[int]]:
    """Whether the likeliest interval is the final pair (or has nothing left to split);
    the measured commits worth another server (``_again``, usable); those of them in doubt
    past the bar, most doubtful per server first (what :func:`choose` measures first)."""
    usable_set = set(usable) | {-1, post.n - 1}
    j, _ = post.top()
    final = post.size(j) == 1 or not [c for c in usable if post.bounds[j] < c < post.bounds[j + 1]]
    bar = (1.0 - confidence) / 2 if final else SEARCH_DOUBT
    again = [c for c in _again(post, per_commit_limit) if c in usable_set]
    # doubt per server it already has: a commit measured once and in doubt before one
    # measured ten times (whose next server tells little more)
    doubtful = sorted(again, key=lambda c: (-doubt(post, c, final)
                                            / (1 + post.by_commit.get(c, 0)), c))
    return final, again, [c for c in doubtful if doubt(post, c, final) > bar]


def choose(post: Posterior, usable: Sequence[int], requests: int, confidence: float,
           per_commit_limit: int = 12) -> Choice | None:
    """The next measurement (None: nothing measurable would tell more).

    Measure only where the model is in doubt: the commits that bound the likeliest intervals
    (and both ends) get another server while their side is in doubt (past ``1 - confidence``
    at the final pair, past ``SEARCH_DOUBT`` while the search still narrows); otherwise the
    likeliest interval is split at the posterior's median (a new commit). ``usable``: commit
    indices that can be measured (not unbuildable, not given up on); ``requests``: what a new
    server runs.
    """
    measured = set(post.by_commit)
    usable_set = set(usable) | {-1, post.n - 1}
    final, again, doubtful = in_doubt(post, usable, confidence, per_commit_limit)
    if doubtful:
        c = doubtful[0]
        return Choice(anchor(post, c, usable_set), requests, False, doubt(post, c, final))
    split = _split(post, usable, measured)
    if split and not final:
        return Choice(split[-1], requests, True, 1.0)
    rest = sorted(again, key=lambda c: -doubt(post, c))
    if rest and doubt(post, rest[0]) > 1e-9:
        return Choice(rest[0], requests, False, doubt(post, rest[0]))
    return None


def lone_end_in_doubt(post: Posterior, servers: Sequence[Server], prior: Prior,
                      bar: float) -> int | None:
    """A rest check about to answer "explained" (no second change in its sub-range): an end
    of the sub-range measured by one server only, whose reading ``LONE_SHIFT`` server-level
    sds the other way (towards a change inside) would bring P(a change) to ``bar``, where
    the check searches. Such an end gets another server first: one unlucky server explained
    a second step away (two 1.3x steps, bench_multi: the good end's server read 11.6 for a
    true 10, the plateau between the steps 13, and the check saw 12% against the 15% that
    matters). None: every end has two servers or more, or no plausible reading would
    change the answer (a clean range's ends, whose readings agree with their neighbours)."""
    for end in (-1, post.n - 1):
        lone = [s for s in servers if s.index == end]
        if len(lone) != 1:
            continue
        s = lone[0]
        sd = math.sqrt(post.tau ** 2 + post.sigma ** 2 / max(s.n, 1))
        way = (-1 if end == -1 else 1) * prior.direction
        moved = [replace(x, mean=x.mean + way * LONE_SHIFT * sd) if x is s else x
                 for x in servers]
        if 1.0 - posterior(post.n, moved, prior).none >= bar:
            return end
    return None
