"""The studies' bench: the bisect core's parts, reused as they are.

A study (files and hunks, dependency pins, knobs) judges commits the way ``vllm-bisect
run``, the ``git bisect run`` hook and the culprit verification do: one
:class:`~vllm_bisect.bisect.policies.base.VerdictPolicy` chosen from the spec
(:func:`~vllm_bisect.bisect.policies.make_policy`, ``verdict.strategy = "auto"`` resolved
from the symptom), settled on the culprit's parent (the good endpoint) and the culprit (the
bad one) by the core's own endpoint checks (``verify_endpoints``, or ``calibrate_endpoints``
for the sequential and two-level tests), then every scratch commit tested through a core
:class:`~vllm_bisect.bisect.tester.Tester` (a
:class:`~vllm_bisect.bisect.state.store.MeasurementStore` and a
:class:`~vllm_bisect.bisect.measurement.measurer.Measurer`; a learning policy learns from each subset as
from a bisect step). Nothing here judges.

Measurements are keyed by ``spec.measurement_key(commit)`` like the bisect's: the store
looks in the studies' own journal (``SESSION/studies/journal.sqlite``, a core
``SessionJournal``), then in the shared result cache (where the bisect put the culprit and
its parent). A study interrupted at any point resumes without measuring again: its searches
are deterministic and the judged evaluations are replayed in the same order (a learning
policy ends in the same state).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import git

from vllm_bisect.bisect.bench import first_slot
from vllm_bisect.bisect.core import Core
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.policies import Plan, make_policy, resolve
from vllm_bisect.bisect.policies.base import Role, VerdictPolicy
from vllm_bisect.bisect.range import CommitInfo, CommitRange, info
from vllm_bisect.bisect.search.endpoints import Settle, settle
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.state.session import Session
from vllm_bisect.bisect.wiring import CoreOver, open_session
from vllm_bisect.builders import Builder, make_builder
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Measurement, Verdict
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict.auto import Choice

logger = logging.getLogger(__name__)
JOURNAL_DIR = "studies"   # SESSION/studies/journal.sqlite


@dataclass(frozen=True)
class StudyTrial:
    study: str
    label: str
    commit: str
    verdict: Verdict
    reason: str
    measurement: Measurement | None
    fresh: bool          # measured now (a build and its servers), not reused
    artifact: str | None = None


OnTrial = Callable[[StudyTrial], None]
OnPhase = Callable[[str, str], None]


class _Events(NullEvents):
    """The core's progress as ``on_phase`` lines: what is tested next (before its build
    and servers), then each server's steps, so a study is never silent for long."""

    def __init__(self, on_phase: OnPhase | None) -> None:
        self.phase = on_phase

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        # a trial's CommitInfo carries its label as the subject; an endpoint its commit's
        self.on_phase(commit.sha, f"testing {commit.subject}" if role == Role.BISECT
                      else f"{role}: {commit.subject}")

    def on_phase(self, commit: str, phase: str) -> None:
        if self.phase is not None:
            self.phase(commit, phase)


