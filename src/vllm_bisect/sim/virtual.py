"""Virtual time for the benchmarks and the fast tests: the real Driver against drawn probe
outcomes.

A `VirtualCluster` is both the one-at-a-time evaluator (``Driver(..., evaluator=cluster)``)
and the executor (k > 1 workers). Nothing about the search is simulated: the Driver, the
strategies, the verdicts, the journal and the retries run unchanged; only a commit's
evaluation is drawn from its scenario, and it finishes after its cost-model minutes:

- artifact 5 min the first time a commit is evaluated (then cached, as the builders do);
  an unbuildable commit costs its 5 minutes and is UNAVAILABLE (a skip);
- server start 3 min; with ``crash_rate`` the server dies before it is healthy (FAILED,
  "server exited": the Driver retries it once on a fresh server, then it is a skip);
- one probe request 1 min (the first batch is the spec's ``probe.requests``; the
  sequential strategy asks for more on the same server through ``more``);
- a cancelled run frees its worker after 0.2 min of teardown;
- every duration with +-20% jitter;
- with a ``link`` (``sim/link.py``) the cluster is also the Driver's prefetcher (one
  worker): artifacts of the commits the search may test next download while a commit is
  measured, and an evaluation waits only for what is still missing. The drawn durations
  and probe outcomes are the same as without it (the artifact sizes come from their own
  stream), so the verdicts are the same and only the wall differs.

Per-request ITL is ``mean * level * N(1, cv)`` (a normal, not the log-normal the sequential
tests assume), the mean stepping up by ``effect`` at the culprit. ``level`` is the server
start's own speed, ``N(1, server_cv)``, drawn once per server start (a different process,
memory layout, clocks, acceptance path): requests on one server share it. With
``acceptance`` (K = 3 draft tokens, 80% acceptance, 256 tokens) each request's ITL also
varies with the tokens accepted in its ~75 engine steps (binomial: about 2.4% CV). For the
length symptom a bad commit's server shows the 128-token cap with probability ``cap_q`` (1: always).
"""

from __future__ import annotations

import heapq
import random
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vllm_bisect.bisect.measurement.executor import Done
from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.models import EvalStatus, Evaluation, FailureKind, Measurement, RequestResult, TokensSource
from vllm_bisect.sim.link import Link

ARTIFACT, START, SAMPLE, TEARDOWN = 5.0, 3.0, 1.0, 0.2
CRASH = "ServeError: server exited with code 1 before it was healthy (virtual)"
More = Callable[[Measurement], int] | None


@dataclass(frozen=True)
class Scenario:
    n: int
    culprit: int
    unbuildable: frozenset[int]
    symptom: str = "length"    # "length": a cap; "itl": a slowdown
    effect: float = 1.3        # itl: bad mean ITL / good mean ITL
    cv: float = 0.0            # itl: per-request noise (coefficient of variation)
    crash_rate: float = 0.0    # per server start: it dies before it is healthy
    cap_q: float = 1.0         # length: the chance a bad commit's server shows the cap
    skip_rate: float = 0.0
    server_cv: float = 0.0     # itl: the server start's own level (coefficient of variation)
    acceptance: bool = False   # itl: per-request acceptance noise (K = 3, p = 0.8)

    def mean_itl(self, i: int) -> float:
        return 10.0 * (self.effect if self.symptom == "itl" and i >= self.culprit else 1.0)

    @property
    def midpoint(self) -> float:
        """A one-run threshold hook's cut: halfway between the endpoints' true means."""
        return 10.0 * (1.0 + self.effect) / 2


