"""The threshold policy (``verdict.strategy = "threshold"``) and the crash rule, which
every policy shares (see :mod:`vllm_bisect.bisect.policies.base`)."""

from __future__ import annotations

from dataclasses import replace

from vllm_bisect.bisect.policies.base import (
    Again,
    CommitTrial,
    EndpointMeasure,
    MoreSamples,
    Role,
    ServerRuns,
    Traits,
    VerdictPolicy,
)
from vllm_bisect.bisect.terms import Terms
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, Outcome, Verdict
from vllm_bisect.spec import BisectSpec, Symptom
from vllm_bisect.verdict import Judge


def crashed(spec: BisectSpec, ev: Evaluation) -> bool:
    """Following the crash symptom, a server that died or a probe that failed is bad."""
    return (spec.verdict.symptom is Symptom.CRASH and ev.status is EvalStatus.FAILED
            and ev.failure is not None and ev.failure.crash)


def unmeasured(spec: BisectSpec, ev: Evaluation) -> Outcome:
    """The verdict on an evaluation without a measurement: bad where the symptom followed
    shows in the failure itself (its declaration's ``failed``: a crash; a start that ran out
    of memory, following memory), else a skip."""
    failed = spec.verdict.symptom.info.failed
    if ev.status is EvalStatus.FAILED and failed is not None and (
            why := failed(ev.failure, ev.reason or "", ev.log_tail or "")):
        return Outcome(commit=ev.commit, verdict=Verdict.BAD, reason=why)
    return Outcome(commit=ev.commit, verdict=Verdict.SKIP, reason=ev.reason or ev.status.value)


class PolicyTrial:
    """A commit judged on one server (threshold, bayes; the others' trials build on it):
    decided by its first evaluation, judged by the policy (any :class:`VerdictPolicy`)."""

    def __init__(self, policy: VerdictPolicy, commit: str, role: Role,
                 more: MoreSamples | None = None) -> None:
        self.policy, self.commit, self.role, self.more = policy, commit, role, more

    def final(self, known: Evaluation) -> bool:
        return True

    def resume(self, known: Evaluation) -> MoreSamples | None:
        return None

    def next_probe(self, evaluation: Evaluation) -> Again | None:
        return None  # one server per commit

    def evaluation(self, last: Evaluation) -> Evaluation:
        return last

    def verdict(self, evaluation: Evaluation) -> Outcome:
        return self.policy.judge(evaluation, self.role)


class ThresholdPolicy:
    """The spec's thresholds; the healthy endpoint sets the reference of relative ones.
    Verdicts in the search's terms (a fix search inverts them). The noise-aware policies
    (sequential, twolevel) hold one (``thresholds_policy``) for what their test does not
    judge: an evaluation without a measurement (the crash rule), the endpoints, a commit
    before calibration."""

    TRAITS = Traits()   # the class's (bayes: no hook); ``needs_reference`` from the spec

    def __init__(self, spec: BisectSpec) -> None:
        self.spec = spec
        self.terms = Terms(spec.range.search)
        self.thresholds = Judge(spec.verdict, spec.min_output_tokens())
        self.traits = self.traits_for(spec)

    @classmethod
    def traits_for(cls, spec: BisectSpec) -> Traits:
        """The traits a policy of this class has for ``spec`` (read without building one)."""
        return replace(cls.TRAITS, needs_reference=Judge(
            spec.verdict, spec.min_output_tokens()).needs_reference)

    @property
    def supports_hook(self) -> bool:
        return self.traits.supports_hook

    def calibrate(self, endpoints: EndpointMeasure, tests: int,
                  runs: ServerRuns | None = None) -> None:
        pass

    def open(self, commit: str, role: Role) -> CommitTrial:
        return PolicyTrial(self, commit, role)

    def judge(self, evaluation: Evaluation, role: Role) -> Outcome:
        """The thresholds' verdict (the healthy endpoint judged against itself as the
        reference of relative ones: :meth:`learn` keeps it)."""
        m = evaluation.measurement
        if m is None:
            outcome = unmeasured(self.spec, evaluation)
        else:
            j = self._thresholds_for(m, role).judge(m)
            outcome = Outcome(commit=evaluation.commit, verdict=j.verdict, reason=j.reason,
                              measurement=m)
        return outcome.model_copy(update={"verdict": self.terms.verdict(outcome.verdict)})

    def learn(self, evaluation: Evaluation, role: Role, outcome: Outcome) -> None:
        """The healthy endpoint's measurement becomes the reference of relative thresholds
        (``itl_factor``'s baseline)."""
        if evaluation.measurement is not None:
            self.thresholds = self._thresholds_for(evaluation.measurement, role)

    def _thresholds_for(self, m: Measurement, role: Role) -> Judge:
        """The thresholds a measurement in ``role`` is judged by (the reference endpoint's
        own measurement is its reference)."""
        if role is self.terms.reference_role and self.thresholds.needs_reference:
            return self.thresholds.with_reference(m)
        return self.thresholds