class StudyBench:
    """One policy, settled once on (parent, culprit); a Tester per measured spec (a knob
    setting is another spec: another measurement key, the same policy)."""

    def __init__(self, repo: git.Repo, cache_dir: Path, session: Session,
                 on_trial: OnTrial | None = None, on_phase: OnPhase | None = None) -> None:
        self.repo = repo
        self.cache_dir = cache_dir
        self.session = session
        self.journal = SessionJournal(session.path / JOURNAL_DIR)
        self.cache = ResultCache(cache_dir / "results.sqlite")
        self.events = _Events(on_phase)
        self.on_trial = on_trial
        self._builders: dict[str, Builder] = {}
        self._cores: dict[str, Core] = {}
        self._sessions = ExitStack()   # each measured spec's session, open until close()
        self.policy: VerdictPolicy | None = None
        self.plan: Plan | None = None   # settled once per (parent, culprit): settle()
        self.rng: CommitRange | None = None
        self.settled: tuple[str, str] | None = None
        self.fresh = 0          # commits measured now (a two-level test may start several
        #                         servers for one)

    def close(self) -> None:
        try:
            self._close_cores()
        finally:
            self.cache.close()
            self.journal.close()

    def _close_cores(self) -> None:
        """Every spec's session closed (its bench: executor, prefetcher)."""
        self._cores.clear()
        stack, self._sessions = self._sessions, ExitStack()
        stack.close()

    def _core(self, spec: BisectSpec) -> Core:
        assert self.policy is not None and self.rng is not None, "settle() first"
        key = spec.measurement_key("")
        if key not in self._cores:
            bkey = spec.build.model_dump_json()
            if bkey not in self._builders:
                self._builders[bkey] = make_builder(spec, self.repo, self.cache_dir,
                                                    self.session.logs)
            assert self.plan is not None
            opened = self._sessions.enter_context(open_session(
                spec, self.cache_dir, session=self.session, builder=self._builders[bkey],
                events=self.events, slots=first_slot(spec), tell_waits=False,
                cache=self.cache, core=CoreOver(self.rng, self.journal, self.policy,
                                                self.plan)))
            assert opened.core is not None
            self._cores[key] = opened.core
        return self._cores[key]

    def settle(self, spec: BisectSpec, parent: str, culprit: str, tests: int,
               require: bool = True) -> Choice:
        """Choose the spec's verdict policy and settle it on the parent (good) and the
        culprit (bad): verified by thresholds, or calibrated on (sequential, two-level);
        ``NotReproduced`` unless they judge good and bad. ``tests``: about how many commits
        the study will judge (a learning policy splits its error budget over them).
        ``require=False`` (knobs: the symptom may show under another setting only): a
        threshold policy only measures the healthy end when its thresholds are relative to
        it; a learning policy still needs both ends to differ."""
        if self.settled == (parent, culprit):
            assert self.plan is not None
            return self.plan.choice
        self.plan = plan = resolve(spec, per_commit=True)   # (each trial's commit judged alone)
        self.policy = make_policy(spec, plan.strategy)
        self.rng = CommitRange(good=info(self.repo.commit(parent)),
                               bad=info(self.repo.commit(culprit)),
                               commits=(info(self.repo.commit(culprit)),))
        self._close_cores()   # (judged by the previous policy)
        logger.info("verdict strategy %s: %s", plan.strategy.value, plan.reason)
        t = self._core(spec).tester
        try:
            settle(t, Settle.SEARCH if require else Settle.LOOSE, tests)
        except NotReproduced as e:
            raise NotReproduced(f"the culprit's parent (good) and the culprit (bad) do not "
                                f"reproduce the symptom: {e.message}",
                                hint=e.hint or "re-run the bisect") from None
        self.settled = (parent, culprit)
        last = {o.commit: o for o in t.probed}
        for sha, what in ((parent, f"{parent[:12]}: good endpoint"),
                          (culprit, f"{culprit[:12]}: bad endpoint")):
            o = last.get(sha)
            if o is None:
                continue
            fresh = any(not x.from_cache for x in t.probed if x.commit == sha)
            self._report(StudyTrial("endpoints", what, sha, o.verdict, o.reason, o.measurement,
                                    fresh))
        return plan.choice

    def _report(self, trial: StudyTrial) -> None:
        self.fresh += trial.fresh
        if self.on_trial is not None:
            self.on_trial(trial)

    def trial(self, spec: BisectSpec, commit: str, *, study: str, label: str,
              retries: int | None = None) -> StudyTrial:
        """Test ``commit`` (a scratch commit, or a knob setting's spec) through the core:
        looked up, else measured; judged by the settled policy as a bisect step.
        ``retries``: servers tried again after a failure (default ``ops.retries``)."""
        t = self._core(spec).with_retries(spec.ops.retries if retries is None else retries).tester
        o = t.test(CommitInfo(commit, label, "", ""), Role.BISECT, 0)
        ev = t.evaluations.get(commit)
        trial = StudyTrial(study, label, commit, o.verdict, o.reason, o.measurement,
                           not o.from_cache, ev.artifact if ev is not None else None)
        self._report(trial)
        return trial

    def strategy(self) -> dict[str, str]:
        """The verdict strategy that judged (for the result JSON)."""
        p = self.plan
        return {"strategy": p.strategy.value, "strategy_reason": p.reason} if p else {}
