"""One model of the whole range (``verdict.strategy = "changepoint"``): the posterior over the
first bad commit from every server measured so far (pure; the search that feeds it is
:mod:`vllm_bisect.bisect.search.changepoint`).

Work in logs. Request r on server s of commit c, under "k is the first bad commit":

    y = mu0 + d * [c >= k] + b * x_c + u_s + e_r     u_s ~ N(0, tau^2), e_r ~ N(0, sigma^2)

``x_c`` is the commit's position in the range (centred), ``b`` a slow drift (only in the
drift models). Each server keeps its sufficient statistics (requests n_s, mean m_s, within
sum of squares W_s; a request far off its server's median is pulled in first, so one slow
request cannot move a server). Given (tau, sigma), m_s ~ N(level, tau^2 + sigma^2 / n_s) and
W_s / sigma^2 ~ chi^2(n_s - 1). The levels are integrated out in closed form (a weighted
linear model: flat priors on mu0 and, through its Gaussian likelihood, on d; then d's prior,
log-uniform on [log smallest change, log 20] in the bad direction, by normal CDFs); (tau, sigma)
on a log grid. Five models share the data:

- ``step``: one step of d at k (the culprit);
- ``two steps``: steps d1 at k and d2 at a later k2, both the bad way (the first bad commit
  is k: a plateau between two regressions is on the bad side, not in doubt); its weight
  ``Prior.two_step``, 0 unless the search sets it;
- ``step+drift``: the same plus a linear drift (a drift + step range still names the step);
- ``none``: no step that matters: one level, or a step the other way (the new end better);
- ``drift``: a drift and no step: a slow change over the range is never named a step.

Hypotheses k between two measured commits have the same likelihood, so the posterior lives
on the intervals between measured commits (prior uniform over commits). All of it costs
O(grid x intervals x servers) numpy work.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
LOG_2PI = math.log(2 * math.pi)
MAX_STEP = math.log(20.0)     # the largest step the prior allows (20x)
STEP_PIECES = 8              # the step prior's log-uniform, as uniform pieces of equal mass
DRIFT_SD = 0.3                # prior sd of a drift's whole change over the range (logs)
WINSOR = 3.0                  # a request further than this many robust sd from its server's
#                               median is pulled in to that distance
TAUS = np.exp(np.linspace(math.log(0.003), math.log(0.4), 12))    # server level (log sd)
SIGMAS = np.exp(np.linspace(math.log(0.003), math.log(0.6), 10))  # per request (log sd)
# the spreads' prior: log-uniform, times a half-normal tail (scale TAU_SCALE, SIGMA_SCALE):
# a server level past ~20% or a request spread past ~40% is possible but not expected
TAU_SCALE, SIGMA_SCALE = 0.05, 0.2


@dataclass(frozen=True)
class Server:
    """One server's samples, summarised: the commit's index in the range (-1: the old end),
    the requests kept, their mean and within sum of squares (logs)."""

    index: int
    n: int
    mean: float
    ss: float


def summarise(index: int, samples: Sequence[float], logs: bool = False) -> Server | None:
    """A server's samples (natural scale, or already ``logs``), one request pulled in when far
    off the others (a median and MAD fence): None when it has none."""
    ys = [float(x) if logs else math.log(x) for x in samples if x > 0 or logs]
    ys = [y for y in ys if math.isfinite(y)]
    if not ys:
        return None
    arr = np.array(ys)
    if len(arr) >= 3:
        med = float(np.median(arr))
        mad = 1.4826 * float(np.median(np.abs(arr - med)))
        if mad > 0:
            arr = np.clip(arr, med - WINSOR * mad, med + WINSOR * mad)
    mean = float(arr.mean())
    return Server(index, len(arr), mean, float(((arr - mean) ** 2).sum()))


@dataclass(frozen=True)
class Prior:
    """``direction``: +1 when the new end's samples are larger (ITL, TTFT in a regression
    search), -1 when smaller (throughput); ``min_step``: log of the smallest change that
    matters; ``per_request``: several samples per server (else one, no request level);
    the models' prior weights."""

    direction: int
    min_step: float
    per_request: bool = True
    step: float = 0.48
    step_drift: float = 0.02
    none: float = 0.48
    drift: float = 0.02
    two_step: float = 0.0   # two steps the bad way: the first of them is the first bad commit


