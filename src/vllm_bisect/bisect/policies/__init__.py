"""The verdict policies behind ``verdict.strategy`` (see :mod:`vllm_bisect.bisect.policies.base`).

- ``threshold``: the spec's thresholds (:class:`~vllm_bisect.verdict.Judge`); the good
  endpoint's measurement is the reference of relative ones.
- ``sequential``: calibrate on both endpoints, then a sequential probability ratio test on
  per-request ITL, sampling more on the same server until it decides; each bisect step's
  samples sharpen the fit for the next commit.
- ``bayes``: each run judged by the thresholds; the Bayesian search runs commits again, so
  it cannot work one commit at a time under git's control (no hook).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from vllm_bisect.bisect.policies.base import (
    EndpointMeasure,
    MoreSamples,
    Role,
    ServerRuns,
    VerdictPolicy,
)
from vllm_bisect.bisect.policies.threshold import ThresholdPolicy, crashed, unmeasured
from vllm_bisect.bisect.policies.twolevel import TwoLevelPolicy
from vllm_bisect.errors import NotReproduced, SpecError
from vllm_bisect.models import Evaluation, Measurement, Outcome, Verdict
from vllm_bisect.spec import BisectSpec, SearchKind
from vllm_bisect.verdict.auto import Choice, Strategy, choose_strategy
from vllm_bisect.verdict.sequential import (
    SequentialJudge,
    SequentialTest,
    SeqVerdict,
    calibrate,
    itl_samples,
)

logger = logging.getLogger(__name__)


class BayesPolicy(ThresholdPolicy):
    """Each run judged by the thresholds; the search (not the policy) handles the flakes."""

    supports_hook = False


def _dist(xs: list[float]) -> str:
    if not xs:
        return "(none)"
    s = sorted(xs)
    return f"n={len(s)} min {s[0]:.2f} median {s[len(s) // 2]:.2f} max {s[-1]:.2f}"


def _samples(n: int) -> MoreSamples:
    def more(m: Measurement) -> int:
        return max(0, n - len(itl_samples(m.requests)))
    return more


_SEQ_VERDICT = {SeqVerdict.GOOD: Verdict.GOOD, SeqVerdict.BAD: Verdict.BAD}


class SequentialPolicy(ThresholdPolicy):
    """Calibrated on both endpoints, then the SPRT on per-request ITL (learning as it goes;
    its verdicts are old/new already: like the old end or like the new one). The endpoints
    themselves are judged by the thresholds (they are the calibration)."""

    needs_calibration = True

    def __init__(self, spec: BisectSpec) -> None:
        super().__init__(spec)
        self.sequential: SequentialJudge | None = None
        # the judge a running commit samples under (the fit learns meanwhile; the commit is
        # decided by the judge that decided when to stop sampling)
        self.sampled_by: dict[str, SequentialJudge] = {}

    def calibrate(self, endpoints: EndpointMeasure, tests: int,
                  runs: ServerRuns | None = None) -> None:
        """n samples per endpoint; refuse unless they clearly differ. ``p <= 0.01`` overall,
        spent over up to four looks (1x, 2x, 4x, 8x the samples): 0.008 at the first (5
        against 5 fully separated gives p = 0.0079), 0.002 / 3 at each other."""
        v = self.spec.verdict
        need, p_max = v.calibration_samples, 0.008
        while True:  # not yet distinguishable, or not precisely: double the samples, up to 8x
            good_ev, bad_ev = endpoints(_samples(need))
            for ev, name in ((good_ev, "good"), (bad_ev, "bad")):
                if ev.measurement is None:
                    raise NotReproduced(f"the {name} endpoint could not be tested: "
                                        f"{ev.reason or ev.status.value}")
            assert good_ev.measurement is not None and bad_ev.measurement is not None
            g, b = itl_samples(good_ev.measurement.requests), itl_samples(bad_ev.measurement.requests)
            cal = calibrate(g, b, min_effect=v.min_effect, p_max=p_max)
            test = SequentialTest(cal, alpha_total=v.alpha, expected_steps=tests + 2,
                                  max_samples=v.max_samples)
            if (cal.ok and test.precise()) or need >= 8 * v.calibration_samples:
                break
            if not cal.ok and abs(cal.effect) < v.min_effect and cal.p_value <= p_max:
                break  # they differ, but by less than the minimum effect: more will not help
            need *= 2
            p_max = 0.002 / 3
        if not cal.ok:
            raise NotReproduced(f"did not reproduce: {cal.reason}; good ITL ms {_dist(g)}, "
                                f"bad ITL ms {_dist(b)}",
                                hint="raise verdict.calibration_samples, lower "
                                     "verdict.min_effect, or check the range")
        logger.info("calibrated on %d + %d samples: %s", len(g), len(b), cal.reason)
        self.sequential = SequentialJudge(test)

    def sampler(self, commit: str, role: Role) -> MoreSamples | None:
        seq = self.sequential
        if seq is None or role not in (Role.BISECT, Role.VERIFY_CULPRIT, Role.VERIFY_PARENT):
            return None
        if role is Role.BISECT:
            self.sampled_by[commit] = seq
        return lambda m: seq.more(m.requests)

    def forget(self, commit: str) -> None:
        self.sampled_by.pop(commit, None)

    def judge(self, evaluation: Evaluation, role: Role) -> Outcome:
        m = evaluation.measurement
        if self.sequential is None or m is None or role.endpoint:
            self.sampled_by.pop(evaluation.commit, None)
            return super().judge(evaluation, role)
        judge = self.sampled_by.pop(evaluation.commit, None) or self.sequential
        v, why = judge.decide(m.requests)
        if role is Role.BISECT:  # its samples sharpen the fit for the next commit
            self.sequential = self.sequential.learn(m.requests, v)
        return Outcome(commit=evaluation.commit, verdict=_SEQ_VERDICT.get(v, Verdict.SKIP),
                       reason=why, measurement=m)


POLICIES: dict[str, type[ThresholdPolicy]] = {
    "threshold": ThresholdPolicy,
    "sequential": SequentialPolicy,
    "bayes": BayesPolicy,
    "twolevel": TwoLevelPolicy,
}

__all__ = ["POLICIES", "BayesPolicy", "Plan", "SequentialPolicy", "ThresholdPolicy",
           "TwoLevelPolicy", "crashed", "make_policy", "resolve", "resolve_strategy",
           "unmeasured"]


@dataclass(frozen=True)
class Plan:
    """What a spec's verdict comes to, decided once (:func:`resolve`): the strategy that runs
    (``auto`` resolved) and why, whether its policy needs the healthy endpoint's measurement
    (relative thresholds, calibration), and whether it can judge one commit at a time under
    ``git bisect run``."""

    strategy: Strategy
    reason: str
    needs_reference: bool
    hook_ok: bool

    @property
    def choice(self) -> Choice:
        return Choice(self.strategy, self.reason)


def resolve(spec: BisectSpec) -> Plan:
    """The spec's :class:`Plan` (every way into the core reads this, never the rules)."""
    choice = resolve_strategy(spec)
    policy = make_policy(spec, choice.strategy)
    return Plan(choice.strategy, choice.reason, policy.needs_reference, policy.supports_hook)


