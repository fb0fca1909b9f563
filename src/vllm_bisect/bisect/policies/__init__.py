"""The verdict policies behind ``verdict.strategy``, and their registry (``POLICIES``,
:func:`make_policy`, :func:`resolve`). The protocol is in :mod:`.base`; each policy in a
module of its own (:mod:`.threshold`, :mod:`.sequential`, :mod:`.twolevel`,
:mod:`.changepoint`).

- ``threshold``: the spec's thresholds (:class:`~vllm_bisect.verdict.Judge`); the good
  endpoint's measurement is the reference of relative ones.
- ``sequential``: calibrate on both endpoints, then a sequential probability ratio test on
  per-request ITL, sampling more on the same server until it decides; each bisect step's
  samples sharpen the fit for the next commit.
- ``bayes``: each run judged by the thresholds; the Bayesian search runs commits again, so
  it cannot work one commit at a time under git's control (no hook).
- ``twolevel``: per-request samples with a server level (:mod:`.twolevel`): more requests on
  a server or a fresh one, per commit, until the two-level test decides.
- ``changepoint``: the model of the range (:mod:`.changepoint`): no commit judged alone; a
  recorded server says which side of the step its commit stands on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from vllm_bisect.bisect.policies.base import Traits, VerdictPolicy
from vllm_bisect.bisect.policies.changepoint import ChangePointPolicy
from vllm_bisect.bisect.policies.sequential import BayesPolicy, SequentialPolicy
from vllm_bisect.bisect.policies.threshold import ThresholdPolicy, crashed, unmeasured
from vllm_bisect.bisect.policies.twolevel import TwoLevelPolicy
from vllm_bisect.errors import SpecError
from vllm_bisect.spec import BisectSpec, SearchKind
from vllm_bisect.spec.verdict import NO_FIX_SEARCH, PER_COMMIT_STRATEGY
from vllm_bisect.verdict.auto import Choice, Strategy, choose_strategy

logger = logging.getLogger(__name__)


class PolicyClass(Protocol):
    """A policy class: built from the spec; its traits read without building one."""

    def __call__(self, spec: BisectSpec) -> VerdictPolicy: ...

    def traits_for(self, spec: BisectSpec) -> Traits: ...


POLICIES: dict[str, PolicyClass] = {
    "threshold": ThresholdPolicy,
    "sequential": SequentialPolicy,
    "bayes": BayesPolicy,
    "twolevel": TwoLevelPolicy,
    "changepoint": ChangePointPolicy,
}

__all__ = ["POLICIES", "BayesPolicy", "ChangePointPolicy", "Plan", "SequentialPolicy", "ThresholdPolicy",
           "TwoLevelPolicy", "crashed", "make_policy", "plan_for", "resolve", "resolve_strategy",
           "unmeasured"]


@dataclass(frozen=True)
class Plan:
    """What a spec's verdict comes to, settled once per symptom where the spec is loaded
    (:func:`resolve`) and passed on to every core of it: the strategy that runs (``auto``
    resolved) and why, whether its policy needs the healthy endpoint's measurement (relative
    thresholds, calibration), whether it calibrates on both endpoints (a noise-aware test),
    whether it is one model of the range, whether it can judge one commit at a time under
    ``git bisect run``, and the spec's ``verdict.rest_check``."""

    strategy: Strategy
    reason: str
    needs_reference: bool
    hook_ok: bool
    needs_calibration: bool = False
    models_range: bool = False   # one model of the range (changepoint): rest checks follow
    rest_check: bool = False     # verdict.rest_check

    @property
    def choice(self) -> Choice:
        return Choice(self.strategy, self.reason)

    @property
    def checks_rest(self) -> bool:
        """Whether the rest checks follow a culprit (bisect/multi.py, and the driver's
        verification that gives them fresh servers): ``verdict.rest_check`` on and a
        noise-aware test (one that calibrates, or one model of the range)."""
        return self.rest_check and (self.needs_calibration or self.models_range)


