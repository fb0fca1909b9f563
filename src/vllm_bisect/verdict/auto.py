"""``verdict.strategy = "auto"``: which verdict strategy a symptom gets, and why (pure). The
rules themselves are one table (``vllm_bisect.spec.verdict``: ``AUTO_STRATEGY``, ``JUDGES``,
``NO_FIX_SEARCH``, ``PER_REQUEST``) that the spec's defaults and validator read too; it sits
in the spec's layer because the validator, below this package, reads it. Here: why.

- a cap or a correctness change (deterministic at both endpoints) -> ``threshold``; the
  Driver re-checks the commits a flaky symptom can mislead (``bisect/recheck.py``) and goes
  on under ``bayes`` the moment a commit shows the symptom in some runs only;
- a crash (it shows in some runs only) -> ``bayes``;
- ITL, TTFT, throughput, MTP speed-up (continuous, noisy at two levels: the server start and
  the request) -> ``twolevel`` (``changepoint``, one model of the range, is opt-in until it
  wins every row of issue 48), with
  ``itl_factor`` / ``throughput_factor`` as the smallest change
  that matters (``1 + min_effect`` when none is written);
- ``any`` (length or ITL against written thresholds) -> ``threshold``.

Also what the two-level test samples from a measurement: per-request ITL (more requests on
one server help), or one output tok/s (or MTP speed-up ratio) per server.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from vllm_bisect.models import Measurement
from vllm_bisect.spec import Strategy, Symptom, VerdictSpec
from vllm_bisect.spec.verdict import AUTO_STRATEGY, PER_REQUEST
from vllm_bisect.verdict.judge import throughput_of

__all__ = ["Choice", "Strategy", "choose_strategy"]


@dataclass(frozen=True)
class Choice:
    """The strategy that runs (never ``Strategy.AUTO``: auto resolved) and why."""

    strategy: Strategy
    reason: str


def choose_strategy(v: VerdictSpec) -> Choice:
    """The strategy a verdict spec runs with (``auto`` resolved: the rule table's
    ``AUTO_STRATEGY``), and the reason."""
    if v.strategy != "auto":
        return Choice(Strategy(v.strategy), f'verdict.strategy = "{v.strategy}" was written')
    return Choice(AUTO_STRATEGY[v.symptom], _WHY[v.symptom](v))


def _deterministic(v: VerdictSpec) -> str:
    # (chosen before anything is measured: an expectation, not a finding)
    return (f"auto: the {v.symptom.value} symptom is expected to be deterministic (one run "
            "per commit tells)")


def _noisy(v: VerdictSpec) -> str:
    test = ("one model of the range (a posterior over the first bad commit from every server)"
            if AUTO_STRATEGY[v.symptom] is Strategy.CHANGEPOINT
            else "the two-level sequential test")
    return (f"auto: {v.symptom.value} is a noisy measurement (a server level plus per-request "
            f"noise): {test}, smallest change that matters {smallest_change(v):.3g}x")


# why auto runs what AUTO_STRATEGY says for each symptom
_WHY: dict[Symptom, Callable[[VerdictSpec], str]] = {
    Symptom.LENGTH: _deterministic,
    Symptom.CORRECTNESS: _deterministic,
    Symptom.MEMORY: lambda v: ("auto: memory at start-up is deterministic for a commit and a "
                               "config (one start per commit tells)"),
    Symptom.CRASH: lambda v: ("auto: a crash shows in some runs only (runs are repeated where "
                              "they tell most)"),
    Symptom.ITL: _noisy,
    Symptom.TTFT: _noisy,
    Symptom.THROUGHPUT: _noisy,
    Symptom.MTP_SPEEDUP: _noisy,
    Symptom.ANY: lambda v: ('auto: symptom "any" judges length and ITL against the written '
                            "thresholds"),
}


def smallest_change(v: VerdictSpec) -> float:
    """The smallest slowdown (a factor > 1) that matters."""
    if v.symptom is Symptom.ITL and v.itl_factor is not None:
        return v.itl_factor
    if v.symptom is Symptom.THROUGHPUT and v.throughput_factor is not None:
        return v.throughput_factor
    if v.symptom is Symptom.TTFT and v.ttft_factor is not None:
        return v.ttft_factor
    return 1.0 + v.min_effect


def direction(symptom: Symptom) -> int:
    """+1: bad is larger (ITL, TTFT); -1: bad is smaller (tok/s, speed-up)."""
    return 1 if symptom in (Symptom.ITL, Symptom.TTFT) else -1


def per_request(symptom: Symptom) -> bool:
    """Do more requests on one server add samples (ITL, TTFT), or is it one per server?"""
    return symptom in PER_REQUEST


def samples_of(m: Measurement | None, symptom: Symptom) -> list[float]:
    """The two-level test's samples in one server's measurement (natural scale)."""
    if m is None:
        return []
    if symptom is Symptom.ITL:
        return [float(r.itl_ms) for r in m.requests if r.itl_ms]
    if symptom is Symptom.TTFT:
        return [float(r.ttft_ms) for r in m.requests if r.n_chunks and r.ttft_ms > 0]
    if symptom is Symptom.THROUGHPUT:
        tok_s, _ = throughput_of(m)
        return [tok_s] if tok_s else []
    if symptom is Symptom.MTP_SPEEDUP:
        return [m.mtp_speedup] if m.mtp_speedup else []
    return []


def log_min_change(v: VerdictSpec) -> float:
    return math.log(smallest_change(v))
