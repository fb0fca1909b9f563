"""Bayesian search for flaky symptoms (pure: no I/O).

For a symptom that shows in some runs only (a crash, a cap that hits some requests), one run
of a bad commit may look good. The culprit ``c`` is one of commit indices ``0..n-1`` (the
first bad one); a run of commit ``i`` shows the symptom with probability ``q`` when ``i >= c``
(the flake rate of bad commits, estimated on the bad endpoint) and ``eps`` when ``i < c``
(false alarms, estimated on the good endpoint). Every run updates the posterior over ``c``;
the next commit is the one whose run has the largest expected information gain (entropy
drop), and a commit may be run again. The search stops when one commit holds ``confidence``
of the posterior. Skipped commits are never run, but stay candidates.

Entropies are computed with prefix sums, so choosing a commit costs O(n).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FlakeModel:
    q: float     # P(symptom seen | commit is bad)
    eps: float   # P(symptom seen | commit is good)

    @staticmethod
    def estimate(bad_seen: int, bad_runs: int, good_seen: int, good_runs: int) -> FlakeModel:
        """Beta posteriors: q ~ Beta(1 + seen, 1 + unseen) at the bad endpoint; eps with a
        prior that expects rare false alarms (Beta(0.5, 20)) at the good endpoint."""
        q = (bad_seen + 1) / (bad_runs + 2)
        eps = (good_seen + 0.5) / (good_runs + 20.5)
        return FlakeModel(q=min(q, 0.995), eps=min(eps, q / 2))


def posterior(n: int, runs: Mapping[int, Sequence[bool]], model: FlakeModel) -> list[float]:
    """P(culprit = c) for c in 0..n-1 given runs[i] = [symptom seen?, ...] (uniform prior)."""
    lq, l1q = math.log(model.q), math.log1p(-model.q)
    le, l1e = math.log(model.eps), math.log1p(-model.eps)
    # log-likelihood of c: runs at i >= c use (q), runs at i < c use (eps)
    bad_part = [0.0] * (n + 1)   # sum over runs at i >= c, as a suffix over c
    good_part = [0.0] * (n + 1)  # sum over runs at i < c, as a prefix over c
    at = [0.0] * (n + 1)
    at_good = [0.0] * (n + 1)
    for i, seen in runs.items():
        k = sum(1 for s in seen if s)
        m = len(seen) - k
        if i < 0:
            continue  # the good endpoint is below every candidate: informs eps only
        j = min(i, n - 1)
        at[j] += k * lq + m * l1q
        at_good[j] += k * le + m * l1e
    acc = 0.0
    for c in range(n - 1, -1, -1):
        acc += at[c]
        bad_part[c] = acc
    acc = 0.0
    for c in range(n):
        good_part[c] = acc
        acc += at_good[c]
    logs = [bad_part[c] + good_part[c] for c in range(n)]
    top = max(logs)
    w = [math.exp(x - top) for x in logs]
    z = sum(w)
    return [x / z for x in w]


def _h(p: float) -> float:
    return -p * math.log(p) if p > 0 else 0.0


def info_gain(post: Sequence[float], model: FlakeModel) -> list[float]:
    """Expected entropy drop of one run at each commit index i (0..n-1)."""
    n = len(post)
    q, e = model.q, model.eps
    pre_p, pre_plogp = [0.0], [0.0]
    for p in post:
        pre_p.append(pre_p[-1] + p)
        pre_plogp.append(pre_plogp[-1] + (p * math.log(p) if p > 0 else 0.0))
    h0 = -pre_plogp[-1]
    gains = []
    for i in range(n):
        s = pre_p[i + 1]                 # P(c <= i): the run is of a bad commit
        a, b = pre_plogp[i + 1], pre_plogp[-1] - pre_plogp[i + 1]
        h_after = 0.0
        for lb, lg in ((q, e), (1 - q, 1 - e)):  # symptom seen, not seen
            z = lb * s + lg * (1 - s)
            if z <= 0:
                continue
            # entropy of p(c) * L(c) / z, with L = lb for c <= i and lg above
            ent = -(lb * (a + s * math.log(lb)) + lg * (b + (1 - s) * math.log(lg))) / z \
                + math.log(z)
            h_after += z * ent
        gains.append(h0 - h_after)
    return gains


def next_commit(post: Sequence[float], model: FlakeModel, skipped: Collection[int]) -> int | None:
    """The runnable commit with the largest expected information gain (ties: the lower)."""
    best, gain = None, 0.0
    for i, g in enumerate(info_gain(post, model)):
        if i in skipped:
            continue
        if g > gain + 1e-12:
            best, gain = i, g
    return best


def decided(post: Sequence[float], confidence: float) -> int | None:
    top = max(range(len(post)), key=lambda c: post[c])
    return top if post[top] >= confidence else None


def credible_set(post: Sequence[float], mass: float = 0.99) -> list[int]:
    """The fewest commits that together hold ``mass`` of the posterior."""
    order = sorted(range(len(post)), key=lambda c: -post[c])
    out, acc = [], 0.0
    for c in order:
        out.append(c)
        acc += post[c]
        if acc >= mass:
            break
    return sorted(out)


@dataclass(frozen=True)
class FlakePrior:
    """Beta priors of the flake rates, integrated out of the posterior (``marginal``):
    ``q`` ~ Beta(q_a, q_b) at bad commits, ``eps`` ~ Beta(e_a, e_b) at good ones (rare false
    alarms)."""

    q_a: float = 1.0
    q_b: float = 1.0
    e_a: float = 0.5
    e_b: float = 20.0


def _log_beta_ratio(a: float, b: float, k: float, m: float) -> float:
    """log B(a + k, b + m) / B(a, b): the marginal likelihood of k seen, m unseen."""
    return (math.lgamma(a + k) + math.lgamma(b + m) - math.lgamma(a + b + k + m)
            - math.lgamma(a) - math.lgamma(b) + math.lgamma(a + b))


def marginal(n: int, runs: Mapping[int, Sequence[bool]], prior: FlakePrior | None = None,
             ) -> tuple[list[float], FlakeModel]:
    """P(culprit = c) with q and eps integrated out (no point estimate to be wrong about:
    four endpoint runs say little of q), and the flake rates' posterior means (for choosing
    the next run). Runs at index -1 (the good endpoint) are below every candidate."""
    p = prior or FlakePrior()
    seen, unseen = [0] * (n + 1), [0] * (n + 1)  # at index i + 1 (0: the good endpoint)
    for i, s in runs.items():
        j = min(max(i, -1), n - 1) + 1
        k = sum(1 for x in s if x)
        seen[j] += k
        unseen[j] += len(s) - k
    tot_k, tot_m = sum(seen), sum(unseen)
    logs, qs, es = [], [], []
    below_k = below_m = 0  # runs at indices < c (the good endpoint included)
    for c in range(n):
        below_k += seen[c]
        below_m += unseen[c]
        up_k, up_m = tot_k - below_k, tot_m - below_m
        logs.append(_log_beta_ratio(p.q_a, p.q_b, up_k, up_m)
                    + _log_beta_ratio(p.e_a, p.e_b, below_k, below_m))
        qs.append((p.q_a + up_k) / (p.q_a + p.q_b + up_k + up_m))
        es.append((p.e_a + below_k) / (p.e_a + p.e_b + below_k + below_m))
    top = max(logs)
    w = [math.exp(x - top) for x in logs]
    z = sum(w)
    post = [x / z for x in w]
    q = min(0.995, sum(pc * x for pc, x in zip(post, qs, strict=True)))
    eps = min(sum(pc * x for pc, x in zip(post, es, strict=True)), q / 2)
    return post, FlakeModel(q=q, eps=eps)