@dataclass(frozen=True)
class Posterior:
    """The state of the search: P(first bad = k) for k in 0..n-1 (``k``, under the step
    models), P(no step that matters) (``none``) and P(a drift, no step) (``drift``); the
    measured commits that bound its intervals; the spreads and levels, for what comes next."""

    n: int
    bounds: tuple[int, ...]          # measured commit indices, sorted (-1 first, n - 1 last)
    interval: Array                  # P(k in (bounds[j], bounds[j + 1]]), j = 0..J-1
    none: float
    drift: float
    tau: float                       # posterior mean of the server level's sd (logs)
    sigma: float                     # ... and of the per-request sd
    effect: float                    # the step (logs) under the most likely interval
    effect_sd: float
    servers: int = 0
    by_commit: dict[int, int] = field(default_factory=dict)   # servers per measured commit
    # a symptom a server shows or not (verdict/changepoint_rate.py): the new side's rate q,
    # its 95% interval, and the old side's false-alarm rate (effect is then q, not a step)
    rate: tuple[float, float, float, float] | None = None

    @property
    def step(self) -> float:
        """P(a step that matters, somewhere)."""
        return float(self.interval.sum())

    def size(self, j: int) -> int:
        return self.bounds[j + 1] - self.bounds[j]

    def per_commit(self) -> Array:
        """P(first bad = k) for every k in 0..n-1."""
        sizes = np.diff(np.array(self.bounds))
        return np.repeat(self.interval / sizes, sizes)

    def p_bad(self, c: int) -> float:
        """P(commit c is on the new side) = P(k <= c), given a step (the step models)."""
        if c < 0:
            return 0.0
        return float(self.per_commit()[:c + 1].sum()) / max(self.step, 1e-300)

    def steps_left(self) -> int:
        """About how many more splits the likeliest interval needs (a progress line's
        estimate: log2 of its size)."""
        j, _ = self.top()
        return math.ceil(math.log2(self.size(j))) if self.size(j) > 1 else 0

    def top(self) -> tuple[int, float]:
        """The interval holding the most probability, and that probability."""
        j = int(np.argmax(self.interval))
        return j, float(self.interval[j])

    def effect_interval(self, z: float = 1.96) -> tuple[float, float, float]:
        """The step as a factor (new / old, in the symptom's own units) and its ~95%
        interval, under the most likely interval (a rate's model: the new side's rate q and
        its interval)."""
        if self.rate is not None:
            return self.rate[:3]
        return (math.exp(self.effect), math.exp(self.effect - z * self.effect_sd),
                math.exp(self.effect + z * self.effect_sd))


def _logsumexp(a: Array, axis: int | None = None) -> Array:
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    res: Array = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return res


def _fit(design: Array, w: Array, m: Array, prior_prec: Array) -> tuple[Array, Array, Array]:
    """Weighted linear fits for every grid point and design: ``design`` (J, S, p), weights
    ``w`` (G, S), server means ``m`` (S,), a diagonal prior precision per coefficient (p,).
    Returns, each (G, J): log|A| (A = X'WX + prior), the quadratic form m'Wm - b'A^-1 b, and
    (G, J, 2): the second coefficient (the step; the first when p = 1) and its variance."""
    xw = w[:, None, :, None] * design[None]                   # (G, J, S, p)
    a = np.einsum("gjsp,jsq->gjpq", xw, design) + np.diag(prior_prec)
    b = np.einsum("gjsp,s->gjp", xw, m)
    sign, logdet = np.linalg.slogdet(a)
    cov = np.linalg.inv(a)
    beta = np.einsum("gjpq,gjq->gjp", cov, b)
    quad = (w @ (m * m))[:, None] - np.einsum("gjp,gjp->gj", b, beta)
    k = 1 if beta.shape[-1] > 1 else 0
    est = np.stack([beta[..., k], cov[..., k, k]], axis=-1)
    return np.where(sign > 0, logdet, np.inf), quad, est