def scenario(rnd: random.Random, *, symptom: str = "length", effect: float = 1.3,
             cv: float = 0.0, max_skip: float = 0.2, max_crash: float = 0.0,
             cap_q: float = 1.0, server_cv: float = 0.0, acceptance: bool = False) -> Scenario:
    """n 50..1000 commits, a culprit anywhere, skip rate 0..max_skip (the culprit and its
    parent always build: else no tool can name the culprit exactly), crash rate
    0..max_crash per server start."""
    n = rnd.randint(50, 1000)
    culprit = rnd.randrange(n)
    rate = rnd.uniform(0.0, max_skip)
    skips = frozenset(i for i in range(n - 1)
                      if i not in (culprit, culprit - 1) and rnd.random() < rate)
    crash = rnd.uniform(0.0, max_crash) if max_crash else 0.0
    return Scenario(n, culprit, skips, symptom, effect, cv, crash, cap_q, rate, server_cv,
                    acceptance)


K_DRAFT, P_ACCEPT, TOKENS = 3, 0.8, 256


def acceptance_factor(rnd: random.Random) -> float:
    """A request's ITL relative to the mean pace: the tokens its engine steps accepted."""
    steps = round(TOKENS / (1 + K_DRAFT * P_ACCEPT))
    trials = K_DRAFT * steps
    p = min(1.0, max(0.0, rnd.gauss(P_ACCEPT, (P_ACCEPT * (1 - P_ACCEPT) / trials) ** 0.5)))
    return (1 + K_DRAFT * P_ACCEPT) / (1 + K_DRAFT * p)


def measurement(itls: list[float], tokens: int) -> Measurement:
    reqs = [RequestResult(output_tokens=tokens, finish_reason="length", ttft_ms=50.0,
                          latency_ms=x * tokens, itl_ms=x, chunk_itl_ms=x, tpot_ms=x,
                          n_chunks=tokens, tokens_per_chunk=1.0, tokens_source=TokensSource.USAGE)
            for x in itls]
    return Measurement(endpoint="completions", model="m", requested_tokens=256,
                       min_output_tokens=256, output_tokens=[tokens] * len(itls),
                       length_ok=tokens >= 256, itl_ms=statistics.median(itls),
                       chunk_itl_ms=statistics.median(itls), tokens_per_chunk=1.0,
                       ttft_ms=50.0, tpot_ms=statistics.median(itls), finish_reasons=["length"],
                       tokens_source=TokensSource.USAGE, requests=reqs)


def commit_range(n: int) -> CommitRange:
    infos = [CommitInfo(sha=f"{i + 1:040x}", subject=f"commit {i}", author="a", date="d")
             for i in range(-1, n)]
    return CommitRange(good=infos[0], bad=infos[-1], commits=tuple(infos[1:]))


