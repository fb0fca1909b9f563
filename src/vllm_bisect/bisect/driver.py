"""The bisect loop: verify both endpoints, then binary search, journaling every outcome.

The driver knows nothing of terminals: it reports through an :class:`EventHandler`
(mozregression's split between bisector core and UI). Measurements come from a cache
(the result cache, then this session's journal) before the evaluator is asked.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from vllm_bisect.bisect.executor import Executor
from vllm_bisect.bisect.journal import ResultCache, SessionJournal
from vllm_bisect.bisect.multisection import ideal_rounds
from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.bisect.strategy import Step, lookahead, next_step
from vllm_bisect.bisect.terms import Terms
from vllm_bisect.builders.prefetch import Prefetcher
from vllm_bisect.errors import NotReproduced, untestable_hint
from vllm_bisect.models import (
    EvalStatus,
    Evaluation,
    Measurement,
    Outcome,
    Verdict,
    Verification,
)
from vllm_bisect.spec import BisectSpec, Symptom
from vllm_bisect.verdict import Judge
from vllm_bisect.verdict.auto import Choice, Strategy, choose_strategy
from vllm_bisect.verdict.sequential import (
    SequentialJudge,
    SequentialTest,
    SeqVerdict,
    calibrate,
    itl_samples,
)
from vllm_bisect.verdict.symptoms import CRASH_MARKERS

if TYPE_CHECKING:
    from vllm_bisect.bisect.twolevel_policy import TwoLevelPolicy

logger = logging.getLogger(__name__)


class CommitEvaluator(Protocol):
    """Measures one commit (``bisect.evaluate.Evaluator`` builds, serves and probes).
    ``more(measurement)`` says how many more requests to probe on the same server."""

    def evaluate(self, commit: str,
                 more: Callable[[Measurement], int] | None = None) -> Evaluation: ...


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
    rounds: int = 0      # search rounds that ran evaluations (a parallel round tests k commits)
    workers: int = 1
    verification: Verification | None = None  # the culprit and its parent, re-measured
    confidence: float | None = None  # bayes: the posterior probability of first_bad
    strategy_chosen: str = ""        # the verdict strategy that ran (auto resolved)
    strategy_reason: str = ""        # why (written, or auto's rule)
    search: str = "regression"  # "fix": first_bad is the first fixed commit (terms inverted)


def _dist(xs: list[float]) -> str:
    if not xs:
        return "(none)"
    s = sorted(xs)
    return f"n={len(s)} min {s[0]:.2f} median {s[len(s) // 2]:.2f} max {s[-1]:.2f}"


class Driver:
    def __init__(self, spec: BisectSpec, rng: CommitRange, evaluator: CommitEvaluator,
                 journal: SessionJournal, cache: ResultCache | None,
                 events: EventHandler | None = None, prefetcher: Prefetcher | None = None,
                 executor: Executor | None = None) -> None:
        self.spec = spec
        self.rng = rng
        self.evaluator = evaluator
        self.journal = journal
        self.cache = cache
        self.events: EventHandler = events or NullEvents()
        self.prefetcher = prefetcher
        self.executor = executor if executor is not None and executor.workers > 1 else None
        self.workers = executor.workers if executor is not None else 1
        self.judge = Judge(spec.verdict, spec.min_output_tokens())
        self.terms = Terms(spec.range.search)
        self.session_evals = journal.evaluations()
        self.server_starts = 0
        self.sequential: SequentialJudge | None = None
        # parallel: the judge a running commit samples under (the fit learns meanwhile; the
        # commit is decided by the judge that decided when to stop sampling)
        self.sampled_by: dict[str, SequentialJudge] = {}
        self.probed: list[Outcome] = []
        self.evaluations: dict[str, Evaluation] = {}
        self.choice = choose_strategy(spec.verdict)
        if self.terms.fix and self.choice.strategy is Strategy.BAYES:  # (not in a fix search)
            self.choice = Choice(Strategy.THRESHOLD, "auto: a fix search runs the threshold "
                                 "strategy for this symptom (bayes does not search for fixes)")
        # the two-level test (its own module: calibration, "more requests or a fresh server?")
        self.policy: TwoLevelPolicy | None = None
        if self.choice.strategy is Strategy.TWOLEVEL:
            from vllm_bisect.bisect.twolevel_policy import TwoLevelPolicy

            self.policy = TwoLevelPolicy(self)

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
    def lookup(self, commit: str, more: Callable[[Measurement], int] | None = None
               ) -> Evaluation | None:
        """A measurement this session or the result cache already has (a cached one with too
        few samples for ``more`` does not count: it is measured again)."""
        key = self.spec.measurement_key(commit)
        for source in (self.session_evals, self.cache):
            found = source.get(key) if source is not None else None
            if found is not None and self.policy is not None and not self.policy.final(found):
                continue  # the two-level test wants more of it: measured again
            if found is not None and not (more and found.measurement and more(found.measurement)):
                return found
        return None

    def fresh(self, ev: Evaluation) -> None:
        """Account for an evaluation that was just run (by the evaluator or a worker)."""
        if ev.status is not EvalStatus.UNAVAILABLE:
            self.server_starts += 1
        if self.cache is not None:
            self.cache.put(self.spec.measurement_key(ev.commit), ev)

    def _retries(self) -> int:
        return 0 if self.spec.verdict.symptom is Symptom.CRASH else self.spec.ops.retries

    def evaluate_fresh(self, commit: str, more: Callable[[Measurement], int] | None = None
                       ) -> Evaluation:
        """Ask the evaluator (no cache). A server that died or a probe that failed is tried
        again on a fresh server ``ops.retries`` times (one flaky crash at an endpoint must
        not end a long bisect); following the crash symptom, the failure is the answer."""
        left = self._retries()
        while True:
            ev = self.evaluator.evaluate(commit, more) if more else self.evaluator.evaluate(commit)
            if not self._retry(ev, left):
                return ev
            left -= 1

    def _retry(self, ev: Evaluation, left: int) -> bool:
        """Whether a failed evaluation is tried again (``left`` retries remain); a retried
        attempt's server start is counted here (it is not cached)."""
        if ev.status is not EvalStatus.FAILED or left <= 0:
            return False
        self.server_starts += 1
        logger.warning("%s failed (%s); trying again on a fresh server", ev.commit[:12],
                       ev.reason)
        return True

    def _evaluation(self, commit: str, more: Callable[[Measurement], int] | None = None
                    ) -> tuple[Evaluation, bool]:
        found = self.lookup(commit, more)
        if found is not None:
            return found, True
        ev = self.evaluate_fresh(commit, more)
        self.fresh(ev)
        return ev, False

    def _more(self) -> Callable[[Measurement], int] | None:
        seq = self.sequential
        return None if seq is None else (lambda m: seq.more(m.requests))

    def test(self, info: CommitInfo, role: str, steps_left: int,
             more: Callable[[Measurement], int] | None = None) -> Outcome:
        if self.policy is not None and self.policy.test_ is not None and role == "bisect":
            return self.policy.test_commit(info, role, steps_left)
        self.events.on_testing(info, role, steps_left)
        ev, cached = self._evaluation(info.sha, more or self._more())
        return self.record(info, role, ev, cached)

    def test_batch(self, items: list[tuple[CommitInfo, str, int]],
                   more: Callable[[Measurement], int] | None = None) -> list[Outcome]:
        """Test several commits (the endpoints): at once on the executor's workers when there
        is one, recorded in the order given (the good endpoint's reference comes first)."""
        if self.executor is None:
            return [self.test(info, role, steps, more) for info, role, steps in items]
        results: dict[str, tuple[Evaluation, bool]] = {}
        missing: list[str] = []
        for info, role, steps in items:
            self.events.on_testing(info, role, steps)
            found = self.lookup(info.sha, more or self._more())
            if found is not None:
                results[info.sha] = (found, True)
            elif info.sha not in missing:
                missing.append(info.sha)
        for sha, ev in self.evaluate_all(missing, more or self._more()).items():
            self.fresh(ev)
            results[sha] = (ev, False)
        return [self.record(info, role, *results[info.sha]) for info, role, _ in items]

    def evaluate_all(self, shas: list[str], more: Callable[[Measurement], int] | None = None
                     ) -> dict[str, Evaluation]:
        """Fresh evaluations of ``shas`` (no cache): at once on the executor's workers, else
        one after another. Ctrl-C or a fatal error tears every worker down first."""
        if self.executor is None:
            return {sha: self.evaluate_fresh(sha, more) for sha in shas}
        out: dict[str, Evaluation] = {}
        tasks = {self.executor.submit(sha, more): sha for sha in shas}
        retries = {sha: self._retries() for sha in shas}
        try:
            while tasks:
                for done in self.executor.wait():
                    sha = tasks.pop(done.task)
                    if self._retry(done.evaluation, retries[sha]):
                        retries[sha] -= 1
                        tasks[self.executor.submit(sha, more)] = sha
                        continue
                    out[sha] = done.evaluation
        except BaseException:
            self.executor.close()
            raise
        return out

    def record(self, info: CommitInfo, role: str, ev: Evaluation, cached: bool) -> Outcome:
        """Judge an evaluation, journal it, and tell the event handler."""
        outcome = self.judged(info, role, ev, cached)
        key = self.spec.measurement_key(info.sha)
        if not cached or key not in self.session_evals:
            self.journal.record(key, outcome, ev)
            self.session_evals[key] = ev
        self.probed.append(outcome)
        self.evaluations[info.sha] = ev
        self.events.on_outcome(info, outcome)
        return outcome

    def _crashed(self, ev: Evaluation) -> bool:
        """Following the crash symptom, a server that died or a probe that failed is bad."""
        return (self.spec.verdict.symptom is Symptom.CRASH and ev.status is EvalStatus.FAILED
                and any(k in ev.reason for k in CRASH_MARKERS))

    def judged(self, info: CommitInfo, role: str, ev: Evaluation, cached: bool = False
               ) -> Outcome:
        """The verdict on one evaluation (the good endpoint's also sets the reference)."""
        if self.policy is not None and (
                two := self.policy.judged(info, role, ev, cached)) is not None:
            return two
        if ev.measurement is None and self._crashed(ev):
            outcome = Outcome(commit=info.sha, verdict=Verdict.BAD,
                              reason=f"crashed: {ev.reason}", from_cache=cached)
        elif ev.measurement is None:
            outcome = Outcome(commit=info.sha, verdict=Verdict.SKIP,
                              reason=ev.reason or ev.status.value, from_cache=cached)
        elif self.sequential is not None and role in ("bisect", "verify"):
            judge = self.sampled_by.pop(info.sha, None) or self.sequential
            v, why = judge.decide(ev.measurement.requests)
            if role == "bisect":  # its samples sharpen the fit for the next commit
                self.sequential = self.sequential.learn(ev.measurement.requests, v)
            verdict = {SeqVerdict.GOOD: Verdict.GOOD, SeqVerdict.BAD: Verdict.BAD}.get(
                v, Verdict.SKIP)
            outcome = Outcome(commit=info.sha, verdict=verdict, reason=why,
                              measurement=ev.measurement, from_cache=cached)
        else:
            if info.sha == self.terms.reference(self.rng).sha and self.judge.needs_reference:
                self.judge = self.judge.with_reference(ev.measurement)  # itl_factor's baseline
            j = self.judge.judge(ev.measurement)
            outcome = Outcome(commit=info.sha, verdict=j.verdict, reason=j.reason,
                              measurement=ev.measurement, from_cache=cached)
        if self.sequential is None or role not in ("bisect", "verify"):  # absolute verdicts
            outcome = outcome.model_copy(update={"verdict": self.terms.verdict(outcome.verdict)})
        return outcome

    # -- the search --------------------------------------------------------------------
    def calibrate_endpoints(self) -> None:
        """Sequential strategy: n samples per endpoint; refuse unless they clearly differ."""
        v, rng = self.spec.verdict, self.rng
        n = len(rng.commits)
        first = next_step(n, {n - 1: Verdict.BAD}).test
        self._prefetch([rng.bad.sha] + ([rng.commits[first].sha] if first is not None else []))
        steps = math.ceil(math.log2(max(2, n)))
        # the error budget is split over the commits the search may judge: k per round
        tests = max(steps, self.workers * ideal_rounds(n, self.workers))
        need = v.calibration_samples
        # p <= 0.01 overall, spent over up to four looks (1x, 2x, 4x, 8x the samples): 0.008
        # at the first (5 against 5 fully separated gives p = 0.0079), 0.002 / 3 at each other
        p_max = 0.008
        while True:  # not yet distinguishable, or not precisely: double the samples, up to 8x
            def more(m: Measurement, need: int = need) -> int:
                return max(0, need - len(itl_samples(m.requests)))

            good, bad = self.test_batch([(rng.good, "good endpoint", steps + 1),
                                         (rng.bad, "bad endpoint", steps)], more)
            for o, name in ((good, "good"), (bad, "bad")):
                if o.measurement is None:
                    raise NotReproduced(f"the {name} endpoint could not be tested: {o.reason}")
            assert good.measurement is not None and bad.measurement is not None
            g, b = itl_samples(good.measurement.requests), itl_samples(bad.measurement.requests)
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

    def verify_endpoints(self) -> None:
        """One at a time: the good endpoint first (no need to build bad if good fails)."""
        rng = self.rng
        steps = math.ceil(math.log2(max(2, len(rng.commits))))
        n = len(rng.commits)
        first = next_step(n, {n - 1: Verdict.BAD}).test
        self._prefetch([rng.bad.sha] + ([rng.commits[first].sha] if first is not None else []))
        (ref_end, role), (other, role2) = self.terms.endpoints(rng)  # the reference first
        one = self.test(ref_end, role, steps + 1)
        if one.verdict is Verdict.SKIP and ref_end is rng.good:
            self.check_endpoints(one, None)
        two = self.test(other, role2, steps)
        self.check_endpoints(*((one, two) if ref_end is rng.good else (two, one)))

    def check_endpoints(self, good: Outcome, bad: Outcome | None) -> None:
        """Raise NotReproduced unless good judged good and bad judged bad."""
        rng = self.rng
        if good.verdict is Verdict.SKIP:
            raise NotReproduced(f"the good endpoint {rng.good.sha[:12]} could not be tested: "
                                f"{good.reason}", hint=untestable_hint(good.reason))
        problems = []
        t = self.terms
        if good.verdict is not Verdict.GOOD:
            problems.append(f"{t.old} endpoint {rng.good.sha[:12]} judged {good.verdict} "
                            f"(expected {t.old}): {good.reason}")
        if bad is not None and bad.verdict is not Verdict.BAD:
            problems.append(f"{t.new} endpoint {rng.bad.sha[:12]} judged {bad.verdict} "
                            f"(expected {t.new}): {bad.reason}")
        if problems:
            raise NotReproduced("did not reproduce: " + "; ".join(problems),
                                hint="check the verdict thresholds against both measurements "
                                     "(shown above), or the range")

    def run(self) -> BisectResult:
        t0 = time.monotonic()
        rng = self.rng
        self.events.on_range(rng)
        strategy = self.choice.strategy
        logger.info("verdict strategy %s: %s", strategy.value, self.choice.reason)
        self.events.on_phase("", f"verdict strategy {strategy.value}: {self.choice.reason}")
        confidence = None
        try:
            step, rounds, confidence = self._run_strategy(strategy)
        except NotReproduced:
            if not self._shows_in_some_runs():
                raise
            step, rounds, confidence = self._run_strategy(Strategy.BAYES)
        first_bad = rng.sha(step.culprit) if step.culprit is not None else None
        verification = None
        if first_bad is not None and self.spec.verdict.verify_samples > 0:
            from vllm_bisect.bisect.verify import verify_culprit

            verification = verify_culprit(self, first_bad)
        return BisectResult(range=rng, first_bad=first_bad,
                            candidates=[rng.sha(i) for i in step.candidates],
                            probed=self.probed, evaluations=self.evaluations,
                            server_starts=self.server_starts, wall_s=time.monotonic() - t0,
                            rounds=rounds, workers=self.workers, verification=verification,
                            confidence=confidence, search=self.terms.search.value,
                            strategy_chosen=self.choice.strategy.value,
                            strategy_reason=self.choice.reason)

    def _run_strategy(self, strategy: Strategy) -> tuple[Step, int, float | None]:
        """The endpoints and the search under one strategy: (step, rounds, confidence)."""
        if strategy == "bayes":  # flaky symptoms: runs chosen by information, one at a time
            from vllm_bisect.bisect.bayes_search import BayesSearch

            bayes = BayesSearch(self)
            step, rounds = bayes.run()
            return step, rounds, bayes.confidence
        if self.executor is not None:
            from vllm_bisect.bisect.parallel import ParallelSearch

            if strategy == "sequential":
                self.calibrate_endpoints()
            elif self.policy is not None:
                self.policy.calibrate()
            # (threshold verdicts: the endpoints run beside the first interior commits)
            step, rounds = ParallelSearch(self, self.executor).run(
                endpoints=strategy not in (Strategy.SEQUENTIAL, Strategy.TWOLEVEL))
            return step, rounds, None
        if strategy == "sequential":
            self.calibrate_endpoints()
        elif self.policy is not None:
            self.policy.calibrate()
        else:
            self.verify_endpoints()
        step, rounds = self._search()
        return step, rounds, None

    def _shows_in_some_runs(self) -> bool:
        """auto, a cap or a correctness change: the endpoints did not reproduce because the
        bad endpoint's run did not show the symptom. It may show in some runs only: the
        search goes on under bayes (which runs both endpoints again to learn how often)."""
        v, rng = self.spec.verdict, self.rng
        if (v.strategy != "auto" or self.choice.strategy is not Strategy.THRESHOLD
                or v.symptom not in (Symptom.LENGTH, Symptom.CORRECTNESS) or self.terms.fix):
            return False
        outs = {o.commit: o for o in self.probed}
        good, bad = outs.get(rng.good.sha), outs.get(rng.bad.sha)
        if (good is None or bad is None or good.verdict is not Verdict.GOOD
                or bad.verdict is not Verdict.GOOD):
            return False
        shown = 0  # does it show in some runs?
        while not shown and len([o for o in self.probed if o.commit == rng.bad.sha]) <= (
                v.calibration_runs):
            ev = self.evaluate_fresh(rng.bad.sha)
            self.fresh(ev)
            o = self.record(rng.bad, "bad endpoint", ev, cached=False)
            shown = sum(1 for o in self.probed if o.commit == rng.bad.sha) if (
                o.verdict is Verdict.BAD) else 0
        if not shown:
            return False  # not in any of them: it does not reproduce
        self.choice = Choice(Strategy.BAYES, f"auto: the bad endpoint did not show the "
                             f"{v.symptom.value} symptom in its first run, then in run {shown}: "
                             "it shows in some runs only: runs are repeated where they tell "
                             "most (bayes)")
        logger.warning("%s", self.choice.reason)
        self.events.on_phase("", f"verdict strategy bayes: {self.choice.reason}")
        return True

    def _search(self) -> tuple[Step, int]:
        """Binary search, one commit at a time, prefetching what may come next."""
        rng = self.rng
        n = len(rng.commits)
        rounds = 0
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
            rounds += 0 if outcome.from_cache else 1
            verdicts[step.test] = outcome.verdict
            following = next_step(n, verdicts).test
            self._keep_only([rng.commits[following].sha] if following is not None else [])
        return step, rounds