def _step_prior(d: Array, var: Array, prior: Prior) -> Array:
    """log E[p(d)] for d ~ N(d_hat, var): d's prior log-uniform on [min_step, MAX_STEP] in
    the bad direction (as likely 1.05x-1.1x as 2x-4x), as ``STEP_PIECES`` uniform pieces of
    equal mass (each a difference of normal CDFs)."""
    from scipy.special import ndtr as norm_cdf  # (lazily: the CLI starts without scipy)

    sd = np.sqrt(np.maximum(var, 1e-18))
    lo, hi = max(prior.min_step, 1e-3), MAX_STEP
    x = prior.direction * d
    edges = np.exp(np.linspace(math.log(lo), math.log(hi), STEP_PIECES + 1))
    total = np.zeros_like(x)
    for a, b in itertools.pairwise(edges):
        total = total + (norm_cdf((b - x) / sd) - norm_cdf((a - x) / sd)) / (b - a)
    res: Array = np.log(np.maximum(total / STEP_PIECES, 1e-300))
    return res


@dataclass(frozen=True)
class _Grid:
    """The (tau, sigma) grid with each point's log prior plus the data terms that are the
    same under every model (each server's Gaussian normaliser, the within-server spread),
    and the servers' weights ``w`` (G, S) at each point."""

    tau: Array
    sigma: Array
    base: Array
    w: Array


def _grid(servers: Sequence[Server], per_request: bool) -> _Grid:
    ns = np.array([s.n for s in servers], dtype=float)
    ss = np.array([s.ss for s in servers])
    taus, sigmas = (TAUS, SIGMAS) if per_request else (TAUS, np.array([1e-6]))
    mesh = np.meshgrid(taus, sigmas, indexing="ij")
    tg, sg = mesh[0].ravel(), mesh[1].ravel()        # (G,)
    v = tg[:, None] ** 2 + sg[:, None] ** 2 / ns[None, :]       # (G, S)
    base = -0.5 * np.log(2 * np.pi * v).sum(axis=1)            # (G,)
    if per_request:   # the within-server spread learns sigma (the same under every k)
        dof = np.maximum(ns - 1, 0)
        base = base + (-0.5 * dof[None, :] * (LOG_2PI + 2 * np.log(sg[:, None]))
                       - ss[None, :] / (2 * sg[:, None] ** 2)).sum(axis=1)
    grid_prior = -0.5 * (tg / TAU_SCALE) ** 2 - 0.5 * (sg / SIGMA_SCALE) ** 2
    return _Grid(tg, sg, base + grid_prior - float(_logsumexp(grid_prior)), 1.0 / v)


def _models(g: _Grid, side: Array, x: Array, m: Array, prior: Prior
            ) -> tuple[Array, Array, Array, Array, Array, Array]:
    """Each model's log marginal likelihood: step (G, J), step + drift (G, J), none (G,), a
    step the other way (G, J), drift (G,), and the step model's (step, its variance) per
    (G, J)."""
    ones = np.ones_like(side)
    xs = np.broadcast_to(x, side.shape)
    prec_b = 1.0 / DRIFT_SD ** 2
    b = g.base[:, None]
    ld, q, est = _fit(np.stack([ones, side], -1), g.w, m, np.zeros(2))       # [1, side]
    fit = b + LOG_2PI - 0.5 * ld - 0.5 * q
    step = fit + _step_prior(est[..., 0], est[..., 1], prior)
    # a step the other way (the new end better): "no regression", with the flat level
    other = replace(prior, direction=-prior.direction)
    better = fit + _step_prior(est[..., 0], est[..., 1], other)
    # [1, side, x], the drift's slope ~ N(0, DRIFT_SD^2)
    ld2, q2, est2 = _fit(np.stack([ones, side, xs], -1), g.w, m, np.array([0.0, 0.0, prec_b]))
    step_drift = (b + LOG_2PI + 0.5 * math.log(prec_b) - 0.5 * ld2 - 0.5 * q2
                  + _step_prior(est2[..., 0], est2[..., 1], prior))
    ld0, q0, _ = _fit(np.ones((1, len(m), 1)), g.w, m, np.zeros(1))          # [1]
    none = g.base + 0.5 * LOG_2PI - 0.5 * ld0[:, 0] - 0.5 * q0[:, 0]
    ld1, q1, _ = _fit(np.stack([np.ones(len(m)), x], -1)[None], g.w, m,      # [1, x]
                      np.array([0.0, prec_b]))
    drift = (g.base + 0.5 * LOG_2PI + 0.5 * math.log(prec_b) - 0.5 * ld1[:, 0]
             - 0.5 * q1[:, 0])
    return step, step_drift, none, better, drift, est


