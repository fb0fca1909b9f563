"""The model of the range for a symptom a server shows or not (a length cap, wrong output):
the same posterior over the first bad commit as :mod:`vllm_bisect.verdict.changepoint`, from
one bit per server instead of samples (pure).

Under "commit k is the first bad", a server of a commit before k shows the symptom with a
small false-alarm rate ``eps`` (Beta(0.5, 20): rare, learned from the old side), a server of
a commit from k on with rate ``q``: either **deterministic** (q = 1: every server shows it)
or **flaky** (q ~ Beta(1, 1): some servers do), half the prior each, both integrated out in
closed form (Beta functions). "No step": one rate ``r`` for every commit (Beta(0.5, 2)). No
drift model (a rate that creeps along the range is not a cap). The posterior lives on the
intervals between measured commits, as the continuous model's does, so the search, its
chooser and the hook use it unchanged.

A server is ``Server(index, n=1, mean=1.0 if it showed the symptom else 0.0, ss=0)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vllm_bisect.spec import Symptom
from vllm_bisect.verdict.changepoint import Posterior, Server

# the symptoms a server shows or not (judged by the thresholds: a cap, wrong output)
RATE_SYMPTOMS = frozenset(s for s in Symptom if s.info.one_bit)

EPS_PRIOR = (0.5, 20.0)     # the old side's false alarms: rare
FLAKY_PRIOR = (1.0, 1.0)    # the new side's rate when flaky: anything
NONE_PRIOR = (0.5, 2.0)     # one rate everywhere ("no step")


@dataclass(frozen=True)
class RatePrior:
    """``deterministic``: P(q = 1) given a step; ``step`` / ``none``: the models' weights."""

    deterministic: float = 0.5
    step: float = 0.5
    none: float = 0.5


def _lb(a: float | np.ndarray, b: float | np.ndarray) -> np.ndarray:
    from scipy.special import betaln  # (lazily: the CLI starts without scipy)

    return np.asarray(betaln(a, b), dtype=float)


def _rate_summary(seen: float, unseen: float, w_det: float) -> tuple[float, float, float]:
    """E[q] and its 95% interval under the top interval: a point mass at 1 (weight
    ``w_det``) and Beta(1 + seen, 1 + unseen)."""
    from scipy.special import betainc  # Beta's cdf (scipy.stats costs 0.4-0.9 s to load)

    a, b = FLAKY_PRIOR[0] + seen, FLAKY_PRIOR[1] + unseen
    mean = w_det + (1 - w_det) * a / (a + b)
    grid = np.linspace(0.0, 1.0, 2001)
    cdf = (1 - w_det) * betainc(a, b, grid)
    cdf[-1] = 1.0
    lo = float(grid[np.searchsorted(cdf, 0.025)])
    hi = float(grid[min(int(np.searchsorted(cdf, 0.975)), len(grid) - 1)])
    return float(mean), lo, hi


def rate_posterior(n: int, servers: Sequence[Server], prior: RatePrior | None = None
                   ) -> Posterior:
    """The posterior over the first bad commit among ``n`` (see the module doc). Needs a
    server on each end of the range (the search measures them first)."""
    prior = prior or RatePrior()
    if not {-1, n - 1} <= {s.index for s in servers}:
        raise ValueError("the model needs a server on each end of the range")
    idx = np.array([s.index for s in servers])
    hit = np.array([1.0 if s.mean >= 0.5 else 0.0 for s in servers])
    bounds = tuple(sorted({-1, n - 1} | {int(i) for i in idx}))
    right = np.array(bounds[1:])
    after = idx[None, :] >= right[:, None]                      # (J, S): on the new side
    s_a = (after * hit).sum(axis=1)
    u_a = (after * (1 - hit)).sum(axis=1)
    s_b, u_b = hit.sum() - s_a, (1 - hit).sum() - u_a
    before = _lb(EPS_PRIOR[0] + s_b, EPS_PRIOR[1] + u_b) - _lb(*EPS_PRIOR)
    det = np.where(u_a == 0, 0.0, -np.inf)
    flaky = _lb(FLAKY_PRIOR[0] + s_a, FLAKY_PRIOR[1] + u_a) - _lb(*FLAKY_PRIOR)
    w = prior.deterministic
    with np.errstate(divide="ignore"):
        after_l = np.logaddexp(math.log(w) + det, math.log1p(-w) + flaky)
    log_k = np.log(np.diff(np.array(bounds)) / n)
    j_step = before + after_l + log_k + math.log(prior.step)
    total_hit = float(hit.sum())
    j_none = float(_lb(NONE_PRIOR[0] + total_hit, NONE_PRIOR[1] + len(hit) - total_hit)
                   - _lb(*NONE_PRIOR)) + math.log(prior.none)
    top = max(float(j_step.max()), j_none)
    p_step = np.exp(j_step - top)
    p_none = math.exp(j_none - top)
    z = float(p_step.sum()) + p_none
    interval = p_step / z
    jt = int(np.argmax(interval))
    with np.errstate(divide="ignore"):
        det_top = math.log(w) + float(det[jt])
        w_det = math.exp(det_top - float(after_l[jt])) if np.isfinite(det_top) else 0.0
    q, lo, hi = _rate_summary(float(s_a[jt]), float(u_a[jt]), w_det)
    counts = {int(i): int((idx == i).sum()) for i in set(idx.tolist())}
    eps = (EPS_PRIOR[0] + float(s_b[jt])) / (sum(EPS_PRIOR) + float(s_b[jt] + u_b[jt]))
    return Posterior(n=n, bounds=bounds, interval=interval, none=p_none / z, drift=0.0,
                     tau=0.0, sigma=0.0, effect=q, effect_sd=0.0, servers=len(servers),
                     by_commit=counts, rate=(q, lo, hi, eps))
