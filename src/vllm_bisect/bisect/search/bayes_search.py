"""The driver side of ``verdict.strategy = "bayes"``: runs, journal, and the posterior.

Each run of a commit is one evaluation (server start and probe) judged by the threshold
judge (or the crash rule); every run is journaled, so a resumed session rebuilds the same
posterior. Both endpoints are run ``calibration_runs`` times first: how often the bad one
shows the symptom is the flake rate ``q``; false alarms at the good one give ``eps``. The
first run of a commit may come from the result cache; later runs of it are always fresh.
"""

from __future__ import annotations

import logging

from vllm_bisect.bisect.policies.base import Role
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.search.bayes import (
    FlakeModel,
    credible_set,
    decided,
    marginal,
    next_commit,
)
from vllm_bisect.bisect.search.binary import Found
from vllm_bisect.bisect.search.steps import Step
from vllm_bisect.bisect.tester import Tester
from vllm_bisect.errors import NotReproduced, untestable_hint
from vllm_bisect.models import EvalStatus, Outcome, Verdict

logger = logging.getLogger(__name__)


def note(runs: dict[int, list[bool]], skipped: set[int], i: int, verdict: Verdict,
         status: str) -> None:
    """One run of commit ``i`` (-1: the good endpoint): shown or not, or unbuildable."""
    if verdict is Verdict.SKIP:
        if status == EvalStatus.UNAVAILABLE.value:
            skipped.add(i)
        return
    runs.setdefault(i, []).append(verdict is Verdict.BAD)


def journal_runs(t: Tester) -> tuple[dict[int, list[bool]], set[int]]:
    """Every run this session journaled, by commit index (-1: the good endpoint), and the
    unbuildable commits: a resumed session (or a switch to bayes) starts from them."""
    n = len(t.rng.commits)
    runs: dict[int, list[bool]] = {}
    skipped: set[int] = set()
    keys = {t.store.key(t.rng.sha(i)): i for i in range(-1, n)}
    for key, history in t.store.journal.verdict_history(t.store.judge).items():
        if key in keys:
            for verdict, status in history:
                note(runs, skipped, keys[key], verdict, status)
    return runs, skipped


class BayesSearch:
    def __init__(self, tester: Tester) -> None:
        self.t = tester
        self.n = len(tester.rng.commits)
        self.runs, self.skipped = journal_runs(tester)
        self.tried: set[int] = set()  # commits looked up once: every later run is fresh
        self.count = 0

    def _note(self, i: int, verdict: Verdict, status: str) -> None:
        note(self.runs, self.skipped, i, verdict, status)

    def _run(self, i: int, role: Role) -> Outcome:
        t = self.t
        info: CommitInfo = t.rng.good if i == -1 else t.rng.commits[i]
        left = max(0, t.store.spec.verdict.max_runs - self.count)
        # the first run may come from the cache (once: a cached failure, say a server that
        # died, must not be looked up again and again); later runs are always fresh
        first = not self.runs.get(i) and i not in self.skipped and i not in self.tried
        outcome = t.test(info, role, left, fresh=not first)
        self.tried.add(i)
        self.count += 0 if outcome.from_cache else 1
        self._note(i, outcome.verdict, t.evaluations[info.sha].status.value)
        return outcome

    def _run_endpoint(self, i: int, role: Role, need: int) -> None:
        tries = 0
        while len(self.runs.get(i, [])) < need:
            if i in self.skipped or tries > 2 * need:
                info = self.t.rng.good if i == -1 else self.t.rng.commits[i]
                ev = self.t.evaluations.get(info.sha)
                raise NotReproduced(f"the {role} could not be run {need} times" + (
                    f": {ev.reason}" if ev is not None and ev.reason else ""),
                    hint=untestable_hint(ev.log if ev else None,
                                         network=bool(ev and ev.network),
                                         transient=bool(ev and ev.transient),
                                         advice=ev.hint if ev else "", role=str(role)))
            self._run(i, role)
            tries += 1

    def _calibrate(self) -> FlakeModel:
        """Run both endpoints ``calibration_runs`` times; a rare symptom (shown fewer than
        twice at the bad endpoint) gets the bad endpoint up to 4x the runs before the flake
        rate is estimated (or the bisect refused)."""
        v = self.t.store.spec.verdict
        need = v.calibration_runs
        self._run_endpoint(-1, Role.GOOD_ENDPOINT, need)
        bad_need = need
        while True:
            self._run_endpoint(self.n - 1, Role.BAD_ENDPOINT, bad_need)
            if sum(self.runs[self.n - 1]) >= 2 or bad_need >= 4 * need:
                break
            bad_need *= 2
        good, bad = self.runs[-1], self.runs[self.n - 1]
        if not any(bad):
            raise NotReproduced(f"did not reproduce: the bad endpoint showed the symptom in 0 "
                                f"of {len(bad)} runs",
                                hint="raise verdict.calibration_runs, or check the range")
        if sum(good) / len(good) >= sum(bad) / len(bad):
            raise NotReproduced(f"did not reproduce: the symptom showed in {sum(good)} of "
                                f"{len(good)} good-endpoint runs and {sum(bad)} of {len(bad)} "
                                "bad-endpoint runs", hint="check the range and the verdict")
        model = FlakeModel.estimate(sum(bad), len(bad), sum(good), len(good))
        logger.info("flake model: q = %.2f, eps = %.3f", model.q, model.eps)
        return model

    def run(self) -> Found:
        v = self.t.store.spec.verdict
        self._calibrate()
        while True:
            # q and eps integrated out: the endpoints' few runs are not trusted as the rates
            post, model = marginal(self.n, self.runs)
            top = decided(post, v.confidence)
            if top is not None:
                return Found(Step(culprit=top, candidates=(top,)), self.count, post[top])
            best = max(range(self.n), key=lambda c: post[c])
            i = next_commit(post, model, self.skipped) if self.count < v.max_runs else None
            if i is None:  # out of runs, or only skipped commits would tell: what is credible
                return Found(Step(candidates=tuple(credible_set(post, v.confidence))),
                             self.count, post[best])
            self._run(i, Role.BISECT)
