"""The driver side of the two-level test (``verdict.strategy = "twolevel"``, auto's choice
for itl, throughput and mtp-speedup): calibration, and per commit "more requests on this
server, or a fresh server?".

The statistics are pure (:mod:`vllm_bisect.verdict.twolevel`). A verdict policy
(:mod:`vllm_bisect.bisect.policies.base`): :meth:`calibrate` runs the endpoints' servers through
the Tester (``ServerRuns``); per commit, :meth:`open` starts a :class:`TwoLevelTrial` that
holds the test it samples under and its servers so far: ``next_probe`` asks for a fresh
server until the test decides, ``evaluation`` merges its servers (the last server's
evaluation, with every server's samples in ``Evaluation.samples``), which is cached and
journaled once decided; ``final`` says whether a cached one is decided. The policy keeps
only the model: the test, the commits it learned from, those left undecided.

With ``pair_bound`` (``vllm-bisect run``; not the hook, whose steps git chooses) the error
budget goes to the final pair: a search step decides at ``STEP_ALPHA`` (a wrong step costs a
detour, not a wrong answer), and a commit the search judges with ``Role.CONFIRM`` (the last
step, and the other end of the final pair, re-judged) decides at the bound: the j-th such
decision at ``alpha / 2**j`` (the sum stays within ``alpha``, however many there are). A
confirmed commit goes on from the servers it had (``TwoLevelTrial.resume``): the evidence is the same
likelihood ratio sampled further, so stopping it later keeps its bound (Ville's inequality).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import replace

from vllm_bisect.bisect.policies.base import (
    Again,
    EndpointMeasure,
    MoreSamples,
    Role,
    ServerRuns,
    Traits,
)
from vllm_bisect.bisect.policies.calibration import OLD_ROLES, Calibration
from vllm_bisect.bisect.policies.threshold import PolicyTrial, ThresholdPolicy
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Evaluation, Measurement, Outcome, Verdict
from vllm_bisect.probes.decode import combine
from vllm_bisect.spec import BisectSpec
from vllm_bisect.text import plural
from vllm_bisect.verdict.auto import log_min_change, per_request, samples_of
from vllm_bisect.verdict.twolevel import (
    CalStatus,
    CommitTest,
    Decision,
    Group,
    to_logs,
)

logger = logging.getLogger(__name__)
SAMPLE_CAP = 3            # x verdict.max_samples: a commit's samples over all its servers
# pair_bound (issue 14's benchmark chose these; docs/benchmarks.md): a search step's own error,
# the calibration's precision (x the first bound decision's threshold; 3 without pair_bound),
# and a lone server's multiple of the threshold in a decision at the bound
STEP_ALPHA = 0.05
PAIR_LONE_SERVER = 1.4
More = Callable[[Measurement], int]


def _dist(xs: list[float]) -> str:
    if not xs:
        return "(none)"
    s = sorted(xs)
    return f"n={len(s)} min {s[0]:.3g} median {statistics.median(s):.3g} max {s[-1]:.3g}"


def describe(groups: list[list[float]]) -> str:
    """Per-server medians and counts, for messages."""
    return ", ".join(f"{statistics.median(g):.3g} ({len(g)})" for g in groups if g) or "none"


class TwoLevelPolicy:
    """Calibrated on both endpoints' servers, then per commit "more requests on this
    server, or a fresh server?" (learning as it goes). Verdicts are old/new already; an
    evaluation without a measurement (the crash rule) or a commit before calibration is
    judged by its ``thresholds_policy``."""

    TRAITS = Traits(needs_calibration=True, multi_server=True, needs_reference=True)

    def __init__(self, spec: BisectSpec, pair_bound: bool = False) -> None:
        self.spec = spec
        self.thresholds_policy = ThresholdPolicy(spec)
        self.terms = self.thresholds_policy.terms
        self.traits = replace(self.TRAITS, pair_bound=pair_bound)
        self.strict_spent = 0   # decisions at the bound begun (the j-th: alpha / 2**j)
        self.learned: dict[str, list[Group]] = {}   # commit -> its servers in the model
        self.undecided: set[str] = set()   # left undecided at the caps (pair_bound)
        self.reopened: set[str] = set()    # those, judged again after the fall-back
        self.v = spec.verdict
        self.symptom = self.v.symptom
        self.test_: CommitTest | None = None
        self.reason = ""

    @classmethod
    def traits_for(cls, spec: BisectSpec) -> Traits:
        """The traits a policy of this class has for ``spec`` (read without building one)."""
        return cls.TRAITS

    @property
    def pair_bound(self) -> bool:
        return self.traits.pair_bound

    @property
    def recalibrate(self) -> bool:
        return self.traits.recalibrate

    @property
    def test(self) -> CommitTest:
        if self.test_ is None:
            raise RuntimeError("the two-level test is used before calibration")
        return self.test_

    # -- samples -------------------------------------------------------------------------
    def strict(self, commit: str) -> CommitTest:
        """The test of a decision at the bound (pair_bound): the next share of alpha, under
        the model without the commit's own servers."""
        self.strict_spent += 1
        return replace(self._unlearned(self.learned.get(commit)),
                       alpha_total=self.v.alpha / 2 ** self.strict_spent,
                       expected_steps=1, lone_server=PAIR_LONE_SERVER, good_gate=False,
                       step_decides=False)

    def _unlearned(self, own: list[Group] | None) -> CommitTest:
        """The current test with a commit's servers (learned earlier) taken out of its model."""
        return replace(self.test, model=self.test.model.without(own)) if own else self.test

    def samples(self, ev: Evaluation | None) -> list[float]:
        return samples_of(ev.measurement if ev is not None else None, self.symptom)

    def groups_of(self, ev: Evaluation) -> list[list[float]]:
        if ev.samples is not None:
            return [list(g) for g in ev.samples]
        s = self.samples(ev)
        return [s] if s else []

    def more_for(self, test: CommitTest, before: list[list[float]]) -> More | None:
        """The evaluator's "how many more requests on this server?" for a commit's next
        server (None: one sample per server)."""
        if not per_request(self.symptom):
            return None
        logs = [to_logs(g) for g in before]

        def more(m: Measurement) -> int:
            now = [*logs, to_logs(samples_of(m, self.symptom))]
            return 1 if test.decide(now) is Decision.MORE_REQUESTS else 0
        return more

    def merged(self, ev: Evaluation, groups: list[list[float]],
               earlier: list[Measurement]) -> Evaluation:
        """One evaluation for a commit measured on several servers: the last server's, its
        measurement combined with the ``earlier`` servers' (per-request symptoms), and every
        server's samples in ``samples``."""
        m = ev.measurement
        if per_request(self.symptom) and earlier and m is not None:
            first = earlier[0]
            for other in [*earlier[1:], m]:
                first = combine(first, other)
            m = first
        return ev.model_copy(update={"samples": [[float(x) for x in g] for g in groups],
                                     "measurement": m})

    # -- calibration ---------------------------------------------------------------------
    def calibrate(self, endpoints: EndpointMeasure, tests: int,
                  runs: ServerRuns | None = None) -> None:
        """Servers of both endpoints (the reference end first) until the two levels of
        noise are known well enough to decide, or the endpoints do not differ (refused)."""
        if runs is None:
            raise RuntimeError("the two-level calibration runs servers: pass the Tester")
        v = self.v
        tests += 2
        # pair_bound: precise enough for the first decision at the bound (alpha / 2)
        threshold = math.log((2 if self.pair_bound else tests) / v.alpha)
        cal = Calibration(self, runs, tests)
        # a fall-back: the plateau evidence may have to decide (the good end precise for it)
        step = cal.until_decided(threshold, log_min_change(v) if v.plateau and self.recalibrate
                                 else 0.0)
        self.reason = step.reason
        self.traits = replace(self.traits, recalibrate=False)
        self.learned.clear()
        if step.status is CalStatus.READY:
            assert step.model is not None
            self.test_ = CommitTest(step.model, alpha_total=STEP_ALPHA if self.pair_bound
                                    else v.alpha, expected_steps=1 if self.pair_bound else tests,
                                    max_samples=SAMPLE_CAP * v.max_samples,  # 120
                                    max_servers=v.max_servers,
                                    server_cost=v.server_cost,
                                    requests_help=per_request(self.symptom),
                                    # a plateau: BAD (verdict.plateau); the gate on
                                    # GOOD after a fall-back only (verdict/twolevel.py)
                                    step_change=log_min_change(v) if v.plateau else 0.0,
                                    good_gate=v.plateau and not self.pair_bound)
        cal.record()
        if step.status is CalStatus.REFUSE:
            g, b = cal.groups[cal.old_sha], cal.groups[cal.new_sha]
            raise NotReproduced(
                f"did not reproduce: {step.reason}; good {self.symptom.value} "
                f"{_dist([x for grp in g for x in grp])} on servers {describe(g)}; bad "
                f"{_dist([x for grp in b for x in grp])} on servers {describe(b)}",
                hint="check the range, or lower verdict.itl_factor / throughput_factor "
                     "(the smallest change that matters)")
        logger.info("two-level calibration: %s", self.reason)

    # -- one commit ----------------------------------------------------------------------
    def open(self, commit: str, role: Role) -> TwoLevelTrial:
        """A commit goes to a server: the test it samples under, and its ``more``."""
        if self.test_ is None or role.endpoint:
            return TwoLevelTrial(self, commit, role, None)
        test = self.strict(commit) if role is Role.CONFIRM and self.pair_bound else self.test
        if commit in self.reopened:   # undecided before the fall-back: a second allowance
            test = replace(test, max_samples=2 * test.max_samples,
                           max_servers=2 * test.max_servers)
        return TwoLevelTrial(self, commit, role, test)

    def _fall_back(self, commit: str) -> None:
        """A commit went undecided at the caps under ``pair_bound``: the sign of a model the
        loose steps taught wrong (a commit put on the wrong side at ``STEP_ALPHA`` widens the
        server-level spread until the commits between the sides cannot be decided, and the
        search skips one after another; docs/design-notes.md). The rest of the search decides
        at the per-step bound, as without ``pair_bound``: the search calibrates again to that
        precision (going on from the endpoints' servers) and the model forgets every learned
        commit; the final pair is still re-judged (confirmations made before are forgotten),
        so a loose verdict that was wrong is found there; the commit left undecided is judged
        again under the new model with a second allowance of samples and servers."""
        logger.warning("%s went undecided: the model may have learned a wrong verdict; the "
                       "search calibrates again and decides every step at the per-step bound",
                       commit[:12])
        self.traits = replace(self.traits, pair_bound=False, recalibrate=True)
        self.reopened = set(self.undecided)

    # -- verdicts ------------------------------------------------------------------------
    def judge(self, evaluation: Evaluation, role: Role) -> Outcome:
        return self.decide(evaluation, role, None)

    def decide(self, evaluation: Evaluation, role: Role,
               sampled_by: CommitTest | None) -> Outcome:
        """The verdict under ``sampled_by`` (the test the commit sampled under), else under
        the current test (pure: :meth:`learn` teaches the model)."""
        m = evaluation.measurement
        if m is None:
            return self.thresholds_policy.judge(evaluation, role)
        if role.endpoint:
            # an endpoint: old ("good") or new ("bad") by definition, once calibrated
            return Outcome(commit=evaluation.commit, verdict=Verdict.GOOD
                           if role in OLD_ROLES else Verdict.BAD, reason=self.reason,
                           measurement=m)
        if self.test_ is None:
            return self.thresholds_policy.judge(evaluation, role)
        test = sampled_by or self.test
        groups = self.groups_of(evaluation)
        logs = [to_logs(g) for g in groups]
        dec = test.decide(logs)
        if dec in (Decision.MORE_REQUESTS, Decision.NEW_SERVER):
            dec = Decision.UNKNOWN  # a failed later server: undecided
        mg, mb = test.model.means()
        flat = [x for g in groups for x in g]
        where = (f"{self.symptom.value} median {statistics.median(flat):.3g} over "
                 f"{plural(len(flat), 'sample')} on {plural(len(groups), 'server')} "
                 f"[{describe(groups)}] (good "
                 f"~{math.exp(mg):.3g}, bad ~{math.exp(mb):.3g}; log BF "
                 f"{test.model.log_bf(logs):+.1f}{_off_good(test, logs)}, decides at "
                 f"+-{test.threshold:.1f})")
        verdict = {Decision.GOOD: Verdict.GOOD, Decision.BAD: Verdict.BAD}.get(dec, Verdict.SKIP)
        why = (f"two-level {dec.value}: {where}" if verdict is not Verdict.SKIP
               else f"undecided: {where}")
        return Outcome(commit=evaluation.commit, verdict=verdict, reason=why, measurement=m)


    def learn(self, evaluation: Evaluation, role: Role, outcome: Outcome) -> None:
        """A bisect step's (or a confirmation's) servers teach the model, on the side it was
        judged (judged again: its servers are moved, not added twice); one left undecided
        under ``pair_bound`` falls back (:meth:`_fall_back`)."""
        if (evaluation.measurement is None or role.endpoint or self.test_ is None
                or role not in (Role.BISECT, Role.CONFIRM)):
            return   # (the endpoints are judged by definition: no threshold reference)
        logs = [to_logs(g) for g in self.groups_of(evaluation)]
        dec = _DECISION.get(outcome.verdict, Decision.UNKNOWN)
        self.test_ = self._unlearned(self.learned.pop(evaluation.commit, None)).learn(logs, dec)
        if dec in (Decision.GOOD, Decision.BAD):
            self.learned[evaluation.commit] = logs
        elif self.pair_bound:
            self.undecided.add(evaluation.commit)
            self._fall_back(evaluation.commit)