def _two_steps(g: _Grid, side: Array, bounds: tuple[int, ...], m: Array, prior: Prior
               ) -> tuple[Array, Array, NDArray[np.intp]]:
    """Two steps the bad way, the first in interval j1, the second in a later one j2: each
    pair's log marginal likelihood (G, P) with both steps' priors (each step's own posterior
    marginal, as if independent), the pairs' log prior (P,) and each pair's j1 (P,).

    The design [1, side(j1), side(j2)] has nested sides, so X'WX and X'Wm are sums of the
    weights (and weighted means) of the servers at or after each interval's right end: the
    pairs cost O(grid x pairs), not O(grid x pairs x servers)."""
    a_idx, b_idx = np.triu_indices(side.shape[0], k=1)
    wsuf, wmsuf = g.w @ side.T, (g.w * m[None, :]) @ side.T     # (G, J)
    wt, wmt = g.w.sum(axis=1), g.w @ m                          # (G,)
    w1, w2 = wsuf[:, a_idx], wsuf[:, b_idx]                     # (G, P)
    a = np.empty((*w1.shape, 3, 3))
    a[..., 0, 0] = wt[:, None]
    a[..., 0, 1] = a[..., 1, 0] = a[..., 1, 1] = w1
    a[..., 0, 2] = a[..., 2, 0] = a[..., 1, 2] = a[..., 2, 1] = a[..., 2, 2] = w2
    b = np.stack([np.broadcast_to(wmt[:, None], w1.shape), wmsuf[:, a_idx], wmsuf[:, b_idx]],
                 -1)
    sign, ld = np.linalg.slogdet(a)
    cov = np.linalg.inv(a)
    beta = np.einsum("gpij,gpj->gpi", cov, b)
    quad = (g.w @ (m * m))[:, None] - np.einsum("gpi,gpi->gp", b, beta)
    var = np.diagonal(cov, axis1=-2, axis2=-1)
    ld = np.where(sign > 0, ld, np.inf)
    lik = g.base[:, None] + 1.5 * LOG_2PI - 0.5 * ld - 0.5 * quad
    lik = (lik + _step_prior(beta[..., 1], var[..., 1], prior)
           + _step_prior(beta[..., 2], var[..., 2], prior))
    sizes = np.diff(np.array(bounds)).astype(float)
    n = bounds[-1] + 1
    log_pair = np.log(sizes[a_idx] * sizes[b_idx] / max(n * (n - 1) / 2, 1.0))
    return lik, log_pair, a_idx


