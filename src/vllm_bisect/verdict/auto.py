"""``verdict.strategy = "auto"``: which verdict strategy a symptom gets, and why (pure). The
rules themselves are one table (``vllm_bisect.spec.verdict``: ``AUTO_STRATEGY``, ``JUDGES``,
``NO_FIX_SEARCH``, ``PER_REQUEST``, derived from the symptoms' registry) that the spec's
defaults and validator read too; it sits in the spec's layer because the validator, below
this package, reads it. Here: why (by the symptom's noise, or its declaration's own words).

- a cap or a correctness change (deterministic at both endpoints) -> ``threshold``; the
  Driver re-checks the commits a flaky symptom can mislead (``bisect/recheck.py``) and goes
  on under ``bayes`` the moment a commit shows the symptom in some runs only;
- a crash (it shows in some runs only) -> ``bayes``;
- ITL, TTFT, throughput, MTP speed-up (continuous, noisy at two levels: the server start and
  the request) -> ``changepoint``: one model of the range, a posterior over the first bad
  commit from every server measured (endpoints included), which chooses the next server and
  stops when one commit holds ``verdict.confidence`` (issue 48); ``vllm-bisect run`` and
  the hook run it, on one worker or k (k measurements a round from the one posterior).
  Where each commit is judged alone (``PER_COMMIT_STRATEGY``: the studies) the two-level
  sequential test (``twolevel``); ``bisect/policies``' ``resolve_strategy`` applies it. Both
  take ``itl_factor`` / ``throughput_factor`` as the smallest change that matters
  (``1 + min_effect`` when none is written);
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
from vllm_bisect.symptoms import Direction, Noise

__all__ = ["Choice", "Strategy", "choose_strategy", "noisy_why"]


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
    return Choice(AUTO_STRATEGY[v.symptom], _why(v))


def _deterministic(v: VerdictSpec) -> str:
    # (chosen before anything is measured: an expectation, not a finding)
    return (f"auto: the {v.symptom.value} symptom is expected to be deterministic (one run "
            "per commit tells)")


def noisy_why(v: VerdictSpec, strategy: Strategy) -> str:
    """Why a continuous symptom runs ``strategy`` (the model of the range, or the two-level
    test where it cannot run)."""
    test = ("one model of the range (a posterior over the first bad commit from every server)"
            if strategy is Strategy.CHANGEPOINT else "the two-level sequential test")
    return (f"{v.symptom.value} is a noisy measurement (a server level plus per-request "
            f"noise): {test}, smallest change that matters {smallest_change(v):.3g}x")


def _noisy(v: VerdictSpec) -> str:
    return "auto: " + noisy_why(v, AUTO_STRATEGY[v.symptom])


def _flaky(v: VerdictSpec) -> str:
    return f"auto: {v.symptom.value} shows in some runs only (runs are repeated where they tell most)"


# why auto runs what AUTO_STRATEGY says, for a symptom of each noise (a symptom's own
# declaration may say it instead: ``auto_why``)
_WHY: dict[Noise, Callable[[VerdictSpec], str]] = {
    Noise.DETERMINISTIC: _deterministic,
    Noise.FLAKY: _flaky,
    Noise.SERVER: _noisy,
    Noise.SERVER_AND_REQUEST: _noisy,
}


def _why(v: VerdictSpec) -> str:
    return v.symptom.info.auto_why or _WHY[v.symptom.info.noise](v)


def smallest_change(v: VerdictSpec) -> float:
    """The smallest slowdown (a factor > 1) that matters."""
    return v.symptom.info.smallest_change(v)


def direction(symptom: Symptom) -> int:
    """+1: bad is larger (ITL, TTFT); -1: bad is smaller (tok/s, speed-up)."""
    return 1 if symptom.info.direction is Direction.RISES else -1


def per_request(symptom: Symptom) -> bool:
    """Do more requests on one server add samples (ITL, TTFT), or is it one per server?"""
    return symptom in PER_REQUEST


def samples_of(m: Measurement | None, symptom: Symptom) -> list[float]:
    """The two-level test's samples in one server's measurement (natural scale)."""
    return symptom.info.samples_of(m)


def log_min_change(v: VerdictSpec) -> float:
    return math.log(smallest_change(v))
