"""What the model of the range measures next on k workers at once (pure): a batch of up to
k measurements, one server each, on distinct commits.

The batch is the one-worker rule (:func:`~vllm_bisect.verdict.changepoint_next.choose`)
widened greedily with the posterior's own quantities: every measured commit whose side is
in doubt past choose's bar gets a server (most doubtful per server first, each where its
doubt is settled: :func:`~vllm_bisect.verdict.changepoint_next.anchor`, the weaker side's
sure commit when the commit already has as many servers as that side), then, while the
search still narrows, the workers left split the posterior: the unmeasured commits at its
equal-probability quantiles (P(first bad <= c) = j / (m + 1) for m splits: multisection
under the posterior; on a flat posterior the plain (m + 1)-section of
:mod:`~vllm_bisect.bisect.search.multisection`). A split that leaves less than
``SPLIT_MIN`` of the step's probability on a side, or that separates less than that from
the previous split, tells almost nothing and is left out: fewer servers than workers when
few are useful (the final pair gets a server per doubtful end, not k). On one worker the
batch is exactly ``[choose(...)]``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from vllm_bisect.verdict.changepoint import Posterior
from vllm_bisect.verdict.changepoint_next import Choice, anchor, choose, doubt, in_doubt

SPLIT_MIN = 0.02   # a split's least probability of the step on either side, and between two


def quantile_splits(post: Posterior, usable: Sequence[int], taken: Collection[int],
                    count: int) -> list[int]:
    """Up to ``count`` unmeasured usable commits (not in ``taken``, not an end) nearest the
    posterior's ``count`` equal-probability quantiles of the first bad commit, sorted."""
    if count <= 0:
        return []
    pk = post.per_commit()
    total = float(pk.sum())
    if total <= 0:
        return []
    cum = pk.cumsum() / total     # cum[c] = P(first bad <= c) = P(c is on the new side)
    free = [c for c in usable if c not in taken and 0 <= c < post.n - 1]
    picks: set[int] = set()
    for j in range(1, count + 1):
        left = [c for c in free if c not in picks]
        if not left:
            break
        target = j / (count + 1)
        picks.add(min(left, key=lambda c: (abs(float(cum[c]) - target), c)))
    out: list[int] = []
    for c in sorted(picks):
        p = float(cum[c])
        if min(p, 1.0 - p) < SPLIT_MIN:
            continue
        if out and p - float(cum[out[-1]]) < SPLIT_MIN:
            continue
        out.append(c)
    return out


def choose_batch(post: Posterior, usable: Sequence[int], requests: int, confidence: float,
                 workers: int, per_commit_limit: int = 12) -> list[Choice]:
    """Up to ``workers`` measurements to run at once (empty: nothing measurable would tell
    more); arguments as :func:`~vllm_bisect.verdict.changepoint_next.choose`'s."""
    first = choose(post, usable, requests, confidence, per_commit_limit)
    if first is None or workers <= 1:
        return [] if first is None else [first]
    usable_set = set(usable) | {-1, post.n - 1}
    final, _, doubtful = in_doubt(post, usable, confidence, per_commit_limit)
    picks = [] if first.new else [first]
    for c in doubtful:   # (empty when choose split: it measures a doubtful commit first)
        if len(picks) >= workers:
            break
        at = anchor(post, c, usable_set)
        if all(at != p.index for p in picks):
            picks.append(Choice(at, requests, False, doubt(post, c, final)))
    if not final:
        taken = set(post.by_commit) | {p.index for p in picks}
        picks += [Choice(c, requests, True, 1.0)
                  for c in quantile_splits(post, usable, taken, workers - len(picks))]
    return picks or [first]
