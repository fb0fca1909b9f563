"""Test a commit: look it up, else measure it, judge it by the policy, journal it, report it.

The searches (binary, multisection, bayes), the endpoint checks and the culprit
verification all test commits through one :class:`Tester`, so every way into the core
judges the same way and every judged commit lands in the journal and the event stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm_bisect.bisect.events import EventHandler
from vllm_bisect.bisect.measurement.measurer import Measurer
from vllm_bisect.bisect.policies.base import Again, CommitTrial, MoreSamples, Role, VerdictPolicy
from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.bisect.state.store import MeasurementStore
from vllm_bisect.bisect.terms import Terms
from vllm_bisect.models import Evaluation, Outcome, Phase, Verdict

Item = tuple[CommitInfo, Role, int]  # (commit, role, steps left)

# what a server start for a commit tested in a role counts as: the phase its progress line
# names (a bisect step: whatever runs it, the search or a re-check)
ROLE_PHASES = {Role.GOOD_ENDPOINT: Phase.ENDPOINTS, Role.BAD_ENDPOINT: Phase.ENDPOINTS,
               Role.PROBLEM_ENDPOINT: Phase.ENDPOINTS, Role.FIXED_ENDPOINT: Phase.ENDPOINTS,
               Role.CONFIRM: Phase.CONFIRM, Role.VERIFY_CULPRIT: Phase.VERIFY,
               Role.VERIFY_PARENT: Phase.VERIFY}


def phase_of(role: Role, current: Phase) -> Phase:
    """The phase of a server start for a commit tested as ``role`` while the measurer counts
    ``current``: the role's, except inside a rest check (its searches are its cost)."""
    return current if current is Phase.REST else ROLE_PHASES.get(role, current)