def resolve_strategy(spec: BisectSpec) -> Choice:
    """The strategy that runs (``auto`` chosen from the symptom) and why; a fix search does
    not run bayes (it searches for regressions only): threshold instead."""
    choice = choose_strategy(spec.verdict)
    if spec.range.search is SearchKind.FIX and choice.strategy is Strategy.BAYES:
        choice = Choice(Strategy.THRESHOLD, "auto: a fix search runs the threshold strategy "
                        "for this symptom (bayes does not search for fixes)")
    return choice


def make_policy(spec: BisectSpec, strategy: Strategy | None = None,
                pair_bound: bool = False) -> VerdictPolicy:
    """The policy for ``strategy`` (default: the spec's, ``auto`` resolved). ``pair_bound``:
    a search that confirms its final pair (``vllm-bisect run``) lets the two-level test
    spend its error bound there (see ``VerdictPolicy.pair_bound``)."""
    chosen = strategy or resolve_strategy(spec).strategy
    name = str(getattr(chosen, "value", chosen))
    cls = POLICIES.get(name)
    if cls is None:
        raise SpecError(f"verdict.strategy = {name!r} has no verdict policy",
                        hint="use one of: auto, " + ", ".join(POLICIES))
    if cls is TwoLevelPolicy:
        return TwoLevelPolicy(spec, pair_bound=pair_bound)
    return cls(spec)
