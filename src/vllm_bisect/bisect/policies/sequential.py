"""``sequential`` (a sequential probability ratio test on per-request ITL, calibrated on
both endpoints) and ``bayes`` (each run judged by the thresholds; the Bayesian search runs
commits again, so no hook)."""

from __future__ import annotations

import logging

from vllm_bisect.bisect.policies.base import (
    CommitTrial,
    EndpointMeasure,
    MoreSamples,
    Role,
    ServerRuns,
    Traits,
)
from vllm_bisect.bisect.policies.threshold import PolicyTrial, ThresholdPolicy
from vllm_bisect.errors import NotReproduced, untestable_hint
from vllm_bisect.models import Evaluation, Measurement, Outcome, Verdict
from vllm_bisect.spec import BisectSpec
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

    TRAITS = Traits(supports_hook=False)


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
_LEARNED = {v: s for s, v in _SEQ_VERDICT.items()}


class SequentialPolicy:
    """Calibrated on both endpoints, then the SPRT on per-request ITL (learning as it goes;
    its verdicts are old/new already: like the old end or like the new one). The endpoints
    themselves, unmeasured commits and any before calibration are judged by its
    ``thresholds_policy`` (the endpoints are the calibration)."""

    TRAITS = Traits(needs_calibration=True, needs_reference=True)

    def __init__(self, spec: BisectSpec) -> None:
        self.spec = spec
        self.thresholds_policy = ThresholdPolicy(spec)
        self.traits = self.TRAITS
        self.sequential: SequentialJudge | None = None

    @classmethod
    def traits_for(cls, spec: BisectSpec) -> Traits:
        """The traits a policy of this class has for ``spec`` (read without building one)."""
        return cls.TRAITS

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
                                        f"{ev.reason or ev.status.value}",
                                        hint=untestable_hint(
                                            ev.log, network=ev.network,
                                            transient=ev.transient, advice=ev.hint, role=name))
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

    def open(self, commit: str, role: Role) -> CommitTrial:
        seq = self.sequential
        if seq is None or role not in (Role.BISECT, Role.VERIFY_CULPRIT, Role.VERIFY_PARENT):
            return PolicyTrial(self, commit, role)
        return _SequentialTrial(self, commit, role, lambda m: seq.more(m.requests),
                                seq if role is Role.BISECT else None)

    def judge(self, evaluation: Evaluation, role: Role) -> Outcome:
        return self.decide(evaluation, role, None)

    def decide(self, evaluation: Evaluation, role: Role,
               sampled_by: SequentialJudge | None) -> Outcome:
        """The verdict by ``sampled_by`` (the judge the commit sampled under), else by the
        current one (pure: :meth:`learn` sharpens the fit)."""
        m = evaluation.measurement
        if self.sequential is None or m is None or role.endpoint:
            return self.thresholds_policy.judge(evaluation, role)
        judge = sampled_by or self.sequential
        v, why = judge.decide(m.requests)
        return Outcome(commit=evaluation.commit, verdict=_SEQ_VERDICT.get(v, Verdict.SKIP),
                       reason=why, measurement=m)

    def learn(self, evaluation: Evaluation, role: Role, outcome: Outcome) -> None:
        """A bisect step's samples sharpen the fit for the next commit (on the side it was
        judged; an undecided one teaches nothing); the endpoints, judged by the thresholds,
        teach those."""
        m = evaluation.measurement
        if self.sequential is None or m is None or role.endpoint:
            self.thresholds_policy.learn(evaluation, role, outcome)
        elif role is Role.BISECT:
            self.sequential = self.sequential.learn(m.requests, _LEARNED.get(
                outcome.verdict, SeqVerdict.UNKNOWN))


class _SequentialTrial(PolicyTrial):
    """A commit under the SPRT: sampled, and (a bisect step) decided, by the judge of the
    moment it started (the fit learns meanwhile from other commits)."""

    def __init__(self, policy: SequentialPolicy, commit: str, role: Role, more: MoreSamples,
                 sampled_by: SequentialJudge | None) -> None:
        super().__init__(policy, commit, role, more)
        self.seq_policy, self.sampled_by = policy, sampled_by

    def verdict(self, evaluation: Evaluation) -> Outcome:
        return self.seq_policy.decide(evaluation, self.role, self.sampled_by)
