"""The verdict side of ``verdict.strategy = "changepoint"``: one model of the whole range.

No commit is judged alone: the search (:mod:`vllm_bisect.bisect.search.changepoint`) keeps
every server's samples and the posterior over the first bad commit
(:mod:`vllm_bisect.verdict.changepoint`). What this policy adds is what a recorded server
says: a server without a measurement is judged by the thresholds policy (a skip, or the
crash rule); a measured one gets the model's side of its commit *with that server added*
(old or new, with P), computed by the search's ``side`` callback, pure: the search adds the
server to its model once the Tester has recorded it. Outside a search (no ``side``) a
measured server is a skip ("judged by the model of the range only").
"""

from __future__ import annotations

from collections.abc import Callable

from vllm_bisect.bisect.policies.base import (
    CommitTrial,
    EndpointMeasure,
    MoreSamples,
    Role,
    ServerRuns,
    Traits,
)
from vllm_bisect.bisect.policies.threshold import PolicyTrial, ThresholdPolicy
from vllm_bisect.models import Evaluation, Outcome, Verdict
from vllm_bisect.spec import BisectSpec

Side = Callable[[Evaluation], Outcome]


class ChangePointPolicy:
    """See the module docstring. ``more``: what the next server probes (set by the search
    before each measurement); ``side``: the model's verdict on a server (set by the search)."""

    TRAITS = Traits(multi_server=True, models_range=True)

    def __init__(self, spec: BisectSpec) -> None:
        self.spec = spec
        self.thresholds_policy = ThresholdPolicy(spec)
        self.terms = self.thresholds_policy.terms
        self.traits = self.TRAITS
        self.more: MoreSamples | None = None
        self.side: Side | None = None

    @classmethod
    def traits_for(cls, spec: BisectSpec) -> Traits:
        """The traits a policy of this class has for ``spec`` (read without building one)."""
        return cls.TRAITS

    def calibrate(self, endpoints: EndpointMeasure, tests: int,
                  runs: ServerRuns | None = None) -> None:
        pass   # the model learns from every server, the endpoints' included

    def open(self, commit: str, role: Role) -> CommitTrial:
        return PolicyTrial(self, commit, role, self.more)

    def judge(self, evaluation: Evaluation, role: Role) -> Outcome:
        if evaluation.measurement is None:
            return self.thresholds_policy.judge(evaluation, role)
        if self.side is not None:
            return self.side(evaluation)
        return Outcome(commit=evaluation.commit, verdict=Verdict.SKIP,
                       reason="judged by the model of the range only (vllm-bisect run)",
                       measurement=evaluation.measurement)

    def learn(self, evaluation: Evaluation, role: Role, outcome: Outcome) -> None:
        pass   # the search adds the server to its model (it owns the data)
