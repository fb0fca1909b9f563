"""The driver side of the two-level test (``verdict.strategy = "twolevel"``, auto's choice
for itl, throughput and mtp-speedup): calibration, and per commit "more requests on this
server, or a fresh server?".

The statistics are pure (:mod:`vllm_bisect.verdict.twolevel`); this module only runs
servers through the Driver's evaluator, caches and journals. A commit's servers are kept
together: its evaluation (the last server's, with every server's samples under
``environment["two_level_samples"]``) is cached and journaled once it is decided. The Driver
calls :meth:`calibrate`, :meth:`test` (serial search), :meth:`judged` (recording),
:meth:`final` (is a cached evaluation decided?), and in the parallel search :meth:`start`,
:meth:`again` and :meth:`finish`.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

from vllm_bisect.bisect.multisection import ideal_rounds
from vllm_bisect.bisect.range import CommitInfo
from vllm_bisect.bisect.strategy import next_step
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Evaluation, Measurement, Outcome, Verdict
from vllm_bisect.probes.decode import combine
from vllm_bisect.verdict.auto import direction, log_min_change, per_request, samples_of
from vllm_bisect.verdict.twolevel import (
    CalStatus,
    CommitTest,
    Decision,
    calibration_step,
    to_logs,
)

if TYPE_CHECKING:
    from vllm_bisect.bisect.driver import Driver

logger = logging.getLogger(__name__)
SAMPLES_KEY = "two_level_samples"
CALIBRATION_SERVERS = 8   # per endpoint, at most
SAMPLE_CAP = 3            # x verdict.max_samples: a commit's samples over all its servers
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
    def __init__(self, driver: Driver) -> None:
        self.d = driver
        self.v = driver.spec.verdict
        self.symptom = self.v.symptom
        self.test_: CommitTest | None = None
        self.reason = ""
        self.endpoint_groups: dict[str, list[list[float]]] = {}
        # commits in progress: servers so far, the last evaluation, the test they sample under
        self.groups: dict[str, list[list[float]]] = {}
        self.last: dict[str, Evaluation] = {}
        self.sampled_by: dict[str, CommitTest] = {}
        self.kept: dict[str, list[Measurement]] = {}   # earlier servers' measurements

    @property
    def test(self) -> CommitTest:
        if self.test_ is None:
            raise RuntimeError("the two-level test is used before calibration")
        return self.test_

    # -- samples -------------------------------------------------------------------------
    def samples(self, ev: Evaluation | None) -> list[float]:
        return samples_of(ev.measurement if ev is not None else None, self.symptom)

    def groups_of(self, ev: Evaluation) -> list[list[float]]:
        stored = ev.environment.get(SAMPLES_KEY)
        if isinstance(stored, list):
            return [[float(x) for x in g] for g in stored if isinstance(g, list)]
        s = self.samples(ev)
        return [s] if s else []

    def _more(self, test: CommitTest, before: list[list[float]]) -> More | None:
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
        server's samples under ``environment["two_level_samples"]``."""
        env = {**ev.environment, SAMPLES_KEY: [list(g) for g in groups]}
        m = ev.measurement
        if per_request(self.symptom) and earlier and m is not None:
            first = earlier[0]
            for other in [*earlier[1:], m]:
                first = combine(first, other)
            m = first
        return ev.model_copy(update={"environment": env, "measurement": m})

    def _put(self, ev: Evaluation) -> None:
        if self.d.cache is not None:
            self.d.cache.put(self.d.spec.measurement_key(ev.commit), ev)

    # -- calibration ---------------------------------------------------------------------
    def calibrate(self) -> None:
        d, rng, v = self.d, self.d.rng, self.v
        n = len(rng.commits)
        first = next_step(n, {n - 1: Verdict.BAD}).test
        d._prefetch([rng.bad.sha] + ([rng.commits[first].sha] if first is not None else []))
        steps = math.ceil(math.log2(max(2, n)))
        tests = max(steps, d.workers * ideal_rounds(n, d.workers)) + 2
        threshold = math.log(tests / v.alpha)
        # (the reference end first: the old one, or the fixed one in a fix search)
        roles = {info.sha: (info, role) for info, role in d.terms.endpoints(rng)}
        groups: dict[str, list[list[float]]] = {s: [] for s in roles}
        last: dict[str, Evaluation] = {}
        earlier: dict[str, list[Measurement]] = {s: [] for s in roles}
        fresh: set[str] = set()   # endpoints that needed a server this session
        for sha, (info, role) in roles.items():
            d.events.on_testing(info, role, steps)
            found = d.lookup(sha)
            if found is not None and found.measurement is not None and self.groups_of(found):
                groups[sha], last[sha] = self.groups_of(found), found

        def run(todo: list[str], k: int, reps: int = 1) -> None:
            def more(m: Measurement) -> int:
                return max(0, k - len(samples_of(m, self.symptom)))
            evs = self._many([sha for sha in todo for _ in range(reps)],
                             more if per_request(self.symptom) else None)
            for sha, ev in evs:
                d.fresh(ev)
                fresh.add(sha)
                s = self.samples(ev)
                if ev.measurement is None or not s:
                    raise NotReproduced(f"the {roles[sha][1]} could not be tested: "
                                        f"{ev.reason or 'no samples'}",
                                        hint="pick endpoints that build and serve")
                if sha in last and last[sha].measurement is not None:
                    earlier[sha].append(last[sha].measurement)  # type: ignore[arg-type]
                groups[sha].append(s)
                last[sha] = ev

        todo = [sha for sha in roles if not groups[sha]]
        if todo:
            run(todo, 2)
        while True:
            step = calibration_step(
                [to_logs(g) for g in groups[rng.good.sha]],
                [to_logs(g) for g in groups[rng.bad.sha]],
                min_change=log_min_change(v),
                # a fix search: the new end is the one without the problem
                direction=direction(self.symptom) * (-1 if d.terms.fix else 1),
                threshold=threshold, max_servers=CALIBRATION_SERVERS, server_cost=v.server_cost)
            logger.info("%s", step.reason)
            if step.status is not CalStatus.MORE:
                break
            # k workers: k / 2 fresh servers per endpoint at once (the wall of one)
            run(list(roles), step.requests, max(1, d.workers // 2))
        self.reason = step.reason
        if step.status is CalStatus.READY:
            assert step.model is not None
            self.test_ = CommitTest(step.model, alpha_total=v.alpha, expected_steps=tests,
                                    max_samples=SAMPLE_CAP * v.max_samples,  # 120
                                    max_servers=v.max_servers,
                                    server_cost=v.server_cost,
                                    requests_help=per_request(self.symptom))
        for sha, (info, role) in roles.items():
            ev = self.merged(last[sha], groups[sha], earlier[sha])
            self._put(ev)
            d.record(info, role, ev, cached=sha not in fresh)
        if step.status is CalStatus.REFUSE:
            g, b = groups[rng.good.sha], groups[rng.bad.sha]
            raise NotReproduced(
                f"did not reproduce: {step.reason}; good {self.symptom.value} "
                f"{_dist([x for grp in g for x in grp])} on servers {describe(g)}; bad "
                f"{_dist([x for grp in b for x in grp])} on servers {describe(b)}",
                hint="check the range, or lower verdict.itl_factor / throughput_factor "
                     "(the smallest change that matters)")
        logger.info("two-level calibration: %s", self.reason)

    def _many(self, shas: list[str], more: More | None) -> list[tuple[str, Evaluation]]:
        """Fresh servers for ``shas`` (a commit may repeat): at once on the executor's
        workers, else one after another; a failed server is retried as the Driver does."""
        d = self.d
        if d.executor is None:
            return [(sha, d.evaluate_fresh(sha, more)) for sha in shas]
        ex = d.executor
        tasks = {ex.submit(sha, more): sha for sha in shas}
        left = {t: d._retries() for t in tasks}
        out: list[tuple[str, Evaluation]] = []
        try:
            while tasks:
                for done in ex.wait():
                    sha, n = tasks.pop(done.task), left.pop(done.task)
                    if d._retry(done.evaluation, n):
                        t = ex.submit(sha, more)
                        tasks[t], left[t] = sha, n - 1
                        continue
                    out.append((sha, done.evaluation))
        except BaseException:
            ex.close()
            raise
        return out

    # -- one commit (serial) -------------------------------------------------------------
    def final(self, ev: Evaluation) -> bool:
        """Is a cached evaluation decided under the current test (else it is measured
        again)? Unavailable commits and failures are final (a skip)."""
        if ev.measurement is None or self.test_ is None:
            return True
        return self.test.final([to_logs(g) for g in self.groups_of(ev)])

    def test_commit(self, info: CommitInfo, role: str, steps_left: int) -> Outcome:
        d = self.d
        d.events.on_testing(info, role, steps_left)
        found = d.lookup(info.sha)
        if found is not None:
            return d.record(info, role, found, cached=True)
        return d.record(info, role, self.measure(info.sha), cached=False)

    def measure(self, sha: str) -> Evaluation:
        """Fresh servers for one commit until the test decides (or a server fails): its
        merged evaluation, cached. Culprit verification re-measures this way too."""
        d = self.d
        test = self.test
        groups: list[list[float]] = []
        last: Evaluation | None = None
        kept: list[Measurement] = []
        while True:
            if groups and test.final([to_logs(g) for g in groups]):
                break
            if groups:
                d.events.on_phase(sha, f"a fresh server (servers so far: {describe(groups)})")
            ev = d.evaluate_fresh(sha, self._more(test, groups))
            d.fresh(ev)
            s = self.samples(ev)
            if ev.measurement is None or not s:
                if last is None:
                    return ev
                break  # a later server failed: decide with what there is
            if last is not None and last.measurement is not None:
                kept.append(last.measurement)
            groups.append(s)
            last = ev
        assert last is not None
        merged = self.merged(last, groups, kept)
        self._put(merged)
        return merged

    # -- parallel: a worker finished one server of a commit ------------------------------
    def start(self, sha: str) -> More | None:
        """A commit goes to a worker: the test it samples under, and its ``more``."""
        self.sampled_by[sha] = self.test
        self.groups[sha] = []
        return self._more(self.test, [])

    def again(self, sha: str, ev: Evaluation) -> More | bool | None:
        """After one server: False when the commit is decided (call :meth:`finish`), else
        the ``more`` for a fresh server (None when samples are one per server)."""
        test = self.sampled_by.get(sha, self.test)
        groups = self.groups.setdefault(sha, [])
        s = self.samples(ev)
        if ev.measurement is None or not s:
            return False
        prev = self.last.get(sha)
        if prev is not None and prev.measurement is not None:
            self.kept.setdefault(sha, []).append(prev.measurement)
        groups.append(s)
        self.last[sha] = ev
        if test.final([to_logs(g) for g in groups]):
            return False
        return self._more(test, groups)

    def finish(self, sha: str, ev: Evaluation) -> Evaluation:
        """The commit's evaluation once decided (merged over its servers), cached."""
        groups = self.groups.pop(sha, [])
        last = self.last.pop(sha, None)
        kept = self.kept.pop(sha, [])
        if last is None or not groups:
            return ev
        merged = self.merged(last, groups, kept)
        self._put(merged)
        return merged

    def cancel(self, sha: str) -> None:
        self.groups.pop(sha, None)
        self.last.pop(sha, None)
        self.sampled_by.pop(sha, None)
        self.kept.pop(sha, None)

    # -- verdicts ------------------------------------------------------------------------
    def judged(self, info: CommitInfo, role: str, ev: Evaluation, cached: bool
               ) -> Outcome | None:
        """The verdict on a measured evaluation (None: not the two-level test's to judge)."""
        if ev.measurement is None:
            return None
        rng = self.d.rng
        if role not in ("bisect", "verify") and info.sha in (rng.good.sha, rng.bad.sha):
            # an endpoint: old ("good") or new ("bad") by definition, once calibrated
            return Outcome(commit=info.sha, verdict=Verdict.GOOD if info.sha == rng.good.sha
                           else Verdict.BAD, reason=self.reason, measurement=ev.measurement,
                           from_cache=cached)
        if self.test_ is None:
            return None
        test = self.sampled_by.pop(info.sha, None) or self.test
        groups = self.groups_of(ev)
        logs = [to_logs(g) for g in groups]
        dec = test.decide(logs)
        if dec in (Decision.MORE_REQUESTS, Decision.NEW_SERVER):
            dec = Decision.UNKNOWN  # a failed later server: undecided
        if role == "bisect":
            self.test_ = self.test.learn(logs, dec)
        mg, mb = test.model.means()
        flat = [x for g in groups for x in g]
        where = (f"{self.symptom.value} median {statistics.median(flat):.3g} over {len(flat)} "
                 f"samples on {len(groups)} server(s) [{describe(groups)}] (good "
                 f"~{math.exp(mg):.3g}, bad ~{math.exp(mb):.3g}; log BF "
                 f"{test.model.log_bf(logs):+.1f}, decides at +-{test.threshold:.1f})")
        verdict = {Decision.GOOD: Verdict.GOOD, Decision.BAD: Verdict.BAD}.get(dec, Verdict.SKIP)
        why = (f"two-level {dec.value}: {where}" if verdict is not Verdict.SKIP
               else f"undecided: {where}")
        return Outcome(commit=info.sha, verdict=verdict, reason=why, measurement=ev.measurement,
                       from_cache=cached)

