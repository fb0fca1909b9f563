"""One calibration's servers per endpoint: :meth:`TwoLevelPolicy.calibrate
<vllm_bisect.bisect.policies.twolevel.TwoLevelPolicy.calibrate>` and the rest check
(:mod:`vllm_bisect.bisect.rest`) run both ends' servers through it until the two levels of
noise are known well enough (:func:`~vllm_bisect.verdict.twolevel.calibration_step`)."""

from __future__ import annotations

import logging
from typing import Protocol

from vllm_bisect.bisect.policies.base import Role, ServerRuns
from vllm_bisect.bisect.terms import Terms
from vllm_bisect.errors import NotReproduced, untestable_hint
from vllm_bisect.models import Evaluation, Measurement
from vllm_bisect.spec import Symptom, VerdictSpec
from vllm_bisect.verdict.auto import direction, log_min_change, per_request, samples_of
from vllm_bisect.verdict.twolevel import CalStatus, CalStep, calibration_step, to_logs

logger = logging.getLogger(__name__)

CALIBRATION_SERVERS = 12  # per endpoint, at most (why not 8: docs/design-notes.md)
# pair_bound: the calibration's precision, x the first bound decision's threshold (3 without;
# issue 14's benchmark chose it: docs/benchmarks.md)
PAIR_PRECISION = 1.0
OLD_ROLES = frozenset({Role.GOOD_ENDPOINT, Role.PROBLEM_ENDPOINT})   # the old end's roles


class CalibratedPolicy(Protocol):
    """What a calibration reads of its policy (:class:`~vllm_bisect.bisect.policies.twolevel.
    TwoLevelPolicy`; a protocol, so that this module needs nothing from that one)."""

    v: VerdictSpec
    symptom: Symptom
    terms: Terms

    @property
    def pair_bound(self) -> bool: ...

    def samples(self, ev: Evaluation | None) -> list[float]: ...
    def groups_of(self, ev: Evaluation) -> list[list[float]]: ...
    def merged(self, ev: Evaluation, groups: list[list[float]],
               earlier: list[Measurement]) -> Evaluation: ...


class Calibration:
    """One calibration's servers per endpoint (:meth:`TwoLevelPolicy.calibrate`, bisect.rest)."""

    def __init__(self, policy: CalibratedPolicy, runs: ServerRuns, tests: int,
                 announce: bool = True) -> None:
        """``announce``: tell the event handler the endpoints are being tested (a rest check
        compares two commits that are not the run's endpoints: it does not)."""
        self.p, self.runs = policy, runs
        rng_ends = runs.endpoints()
        self.roles = dict(rng_ends)  # sha -> role, the reference end first
        self.old_sha = next(sha for sha, role in rng_ends if role in OLD_ROLES)
        self.new_sha = next(sha for sha, role in rng_ends if role not in OLD_ROLES)
        self.groups: dict[str, list[list[float]]] = {s: [] for s in self.roles}
        self.last: dict[str, Evaluation] = {}
        self.earlier: dict[str, list[Measurement]] = {s: [] for s in self.roles}
        self.fresh: set[str] = set()   # endpoints that needed a server this session
        for sha, role in self.roles.items():
            if announce:
                runs.testing(sha, role, tests)
            found = runs.known(sha)
            if found is not None and found.measurement is not None and policy.groups_of(found):
                self.groups[sha], self.last[sha] = policy.groups_of(found), found

    def run(self, todo: list[str], k: int, reps: int = 1) -> None:
        p = self.p

        def more(m: Measurement) -> int:
            return max(0, k - len(samples_of(m, p.symptom)))
        shas = [sha for sha in todo for _ in range(reps)]
        evs = self.runs.fresh(shas, more if per_request(p.symptom) else None)
        for sha, ev in zip(shas, evs, strict=True):
            self.fresh.add(sha)
            s = p.samples(ev)
            if ev.measurement is None or not s:
                raise NotReproduced(f"the {self.roles[sha]} could not be tested: "
                                    f"{ev.reason or 'no samples'}", hint=untestable_hint(
                                        ev.log, network=ev.network, transient=ev.transient,
                                        advice=ev.hint, role=self.roles[sha]))
            prev = self.last.get(sha)
            if prev is not None and prev.measurement is not None:
                self.earlier[sha].append(prev.measurement)
            self.groups[sha].append(s)
            self.last[sha] = ev

    def step(self, threshold: float, step_change: float = 0.0,
             groups: dict[str, list[list[float]]] | None = None) -> CalStep:
        """The calibration's next step on the servers so far (verdict/twolevel.py), or on
        ``groups`` (a subset of them)."""
        p, v = self.p, self.p.v
        gs = groups or self.groups
        return calibration_step(
            [to_logs(g) for g in gs[self.old_sha]],
            [to_logs(g) for g in gs[self.new_sha]], min_change=log_min_change(v),
            # a fix search: the new end is the one without the problem
            direction=direction(p.symptom) * (-1 if p.terms.fix else 1),
            threshold=threshold, max_servers=CALIBRATION_SERVERS, server_cost=v.server_cost,
            precision=PAIR_PRECISION if p.pair_bound else 3.0, step_change=step_change)

    def until_decided(self, threshold: float, step_change: float = 0.0) -> CalStep:
        """Servers until the calibration is ready or refuses; its last step."""
        todo = [sha for sha in self.roles if not self.groups[sha]]
        if todo:
            self.run(todo, 2)
        while (step := self.step(threshold, step_change)).status is CalStatus.MORE:
            logger.info("%s", step.reason)
            # k workers: k / 2 fresh servers per endpoint at once (the wall of one)
            self.run(list(self.roles), step.requests, max(1, self.runs.workers // 2))
        logger.info("%s", step.reason)
        return step

    def record(self, told: bool = True) -> None:
        """Each endpoint's servers merged into one evaluation, judged and journaled
        (``told``: as the endpoints' verdicts; a rest check's ends are not: the culprit is
        the lower end of the part after it, never "good")."""
        for sha, role in self.roles.items():
            ev = self.p.merged(self.last[sha], self.groups[sha], self.earlier[sha])
            self.runs.record_as(sha, role, ev, cached=sha not in self.fresh, told=told)
