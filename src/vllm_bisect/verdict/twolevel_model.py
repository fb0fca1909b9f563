"""The two-level noise model: a server level plus per-request noise, fitted to the
endpoints' (and judged commits') servers (pure statistics; the per-commit decision and
the calibration over it: :mod:`vllm_bisect.verdict.twolevel`).

On the log scale (log ITL, log tok/s) request j on server s of a commit measures

    y_sj = mu + b_s + e_sj,   b_s ~ N(0, tau^2) (this server start's level),
                              e_sj ~ N(0, sigma^2) (this request's noise).

Requests on one server shrink sigma^2 / n_s but never tau^2: only fresh servers do. A
commit is "like good" (mu = mu_good) or "like bad" (mu = mu_bad).

Both variance components are unknown. They live on a grid (sigma x tau, tau = 0 included,
log-uniform priors up to ``SIGMA_MAX`` / ``TAU_MAX``); their posterior comes from every
server's samples seen so far (the endpoints, then the judged commits on their side): the
within-server spread gives sigma, the spread of server means around their side's mean gives
tau (the side means are integrated out, flat priors). A commit's evidence is the Bayes factor
bad : good of its server means, each side's mean known to within its posterior variance
(a multivariate normal per grid point, mixed over the posterior): few servers behind an
estimate temper the evidence instead of making the test overconfident, and one server
start whose level happens to sit between the endpoints cannot decide alone when tau is
large.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

SIGMA_MAX = 0.5      # per-request CV up to ~50%
TAU_MAX = 0.3        # server-level CV up to ~30%
_SIGMAS = np.geomspace(0.002, SIGMA_MAX, 26)
_TAUS = np.concatenate(([0.0], np.geomspace(0.002, TAU_MAX, 20)))
_S2 = (np.repeat(_SIGMAS, len(_TAUS)) ** 2)
_T2 = (np.tile(_TAUS, len(_SIGMAS)) ** 2)
_PRIOR = np.full(_S2.shape, -math.log(_S2.size))

Group = tuple[float, ...]     # one server's samples, log scale
Arr = NDArray[np.float64]


def to_logs(xs: Sequence[float]) -> Group:
    return tuple(math.log(max(float(x), 1e-12)) for x in xs)


def _within(groups: Sequence[Group]) -> Arr:
    """log-likelihood of the within-server deviations per grid point (any sigma)."""
    ss = sum(sum((y - sum(g) / len(g)) ** 2 for y in g) for g in groups if g)
    df = sum(len(g) - 1 for g in groups if g)
    out: Arr = -0.5 * df * np.log(_S2) - ss / (2 * _S2)
    return out


def _side(groups: Sequence[Group]) -> tuple[Arr, Arr, Arr]:
    """(log-likelihood of the server means with the side's mean integrated out, the side
    mean's posterior location, its posterior variance) per grid point."""
    gs = [g for g in groups if g]
    means = np.array([sum(g) / len(g) for g in gs])
    ns = np.array([len(g) for g in gs], dtype=float)
    v = _T2[:, None] + _S2[:, None] / ns[None, :]
    w = 1.0 / v
    sw = w.sum(axis=1)
    m = (w * means[None, :]).sum(axis=1) / sw
    ll = (-0.5 * np.log(v).sum(axis=1) - 0.5 * np.log(sw)
          - 0.5 * (w * (means[None, :] - m[:, None]) ** 2).sum(axis=1))
    return ll, m, 1.0 / sw


def _predictive(groups: Sequence[Group], m: Arr, p: Arr) -> Arr:
    """log density (per grid point) of a commit's server means under N(m 1, D + p J)."""
    gs = [g for g in groups if g]
    means = np.array([sum(g) / len(g) for g in gs])
    ns = np.array([len(g) for g in gs], dtype=float)
    v = _T2[:, None] + _S2[:, None] / ns[None, :]
    w = 1.0 / v
    z = means[None, :] - m[:, None]
    sw = w.sum(axis=1)
    szw = (z * w).sum(axis=1)
    q = (z * z * w).sum(axis=1) - p * szw ** 2 / (1.0 + p * sw)
    out: Arr = -0.5 * np.log(v).sum(axis=1) - 0.5 * np.log1p(p * sw) - 0.5 * q
    return out


def _lse(x: Arr) -> float:
    """log(sum(exp(x))) (numpy: scipy's logsumexp costs ~100x more on 546 points)."""
    m = float(x.max())
    return m + math.log(float(np.exp(x - m).sum()))


@dataclass(frozen=True)
class TwoLevel:
    """The fitted model: the endpoints' (and judged commits') servers on each side."""

    good: tuple[Group, ...]
    bad: tuple[Group, ...]

    def __post_init__(self) -> None:
        if not any(self.good) or not any(self.bad):
            raise ValueError("the two-level model needs at least one sample on each side")

    @cached_property
    def _fit(self) -> tuple[Arr, Arr, Arr, Arr, Arr]:
        llg, mg, pg = _side(self.good)
        llb, mb, pb = _side(self.bad)
        lw = _PRIOR + _within(self.good + self.bad) + llg + llb
        lw = lw - _lse(lw)
        return lw, mg, pg, mb, pb

    @property
    def servers(self) -> tuple[int, int]:
        return sum(1 for g in self.good if g), sum(1 for g in self.bad if g)

    @cached_property
    def _components(self) -> tuple[float, float]:
        w = np.exp(self._fit[0])
        return float((w * _S2).sum()), float((w * _T2).sum())

    def components(self) -> tuple[float, float]:
        """Posterior mean (sigma^2, tau^2): per-request and server-level variance."""
        return self._components

    def means(self) -> tuple[float, float]:
        """Posterior mean of the good and the bad side's mean (log scale)."""
        lw, mg, _, mb, _ = self._fit
        w = np.exp(lw)
        return float((w * mg).sum()), float((w * mb).sum())

    def prob_effect_above(self, t: float, direction: int = 1) -> float:
        """P(direction * (mu_bad - mu_good) > t) under the posterior."""
        from scipy import special  # here, not at import: the hook and CLI start faster

        lw, mg, pg, mb, pb = self._fit
        z = (direction * (mb - mg) - t) / np.sqrt(pg + pb)
        return float((np.exp(lw) * special.ndtr(z)).sum())

    def log_bf(self, groups: Sequence[Group]) -> float:
        """log p(commit's servers | like bad) - log p(... | like good)."""
        gs = [g for g in groups if g]
        if not gs:
            return 0.0
        lw, mg, pg, mb, pb = self._fit
        base = lw + _within(gs)
        return _lse(base + _predictive(gs, mb, pb)) - _lse(base + _predictive(gs, mg, pg))

    def log_bf_step(self, groups: Sequence[Group], change: float) -> float:
        """log p(commit's servers | at the good side's level moved ``change`` towards the
        bad side) - log p(... | at the good side's level): is it clearly off the good end by
        the smallest change that matters (a plateau between two steps is; issue 28)?"""
        gs = [g for g in groups if g]
        if not gs:
            return 0.0
        lw, mg, pg, mb, _ = self._fit
        base = lw + _within(gs)
        shifted = mg + np.sign(mb - mg) * change
        return _lse(base + _predictive(gs, shifted, pg)) - _lse(base + _predictive(gs, mg, pg))

    def ceiling(self, quantile: float = 0.1, step: float = 0.0) -> float:
        """The evidence a commit measured on ever more servers could reach at most (the
        side means are only known to within their posterior variance): d^2 / (2 p_side)
        for the less precise side, at its lower ``quantile`` over the posterior (few
        servers behind the fit: it may be much smaller than at the posterior mean).
        ``step``: the plateau evidence's instead (step^2 / (2 p_good))."""
        lw, mg, pg, mb, pb = self._fit
        c = (step ** 2 / (2 * pg) if step else
             (mb - mg) ** 2 / (2 * np.maximum(pg, pb)))
        order = np.argsort(c)
        cum = np.cumsum(np.exp(lw[order]))
        return float(c[order][min(int(np.searchsorted(cum, quantile)), c.size - 1)])

    def single_request_evidence(self) -> float:
        """How clearly one request on one fresh server decides, for a commit whose request
        lands on either side's mean: the smaller |log BF| of the two."""
        g, b = self.means()
        return min(self.log_bf([(b,)]), -self.log_bf([(g,)]))

    def learn(self, groups: Sequence[Group], bad: bool) -> TwoLevel:
        """The model with a judged commit's servers added to the side it was judged on."""
        gs = tuple(g for g in groups if g)
        return TwoLevel(self.good, self.bad + gs) if bad else TwoLevel(self.good + gs, self.bad)

    def without(self, groups: Sequence[Group]) -> TwoLevel:
        """The model with a commit's servers (learned earlier) taken out again: it is judged
        anew, and its own servers must not count as evidence for the side it was put on."""
        gs = {g for g in groups if g}
        return TwoLevel(tuple(g for g in self.good if g not in gs),
                        tuple(g for g in self.bad if g not in gs))