class Tester:
    def __init__(self, rng: CommitRange, store: MeasurementStore, measurer: Measurer,
                 policy: VerdictPolicy, events: EventHandler) -> None:
        self.rng = rng
        self.store = store
        self.measurer = measurer
        self.policy = policy
        self.events = events
        self.terms = Terms(store.spec.range.search)  # which end is which, and named how
        self.probed: list[Outcome] = []
        self.evaluations: dict[str, Evaluation] = {}
        # the commits under test: opened (the policy's trial), not yet judged or dropped
        self.trials: dict[str, CommitTrial] = {}
        # the latest verdict of each commit judged at the whole-bisect bound (Role.CONFIRM)
        self.at_bound: dict[str, Verdict] = {}

    def with_policy(self, policy: VerdictPolicy, measurer: Measurer | None = None) -> Tester:
        """A tester judging by ``policy`` from now on (measuring through ``measurer``, default
        the same), with the commits judged so far."""
        new = Tester(self.rng, self.store, measurer or self.measurer, policy, self.events)
        new.probed, new.evaluations, new.at_bound = self.probed, self.evaluations, self.at_bound
        return new

    def test(self, info: CommitInfo, role: Role, steps_left: int,
             more: MoreSamples | None = None, fresh: bool = False) -> Outcome:
        """``fresh``: measure it again even if a measurement is known (a repeated run)."""
        return self.test_batch([(info, role, steps_left)], more, fresh)[0]

    def test_batch(self, items: Sequence[Item], more: MoreSamples | None = None,
                   fresh: bool = False) -> list[Outcome]:
        """Test several commits (at once on free workers), recorded in the order given (the
        good endpoint's reference comes first). ``more``: the samples wanted (else the
        policy's)."""
        return [o for o, _ in self.run_trials(items, more, fresh)]

    def run_trials(self, items: Sequence[Item], more: MoreSamples | None = None,
                   fresh: bool = False, record: bool = True) -> list[tuple[Outcome, Evaluation]]:
        """The one trial path: each commit opened (its trial; a known evaluation reused unless
        ``fresh``), its first server measured (at once on free workers), further servers
        while its trial asks (:meth:`run_trial`), then judged in the order given; each
        outcome with the evaluation it judged. ``record``: journaled, learned from and
        cached (:meth:`record`); else judged and reported only (culprit verification, which
        keeps its own, uncounted)."""
        found: dict[str, Evaluation] = {}
        missing: dict[str, MoreSamples | None] = {}
        phases: dict[str, Phase] = {}
        for info, role, steps in items:
            self.events.on_testing(info, role, steps)
            known, want = self.lookup(info.sha, role, more, fresh)
            if known is not None:
                found[info.sha] = known
            elif info.sha not in missing:
                missing[info.sha] = want
                phases[info.sha] = phase_of(role, self.measurer.phase)
        measured = self.measurer.measure_all(missing, record, phases)
        for sha in missing:
            measured[sha] = self.run_trial(sha, measured[sha], record)
        out = []
        for info, role, _ in items:
            ev = found.get(info.sha) or measured[info.sha]
            out.append((self.record(info, role, ev, cached=info.sha in found) if record
                        else self.judge_only(info, role, ev), ev))
        return out

    def lookup(self, commit: str, role: Role, more: MoreSamples | None = None,
               fresh: bool = False) -> tuple[Evaluation | None, MoreSamples | None]:
        """A commit about to be tested: its known evaluation (None: measure it) and what its
        first server probes (``more``, else its trial's, opened here). A known evaluation
        the trial does not call final is measured again, going on from its servers so far
        where the trial can (``resume``)."""
        trial = self.open(commit, role)
        want = more or trial.more
        known = None if fresh else self.store.get(commit, want)
        if known is not None and not trial.final(known):
            return None, trial.resume(known) or want
        return known, want

    def open(self, commit: str, role: Role) -> CommitTrial:
        """The commit goes to a server: the policy's trial for it (until it is judged)."""
        trial = self.policy.open(commit, role)
        self.trials[commit] = trial
        return trial

    def drop(self, commit: str) -> None:
        """The commit's runs were cancelled: its trial goes."""
        self.trials.pop(commit, None)

    def next_probe(self, commit: str, ev: Evaluation) -> Again | None:
        """After one server of a commit: a fresh one (its trial asks), or None."""
        trial = self.trials.get(commit)
        return trial.next_probe(ev) if trial is not None else None

    def decided(self, commit: str, ev: Evaluation) -> Evaluation:
        """A commit's evaluation once its trial decided (merged over its servers)."""
        trial = self.trials.get(commit)
        return trial.evaluation(ev) if trial is not None else ev

    def confirm(self, indices: Sequence[int], verdicts: dict[int, Verdict],
                confirmed: set[int]) -> bool:
        """The final pair's interior ends (``indices`` into the range's commits) judged again
        at the whole-bisect bound (``Role.CONFIRM``), at once on free workers; their new
        verdicts go into ``verdicts`` (a changed one moves the search on). True when any was
        measured (a search round), not all known."""
        with self.measurer.during(Phase.CONFIRM):
            outs = self.test_batch([(self.rng.commits[i], Role.CONFIRM, 0) for i in indices])
        for i, o in zip(indices, outs, strict=True):
            confirmed.add(i)
            verdicts[i] = o.verdict
        return not all(o.from_cache for o in outs)

    def reopen_undecided(self, verdicts: dict[int, Verdict]) -> None:
        """After the policy calibrated again: commits that were measured but left undecided
        (a skip with a measurement) are judged again under the new model (from their servers
        so far); unavailable or failed ones stay skipped."""
        for i, v in list(verdicts.items()):
            if v is Verdict.SKIP and 0 <= i < len(self.rng.commits):
                ev = self.evaluations.get(self.rng.commits[i].sha)
                if ev is not None and ev.measurement is not None:
                    del verdicts[i]

    def after_server(self, commit: str, ev: Evaluation,
                     account: bool = True) -> Again | Evaluation:
        """One server of a commit under test measured: a fresh one if its trial asks (an
        :class:`Again`; the two-level test), else its evaluation to judge (merged over its
        servers; cached when ``account``). The parallel search calls it as its workers
        finish; :meth:`run_trial` in a loop."""
        nxt = self.next_probe(commit, ev)
        if nxt is not None:
            return nxt
        merged = self.decided(commit, ev)
        if account and merged is not ev:
            self.store.put(merged)
        return merged

    def run_trial(self, commit: str, ev: Evaluation, account: bool = True) -> Evaluation:
        """A commit's further servers while its trial asks for a fresh one (after its first,
        ``ev``); its evaluation to judge (merged over them), cached when ``account``."""
        trial = self.trials.get(commit)
        phase = (phase_of(trial.role, self.measurer.phase) if trial is not None
                 else self.measurer.phase)
        step = self.after_server(commit, ev, account)
        n = 1
        while isinstance(step, Again):
            n += 1
            self.events.on_phase(commit, f"a fresh server (server {n})")
            with self.measurer.during(phase):
                ev = self.measurer.measure_all({commit: step.more}, account)[commit]
            step = self.after_server(commit, ev, account)
        return step

    @property
    def runs(self) -> CalibrationRuns:
        """What a calibrating policy runs, served over this tester."""
        return CalibrationRuns(self)

    def record(self, info: CommitInfo, role: Role, ev: Evaluation, cached: bool,
               told: bool = True) -> Outcome:
        """Judge an evaluation (by the commit's trial, which ends here), let the policy learn
        from the verdict, journal it, and tell the event handler. Not ``told`` (a rest
        check's servers of a part's ends, kept for its bisect): neither a judged commit of
        the result nor a progress line."""
        outcome = _with_log(self.verdict(info.sha, role, ev), ev).model_copy(
            update={"from_cache": cached})
        self.policy.learn(ev, role, outcome)
        self.store.record(outcome, ev, cached, told)
        if role is Role.CONFIRM:
            self.at_bound[info.sha] = outcome.verdict
        if not told:
            return outcome
        self.probed.append(outcome)
        self.evaluations[info.sha] = ev
        self.events.on_outcome(info, outcome)
        return outcome

    def replay(self, evaluations: Sequence[Evaluation], role: Role) -> None:
        """Judge again, in order, and learn from, evaluations judged by an earlier process
        (the hook's earlier calls): a learning policy is then in the state they left it in.
        Neither journaled nor reported."""
        for ev in evaluations:
            self.policy.learn(ev, role, self.policy.judge(ev, role))

    def judge_only(self, info: CommitInfo, role: Role, ev: Evaluation) -> Outcome:
        """Judge and report, without journaling or learning (culprit verification keeps its
        own; a verification is judged without learning)."""
        outcome = _with_log(self.verdict(info.sha, role, ev), ev)
        self.events.on_outcome(info, outcome)
        return outcome

    def verdict(self, commit: str, role: Role, ev: Evaluation) -> Outcome:
        """The commit's verdict by its trial (which ends here), else by the policy alone."""
        trial = self.trials.pop(commit, None)
        if trial is not None and trial.role is role:
            return trial.verdict(ev)
        return self.policy.judge(ev, role)