def resolve(spec: BisectSpec, per_commit: bool = False, workers: int = 1) -> Plan:
    """The spec's :class:`Plan`, settled once per symptom by each way in (``vllm-bisect
    run``: :func:`~vllm_bisect.bisect.multi.run_symptoms`; the hook; the studies) and passed
    on; nothing else reads the rules. ``per_commit``: each commit judged alone (``git bisect
    run``, where git chooses the commits; the studies' trials); ``workers``: the search's
    workers (the executor's)."""
    plan = plan_for(spec, resolve_strategy(spec, per_commit, workers))
    logger.debug("verdict plan for %s%s: %s (%s)", spec.verdict.symptom.value,
                 " (each commit alone)" if per_commit else "", plan.strategy.value, plan.reason)
    return plan


def plan_for(spec: BisectSpec, choice: Choice) -> Plan:
    """The :class:`Plan` of ``choice`` for ``spec`` (the policy class's traits, no policy
    built): :func:`resolve`'s, and the driver's when auto switches a flaky cap to bayes."""
    traits = _policy_class(choice.strategy).traits_for(spec)
    return Plan(choice.strategy, choice.reason, traits.needs_reference, traits.supports_hook,
                traits.needs_calibration, traits.models_range, spec.verdict.rest_check)


def resolve_strategy(spec: BisectSpec, per_commit: bool = False, workers: int = 1) -> Choice:
    """The strategy that runs (``auto`` chosen from the symptom) and why; a fix search does
    not run bayes (it searches for regressions only): threshold instead. Where auto's model
    of the range (which chooses its own commits) does not run, the two-level test instead:
    each commit judged alone (``per_commit``: the studies; ``PER_COMMIT_STRATEGY``). With k > 1
    ``workers`` the model picks k measurements a round (``workers`` is kept for the reason)."""
    choice = choose_strategy(spec.verdict)
    auto = spec.verdict.strategy == "auto"
    if auto and per_commit and choice.strategy in PER_COMMIT_STRATEGY:
        alone = PER_COMMIT_STRATEGY[choice.strategy]
        choice = Choice(alone, f"auto where each commit is judged alone (the studies): "
                        f"{alone.value}, the per-commit test; `vllm-bisect run` "
                        f"runs {choice.strategy.value}, one model of the range")
    elif auto and workers > 1 and choice.strategy is Strategy.CHANGEPOINT:
        choice = Choice(choice.strategy, f"{choice.reason}; with {workers} workers it picks "
                        f"{workers} measurements a round from the one posterior")
    if spec.range.search is SearchKind.FIX and choice.strategy in NO_FIX_SEARCH:
        choice = Choice(Strategy.THRESHOLD, "auto: a fix search runs the threshold strategy "
                        "for this symptom (bayes does not search for fixes)")
    return choice


def make_policy(spec: BisectSpec, strategy: Strategy | None = None,
                pair_bound: bool = False) -> VerdictPolicy:
    """The policy for ``strategy`` (default: the spec's, ``auto`` resolved): one per core,
    built from the settled :class:`Plan`'s strategy. ``pair_bound``: a search that confirms
    its final pair (``vllm-bisect run``) lets the two-level test spend its error bound there
    (see ``Traits.pair_bound``)."""
    chosen = strategy or resolve_strategy(spec).strategy
    cls = _policy_class(chosen)
    logger.debug("verdict policy %s built for %s", getattr(chosen, "value", chosen),
                 spec.verdict.symptom.value)
    if cls is TwoLevelPolicy:
        return TwoLevelPolicy(spec, pair_bound=pair_bound)
    return cls(spec)


def _policy_class(strategy: Strategy | str) -> PolicyClass:
    name = str(getattr(strategy, "value", strategy))
    cls = POLICIES.get(name)
    if cls is None:
        raise SpecError(f"verdict.strategy = {name!r} has no verdict policy",
                        hint="use one of: auto, " + ", ".join(POLICIES))
    return cls
