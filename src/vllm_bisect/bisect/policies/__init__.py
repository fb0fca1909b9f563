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

from collections.abc import Callable
from dataclasses import dataclass

from vllm_bisect.bisect.policies.base import VerdictPolicy
from vllm_bisect.bisect.policies.changepoint import ChangePointPolicy
from vllm_bisect.bisect.policies.sequential import BayesPolicy, SequentialPolicy
from vllm_bisect.bisect.policies.threshold import ThresholdPolicy, crashed, unmeasured
from vllm_bisect.bisect.policies.twolevel import TwoLevelPolicy
from vllm_bisect.errors import SpecError
from vllm_bisect.spec import BisectSpec, SearchKind
from vllm_bisect.spec.verdict import HOOK_STRATEGY, NO_FIX_SEARCH
from vllm_bisect.verdict.auto import Choice, Strategy, choose_strategy

POLICIES: dict[str, Callable[[BisectSpec], VerdictPolicy]] = {
    "threshold": ThresholdPolicy,
    "sequential": SequentialPolicy,
    "bayes": BayesPolicy,
    "twolevel": TwoLevelPolicy,
    "changepoint": ChangePointPolicy,
}

__all__ = ["POLICIES", "BayesPolicy", "ChangePointPolicy", "Plan", "SequentialPolicy", "ThresholdPolicy",
           "TwoLevelPolicy", "crashed", "make_policy", "resolve", "resolve_strategy",
           "unmeasured"]


@dataclass(frozen=True)
class Plan:
    """What a spec's verdict comes to, decided once (:func:`resolve`): the strategy that runs
    (``auto`` resolved) and why, whether its policy needs the healthy endpoint's measurement
    (relative thresholds, calibration), whether it calibrates on both endpoints (a noise-aware
    test: the rest check runs after it), and whether it can judge one commit at a time under
    ``git bisect run``."""

    strategy: Strategy
    reason: str
    needs_reference: bool
    hook_ok: bool
    needs_calibration: bool = False
    models_range: bool = False   # one model of the range (changepoint): rest checks follow

    @property
    def choice(self) -> Choice:
        return Choice(self.strategy, self.reason)


def resolve(spec: BisectSpec, per_commit: bool = False) -> Plan:
    """The spec's :class:`Plan` (every way into the core reads this, never the rules).
    ``per_commit``: each commit judged alone (``git bisect run``, where git chooses the
    commits; the studies' trials)."""
    choice = resolve_strategy(spec, per_commit)
    policy = make_policy(spec, choice.strategy)
    traits = policy.traits
    return Plan(choice.strategy, choice.reason, traits.needs_reference, traits.supports_hook,
                traits.needs_calibration, traits.models_range)


def resolve_strategy(spec: BisectSpec, per_commit: bool = False) -> Choice:
    """The strategy that runs (``auto`` chosen from the symptom) and why; a fix search does
    not run bayes (it searches for regressions only): threshold instead. Where each commit is
    judged alone (``per_commit``: the hook, the studies), auto's model of the range (which
    chooses its own commits) gives way to the per-commit test (``HOOK_STRATEGY``)."""
    choice = choose_strategy(spec.verdict)
    if per_commit and spec.verdict.strategy == "auto" and choice.strategy in HOOK_STRATEGY:
        alone = HOOK_STRATEGY[choice.strategy]
        choice = Choice(alone, f"auto where each commit is judged alone (`git bisect run`, "
                        f"the studies): {alone.value}, the per-commit test; `vllm-bisect run` "
                        f"runs {choice.strategy.value}, one model of the range")
    if spec.range.search is SearchKind.FIX and choice.strategy in NO_FIX_SEARCH:
        choice = Choice(Strategy.THRESHOLD, "auto: a fix search runs the threshold strategy "
                        "for this symptom (bayes does not search for fixes)")
    return choice


def make_policy(spec: BisectSpec, strategy: Strategy | None = None,
                pair_bound: bool = False) -> VerdictPolicy:
    """The policy for ``strategy`` (default: the spec's, ``auto`` resolved). ``pair_bound``:
    a search that confirms its final pair (``vllm-bisect run``) lets the two-level test
    spend its error bound there (see ``Traits.pair_bound``)."""
    chosen = strategy or resolve_strategy(spec).strategy
    name = str(getattr(chosen, "value", chosen))
    cls = POLICIES.get(name)
    if cls is None:
        raise SpecError(f"verdict.strategy = {name!r} has no verdict policy",
                        hint="use one of: auto, " + ", ".join(POLICIES))
    if cls is TwoLevelPolicy:
        return TwoLevelPolicy(spec, pair_bound=pair_bound)
    return cls(spec)