class VirtualCluster:
    """Virtual time: k workers; each evaluation ends after its cost-model minutes."""

    def __init__(self, s: Scenario, rng: CommitRange, workers: int, rnd: random.Random,
                 first_batch: int = 3, link: Link | None = None,
                 start_s: float | None = None) -> None:
        self.s, self.rng, self.workers, self.rnd = s, rng, workers, rnd
        # seconds to healthy each server reports (None: none; a search then assumes
        # verdict.server_cost): what a run measures its start's cost in requests from
        self.start_s = start_s
        self.link = link
        # the artifacts' sizes for the link: their own stream (the main one stays as without)
        self._size_rnd = random.Random(str(rnd.getstate()[1][:8]))
        self._sizes: dict[int, float] = {}
        self.first_batch = first_batch
        self.index = {rng.sha(i): i for i in range(-1, len(rng.commits))}
        self.built: set[int] = set()
        self.clock = 0.0
        self.heap: list[tuple[float, int]] = []
        self.pending: dict[int, tuple[str, Evaluation]] = {}
        self.next = 0
        self.busy_minutes = 0.0
        self.tried: set[int] = set()  # distinct commits evaluated (probed or not buildable)
        self.starts = 0      # server starts (crashed ones included)
        self.samples = 0     # probe requests

    def _jit(self, x: float) -> float:
        return x * self.rnd.uniform(0.8, 1.2)

    def _run(self, commit: str, more: More) -> tuple[float, Evaluation]:
        s, i = self.s, self.index[commit]
        cost = 0.0
        self.tried.add(i)
        if i not in self.built:
            jit = self._jit(ARTIFACT)  # drawn with a link too: the main stream stays aligned
            cost += jit if self.link is None else self.link.need(i, self._size(i), self.clock)
            if i in s.unbuildable:
                if self.link is not None:
                    self.link.forget(i)
                return cost, Evaluation(commit=commit, status=EvalStatus.UNAVAILABLE,
                                        reason="no artifact")
            self.built.add(i)
        cost += self._jit(START)
        self.starts += 1
        if s.crash_rate and self.rnd.random() < s.crash_rate:
            return cost, Evaluation(commit=commit, status=EvalStatus.FAILED, reason=CRASH,
                                    failure=FailureKind.SERVE)
        mean = s.mean_itl(i)
        if s.server_cv:  # this server start's own level
            mean *= max(0.05, self.rnd.gauss(1.0, s.server_cv))

        def one() -> float:
            x = mean * max(0.05, self.rnd.gauss(1.0, s.cv)) if s.cv else mean
            return x * acceptance_factor(self.rnd) if s.acceptance else x

        def draw(k: int) -> list[float]:
            return [one() for _ in range(k)]

        bad = i >= s.culprit
        capped = s.symptom == "length" and bad and (s.cap_q >= 1.0 or self.rnd.random() < s.cap_q)
        tokens = 128 if capped else 256
        m = measurement(draw(self.first_batch), tokens)
        runs = self.first_batch
        while more is not None and (k := more(m)) > 0:
            m = measurement([r.itl_ms or 0.0 for r in m.requests] + draw(k), tokens)
            runs += k
        self.samples += runs
        cost += sum(self._jit(SAMPLE) for _ in range(runs))
        startup = None if self.start_s is None else self._jit(self.start_s)
        return cost, Evaluation(commit=commit, status=EvalStatus.MEASURED, measurement=m,
                                startup_s=startup)

    def _size(self, i: int) -> float:
        if i not in self._sizes:
            self._sizes[i] = ARTIFACT * self._size_rnd.uniform(0.8, 1.2)
        return self._sizes[i]

    # the prefetcher (k = 1, with a link): the Driver's PrefetchSink
    def prefetch(self, commits: Iterable[str]) -> None:
        if self.link is not None:
            idx = [self.index[c] for c in commits]  # what is built, the link skips as done
            self.link.prefetch({i: self._size(i) for i in idx}, self.clock)

    def keep_only(self, commits: Iterable[str]) -> None:
        if self.link is not None:
            self.link.keep_only({self.index[c] for c in commits}, self.clock)

    # the one-at-a-time evaluator (k = 1)
    def evaluate(self, commit: str, more: More = None) -> Evaluation:
        cost, ev = self._run(commit, more)
        self.clock += cost
        self.busy_minutes += cost
        return ev

    # the executor (k > 1)
    def submit(self, commit: str, more: More = None) -> int:
        cost, ev = self._run(commit, more)
        task, self.next = self.next, self.next + 1
        self.pending[task] = (commit, ev)
        heapq.heappush(self.heap, (self.clock + cost, task))
        return task

    def cancel(self, task: int) -> None:
        if task in self.pending:
            commit, _ = self.pending[task]
            self.pending[task] = (commit, Evaluation(commit=commit, status=EvalStatus.CANCELLED))
            self.heap = [(t, k) for t, k in self.heap if k != task]
            self.heap.append((self.clock + TEARDOWN, task))
            heapq.heapify(self.heap)

    def wait(self, timeout: float | None = None) -> list[Done]:
        if not self.heap:
            return []
        t, task = heapq.heappop(self.heap)
        self.clock = max(self.clock, t)
        commit, ev = self.pending.pop(task)
        return [Done(task, commit, ev, "virtual")]

    def in_flight(self) -> int:
        return len(self.pending)

    def close(self) -> None:
        self.heap.clear()
        self.pending.clear()