def posterior(n: int, servers: Sequence[Server], prior: Prior) -> Posterior:
    """The posterior over the first bad commit among ``n`` (indices 0..n-1, the last the new
    end; -1 the old end, always on the old side) from ``servers``. Needs a server on each
    end (the search measures them first)."""
    if not {-1, n - 1} <= {s.index for s in servers}:
        raise ValueError("the model needs a server on each end of the range")
    idx = np.array([s.index for s in servers])
    bounds = tuple(sorted({-1, n - 1} | {int(i) for i in idx}))
    g = _grid(servers, prior.per_request)
    right = np.array(bounds[1:])                     # interval j: k in (bounds[j], bounds[j+1]]
    side = (idx[None, :] >= right[:, None]).astype(float)      # (J, S): on the new side
    x = (idx + 1) / max(n, 1) - 0.5                  # position in the range, centred
    means = np.array([s.mean for s in servers])
    step, step_drift, flat, better, drift, est = _models(g, side, x, means, prior)
    log_k = np.log(np.diff(np.array(bounds)) / n)[None, :]
    j_step = step + log_k + math.log(prior.step)
    j_sd = step_drift + log_k + math.log(prior.step_drift)
    # "no step that matters": one level, or a step the other way (half the weight each)
    j_none = np.logaddexp(flat, _logsumexp(better + log_k, axis=1)) + math.log(prior.none / 2)
    j_drift = drift + math.log(prior.drift)
    parts = [j_step.ravel(), j_sd.ravel(), j_none, j_drift]
    two: tuple[Array, NDArray[np.intp]] | None = None
    if prior.two_step > 0 and len(bounds) >= 3:
        lik2, log_pair, j1 = _two_steps(g, side, bounds, means, prior)
        two = (lik2 + log_pair[None, :] + math.log(prior.two_step), j1)
        parts.append(two[0].ravel())
    total = _logsumexp(np.concatenate(parts))
    per_interval = np.exp(_logsumexp(np.stack([j_step, j_sd]), axis=0) - total)   # (G, J)
    if two is not None:   # under two steps the first bad commit is the first step's
        onehot = (two[1][:, None] == np.arange(per_interval.shape[1])[None, :]).astype(float)
        per_interval = per_interval + np.exp(two[0] - total) @ onehot
    interval = per_interval.sum(axis=0)
    grid_w = per_interval.sum(axis=1) + np.exp(j_none - total) + np.exp(j_drift - total)
    grid_w = grid_w / grid_w.sum()
    jt = int(np.argmax(interval))
    gw_top = per_interval[:, jt] / max(per_interval[:, jt].sum(), 1e-300)
    d_hat, d_var = est[:, jt, 0], est[:, jt, 1]
    eff = float((gw_top * d_hat).sum())
    eff_var = float((gw_top * (d_var + (d_hat - eff) ** 2)).sum())
    counts = {int(i): int((idx == i).sum()) for i in set(idx.tolist())}
    return Posterior(n=n, bounds=bounds, interval=interval,
                     none=float(np.exp(_logsumexp(j_none) - total)),
                     drift=float(np.exp(_logsumexp(j_drift) - total)),
                     tau=float((grid_w * g.tau).sum()), sigma=float((grid_w * g.sigma).sum()),
                     effect=eff,
                     effect_sd=math.sqrt(max(eff_var, 0.0)), servers=len(servers),
                     by_commit=counts)


def requests_for_step(samples: Sequence[float], min_step: float, least: int, most: int) -> int:
    """A server with no model yet (an end of the range, measured first): as many requests as
    its own spread needs for its mean to be within half the smallest step that matters
    (standard error <= min_step / 2), judged from the requests it ran so far (>= 3)."""
    ys = [math.log(x) for x in samples if x > 0]
    if len(ys) < 3:
        return max(least, 3)
    sd = float(np.std(ys, ddof=1))
    need = math.ceil((sd / max(min_step / 2, 1e-6)) ** 2)
    return max(least, 3, min(most, need))


def requests_per_server(post: Posterior, server_cost: float, least: int, most: int) -> int:
    """How many requests a server should run: the classic two-stage optimum
    ``(sigma / tau) * sqrt(start cost / request cost)``, within [least, most].

    (A cap at what a quarter of the step needs was dropped: early in a run it read a step
    over-estimated and a server level under-estimated from two or three servers, and gave
    servers of 3 requests whose noise then cost more servers: on the H100-like row, 15.5 ->
    13.9 mean starts, docs/benchmarks.md.)"""
    if post.tau <= 0:
        return most
    best = (post.sigma / post.tau) * math.sqrt(server_cost)
    return max(least, min(most, math.ceil(best)))
