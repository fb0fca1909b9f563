"""The driver side of ``verdict.strategy = "bayes"``: runs, journal, and the posterior.

Each run of a commit is one evaluation (server start and probe) judged by the threshold
judge (or the crash rule); every run is journaled, so a resumed session rebuilds the same
posterior. Both endpoints are run ``calibration_runs`` times first: how often the bad one
shows the symptom is the flake rate ``q``; false alarms at the good one give ``eps``. The
first run of a commit may come from the result cache; later runs of it are always fresh.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from vllm_bisect.bisect.bayes import (
    FlakeModel,
    credible_set,
    decided,
    next_commit,
    posterior,
)
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.strategy import Step
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import EvalStatus, Outcome, Verdict

if TYPE_CHECKING:
    from vllm_bisect.bisect.driver import Driver

logger = logging.getLogger(__name__)


class BayesSearch:
    def __init__(self, driver: Driver) -> None:
        self.d = driver
        self.n = len(driver.rng.commits)
        self.runs: dict[int, list[bool]] = {}
        self.skipped: set[int] = set()
        self.tried: set[int] = set()  # commits looked up once: every later run is fresh
        self.count = 0
        self.confidence: float | None = None
        keys = {driver.spec.measurement_key(driver.rng.sha(i)): i for i in range(-1, self.n)}
        for key, history in driver.journal.verdict_history().items():
            if key not in keys:
                continue
            i = keys[key]
            for verdict, status in history:
                self._note(i, verdict, status)

    def _note(self, i: int, verdict: Verdict, status: str) -> None:
        if verdict is Verdict.SKIP:
            if status == EvalStatus.UNAVAILABLE.value:
                self.skipped.add(i)
            return
        self.runs.setdefault(i, []).append(verdict is Verdict.BAD)

    def _run(self, i: int, role: str) -> Outcome:
        d = self.d
        info: CommitInfo = d.rng.good if i == -1 else d.rng.commits[i]
        left = max(0, d.spec.verdict.max_runs - self.count)
        if not self.runs.get(i) and i not in self.skipped and i not in self.tried:
            # the first run may come from the cache (once: a cached failure, say a server
            # that died, must not be looked up again and again)
            outcome = d.test(info, role, left)
            self.tried.add(i)
            fresh = not outcome.from_cache
        else:
            d.events.on_testing(info, role, left)
            ev = d.evaluate_fresh(info.sha)
            d.fresh(ev)
            outcome = d.record(info, role, ev, cached=False)
            fresh = True
        self.count += 1 if fresh else 0
        status = (d.evaluations.get(info.sha).status.value  # type: ignore[union-attr]
                  if info.sha in d.evaluations else "")
        self._note(i, outcome.verdict, status)
        return outcome

    def _run_endpoint(self, i: int, role: str, need: int) -> None:
        tries = 0
        while len(self.runs.get(i, [])) < need:
            if i in self.skipped or tries > 2 * need:
                raise NotReproduced(f"the {role} could not be run {need} times",
                                    hint="pick endpoints that build and serve")
            self._run(i, role)
            tries += 1

    def _calibrate(self) -> FlakeModel:
        """Run both endpoints ``calibration_runs`` times; a rare symptom (shown fewer than
        twice at the bad endpoint) gets the bad endpoint up to 4x the runs before the flake
        rate is estimated (or the bisect refused)."""
        v = self.d.spec.verdict
        need = v.calibration_runs
        self._run_endpoint(-1, "good endpoint", need)
        bad_need = need
        while True:
            self._run_endpoint(self.n - 1, "bad endpoint", bad_need)
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

    def run(self) -> tuple[Step, int]:
        v = self.d.spec.verdict
        model = self._calibrate()
        while True:
            post = posterior(self.n, self.runs, model)
            top = decided(post, v.confidence)
            if top is not None:
                self.confidence = post[top]
                return Step(culprit=top, candidates=(top,)), self.count
            best = max(range(self.n), key=lambda c: post[c])
            if self.count >= v.max_runs:
                self.confidence = post[best]
                return Step(candidates=tuple(credible_set(post, v.confidence))), self.count
            i = next_commit(post, model, self.skipped)
            if i is None:  # only skipped commits would tell: stop with what is credible
                self.confidence = post[best]
                return Step(candidates=tuple(credible_set(post, v.confidence))), self.count
            self._run(i, "bisect")