_DECISION = {Verdict.GOOD: Decision.GOOD, Verdict.BAD: Decision.BAD}


def _off_good(test: CommitTest, logs: list[Group]) -> str:
    """The plateau evidence (off the good end by the smallest change that matters)."""
    if not test.step_change:
        return ""
    return f", off the good end {test.model.log_bf_step(logs, test.step_change):+.1f}"




class TwoLevelTrial(PolicyTrial):
    """One commit under the two-level test: the test it samples under (None: an endpoint, or
    before calibration: the policy's current test), its servers so far (None: not started),
    the last server's evaluation and the earlier servers' measurements."""

    def __init__(self, policy: TwoLevelPolicy, commit: str, role: Role,
                 test: CommitTest | None) -> None:
        super().__init__(policy, commit, role,
                         policy.more_for(test, []) if test is not None else None)
        self.p, self.test = policy, test
        self.groups: list[list[float]] | None = [] if test is not None else None
        self.last: Evaluation | None = None
        self.kept: list[Measurement] = []

    def final(self, known: Evaluation) -> bool:
        """Is a cached evaluation decided under this trial's test (else it is measured
        again)? Unavailable commits and failures are final (a skip)."""
        if known.measurement is None or self.p.test_ is None:
            return True
        test = self.test or self.p.test
        return test.final([to_logs(g) for g in self.p.groups_of(known)])

    def resume(self, known: Evaluation) -> MoreSamples | None:
        """A known commit not decided under its test (a confirmation at the bound, or one
        measured under an earlier model): its servers so far stay; the next server's
        ``more`` counts them."""
        groups = self.p.groups_of(known)
        if self.test is None or known.measurement is None or not groups:
            return None
        self.groups, self.last, self.kept = groups, known, []
        return self.p.more_for(self.test, groups)

    def next_probe(self, evaluation: Evaluation) -> Again | None:
        """After one server: None when the commit is decided (then :meth:`evaluation`),
        else a fresh server with its ``more``."""
        if self.groups is None:
            return None
        test = self.test or self.p.test
        s = self.p.samples(evaluation)
        if evaluation.measurement is None or not s:
            return None  # a failed server: decide with what there is
        if self.last is not None and self.last.measurement is not None:
            self.kept.append(self.last.measurement)
        self.groups.append(s)
        self.last = evaluation
        if test.final([to_logs(g) for g in self.groups]):
            return None
        return Again(self.p.more_for(test, self.groups))

    def evaluation(self, last: Evaluation) -> Evaluation:
        """The commit's evaluation once decided (merged over its servers)."""
        groups, prev, kept = self.groups or [], self.last, self.kept
        self.groups, self.last, self.kept = None, None, []
        if prev is None or not groups:
            return last
        return self.p.merged(prev, groups, kept)

    def verdict(self, evaluation: Evaluation) -> Outcome:
        return self.p.decide(evaluation, self.role, self.test)