class CalibrationRuns:
    """What a calibrating policy runs (:class:`~vllm_bisect.bisect.policies.base.ServerRuns`:
    its calibration and the rest checks), served over a :class:`Tester`: fresh servers (counted
    and cached, not judged), the known measurements, and an endpoint judged and recorded
    through the tester's :meth:`~Tester.record`."""

    def __init__(self, tester: Tester) -> None:
        self.tester = tester

    @property
    def workers(self) -> int:
        return self.tester.measurer.workers

    def endpoints(self) -> list[tuple[str, Role]]:
        t = self.tester
        return [(info.sha, role) for info, role in t.terms.endpoints(t.rng)]

    def known(self, commit: str) -> Evaluation | None:
        return self.tester.store.get(commit)

    def fresh(self, commits: Sequence[str], more: MoreSamples | None) -> list[Evaluation]:
        return self.tester.measurer.fresh_runs(commits, more)

    def testing(self, commit: str, role: Role, steps_left: int) -> None:
        self.tester.events.on_testing(self._info(commit), role, steps_left)

    def record_as(self, commit: str, role: Role, ev: Evaluation, cached: bool,
                  told: bool = True) -> Outcome:
        if not cached:
            self.tester.store.put(ev)
        return self.tester.record(self._info(commit), role, ev, cached, told)

    def _info(self, commit: str) -> CommitInfo:
        rng = self.tester.rng
        return next(c for c in (rng.good, rng.bad, *rng.commits) if c.sha == commit)


def _with_log(outcome: Outcome, ev: Evaluation) -> Outcome:
    """A skip carries its evaluation's log and tail: the event handler shows the cause."""
    if outcome.verdict is not Verdict.SKIP or (ev.log is None and not ev.log_tail):
        return outcome
    return outcome.model_copy(update={"log": ev.log, "log_tail": ev.log_tail})
