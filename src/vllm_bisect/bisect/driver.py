"""The bisect loop: verify both endpoints, then binary search, journaling every outcome.

The driver knows nothing of terminals: it reports through an :class:`EventHandler`
(mozregression's split between bisector core and UI). Measurements come from a cache
(the result cache, then this session's journal) before the evaluator is asked.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Protocol

from vllm_bisect.bisect.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.bisect.strategy import lookahead, next_step
from vllm_bisect.builders.prefetch import Prefetcher
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import EvalStatus, Evaluation, Outcome, Verdict
from vllm_bisect.spec import BisectSpec
from vllm_bisect.verdict import Judge

logger = logging.getLogger(__name__)


class CommitEvaluator(Protocol):
    """Measures one commit (``bisect.evaluate.Evaluator`` builds, serves and probes)."""

    def evaluate(self, commit: str) -> Evaluation: ...


class EventHandler(Protocol):
    def on_range(self, rng: CommitRange) -> None: ...
    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None: ...
    def on_phase(self, commit: str, phase: str) -> None: ...
    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None: ...


class NullEvents:
    def on_range(self, rng: CommitRange) -> None:
        pass

    def on_testing(self, commit: CommitInfo, role: str, steps_left: int) -> None:
        pass

    def on_phase(self, commit: str, phase: str) -> None:
        pass

    def on_outcome(self, commit: CommitInfo, outcome: Outcome) -> None:
        pass


@dataclass
class BisectResult:
    range: CommitRange
    first_bad: str | None
    candidates: list[str]
    probed: list[Outcome] = field(default_factory=list)
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    server_starts: int = 0
    wall_s: float = 0.0


class Driver:
    def __init__(self, spec: BisectSpec, rng: CommitRange, evaluator: CommitEvaluator,
                 journal: SessionJournal, cache: ResultCache | None,
                 events: EventHandler | None = None, prefetcher: Prefetcher | None = None) -> None:
        self.spec = spec
        self.rng = rng
        self.evaluator = evaluator
        self.journal = journal
        self.cache = cache
        self.events: EventHandler = events or NullEvents()
        self.prefetcher = prefetcher
        self.judge = Judge(spec.verdict, spec.min_output_tokens())
        self.session_evals = journal.evaluations()
        self.server_starts = 0
        self.probed: list[Outcome] = []
        self.evaluations: dict[str, Evaluation] = {}

    # -- prefetch ----------------------------------------------------------------------
    def _unmeasured(self, shas: list[str]) -> list[str]:
        out = []
        for sha in shas:
            key = self.spec.measurement_key(sha)
            if key in self.session_evals or (self.cache is not None and self.cache.get(key)):
                continue
            out.append(sha)
        return out

    def _prefetch(self, shas: list[str]) -> None:
        if self.prefetcher is not None:
            self.prefetcher.prefetch(self._unmeasured(shas))

    def _keep_only(self, shas: list[str]) -> None:
        if self.prefetcher is not None:
            self.prefetcher.keep_only(shas)

    # -- one commit --------------------------------------------------------------------
    def _evaluation(self, commit: str) -> tuple[Evaluation, bool]:
        key = self.spec.measurement_key(commit)
        for source in (self.session_evals, self.cache):
            found = source.get(key) if source is not None else None
            if found is not None:
                return found, True
        ev = self.evaluator.evaluate(commit)
        if ev.status is not EvalStatus.UNAVAILABLE:
            self.server_starts += 1
        if self.cache is not None:
            self.cache.put(key, ev)
        return ev, False

    def test(self, info: CommitInfo, role: str, steps_left: int) -> Outcome:
        self.events.on_testing(info, role, steps_left)
        ev, cached = self._evaluation(info.sha)
        if ev.measurement is None:
            outcome = Outcome(commit=info.sha, verdict=Verdict.SKIP,
                              reason=ev.reason or ev.status.value, from_cache=cached)
        else:
            if info.sha == self.rng.good.sha and self.judge.needs_reference:
                self.judge = self.judge.with_reference(ev.measurement)  # itl_factor's baseline
            j = self.judge.judge(ev.measurement)
            outcome = Outcome(commit=info.sha, verdict=j.verdict, reason=j.reason,
                              measurement=ev.measurement, from_cache=cached)
        key = self.spec.measurement_key(info.sha)
        if key not in self.session_evals:
            self.journal.record(key, outcome, ev)
            self.session_evals[key] = ev
        self.probed.append(outcome)
        self.evaluations[info.sha] = ev
        self.events.on_outcome(info, outcome)
        return outcome

    # -- the search --------------------------------------------------------------------
    def verify_endpoints(self) -> None:
        rng = self.rng
        steps = math.ceil(math.log2(max(2, len(rng.commits))))
        n = len(rng.commits)
        first = next_step(n, {n - 1: Verdict.BAD}).test
        self._prefetch([rng.bad.sha] + ([rng.commits[first].sha] if first is not None else []))
        good = self.test(rng.good, "good endpoint", steps + 1)
        if good.verdict is Verdict.SKIP:
            raise NotReproduced(f"the good endpoint {rng.good.sha[:12]} could not be tested: "
                                f"{good.reason}", hint="pick a good commit that builds and serves")
        bad = self.test(rng.bad, "bad endpoint", steps)
        problems = []
        if good.verdict is not Verdict.GOOD:
            problems.append(f"good endpoint {rng.good.sha[:12]} judged {good.verdict}: {good.reason}")
        if bad.verdict is not Verdict.BAD:
            problems.append(f"bad endpoint {rng.bad.sha[:12]} judged {bad.verdict}: {bad.reason}")
        if problems:
            raise NotReproduced("did not reproduce: " + "; ".join(problems),
                                hint="check the verdict thresholds against both measurements "
                                     "(shown above), or the range")

    def run(self) -> BisectResult:
        t0 = time.monotonic()
        rng = self.rng
        self.events.on_range(rng)
        self.verify_endpoints()
        n = len(rng.commits)
        verdicts: dict[int, Verdict] = {n - 1: Verdict.BAD}
        while True:
            step = next_step(n, verdicts)
            if step.done:
                break
            assert step.test is not None
            ahead = [rng.commits[i].sha for i in lookahead(n, verdicts, step.test)]
            self._prefetch(ahead)
            left = sum(1 for i in range(-1, n) if i not in verdicts)
            outcome = self.test(rng.commits[step.test], "bisect", math.ceil(math.log2(max(2, left))))
            verdicts[step.test] = outcome.verdict
            following = next_step(n, verdicts).test
            self._keep_only([rng.commits[following].sha] if following is not None else [])
        first_bad = rng.sha(step.culprit) if step.culprit is not None else None
        return BisectResult(range=rng, first_bad=first_bad,
                            candidates=[rng.sha(i) for i in step.candidates],
                            probed=self.probed, evaluations=self.evaluations,
                            server_starts=self.server_starts, wall_s=time.monotonic() - t0)
