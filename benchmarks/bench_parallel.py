"""Wall time to culprit with k workers: the real Driver and parallel search on a cost model.

    python3 benchmarks/bench_parallel.py [--trials 300] [--seed 0] [--noisy] [--max-skip 0.2]
    python3 benchmarks/bench_parallel.py --real 100 [--repeats 3]

The Driver (endpoint verification, multisection, work-conserving dispatch, cancellation,
journal) runs unchanged; only time is virtual: a `VirtualCluster` is both the one-at-a-time
evaluator (k = 1) and the executor (k > 1), and a commit's evaluation finishes after its
cost-model minutes: artifact 5 min, server start 3 min, one probe run 1 min, each drawn
with +-20% jitter; an unbuildable commit costs its 5 artifact minutes and is a skip; a
cancelled run frees its worker after 0.2 min of teardown. Scenarios as in bench_accuracy:
n 50..1000 commits, skip rate 0..20%. Deterministic verdicts (the length symptom) by
default; --noisy uses the sequential strategy on ITL with effect 1.3x and CV 10%.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.executor import Done
from vllm_bisect.bisect.journal import SessionJournal
from vllm_bisect.bisect.multisection import ideal_rounds
from vllm_bisect.bisect.range import CommitInfo, CommitRange
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, RequestResult, TokensSource
from vllm_bisect.spec import BisectSpec, parse_spec

ARTIFACT, START, SAMPLE, TEARDOWN = 5.0, 3.0, 1.0, 0.2
More = Callable[[Measurement], int] | None


@dataclass(frozen=True)
class Scenario:
    n: int
    culprit: int
    unbuildable: frozenset[int]
    noisy: bool


def scenario(rnd: random.Random, noisy: bool, max_skip: float = 0.2) -> Scenario:
    n = rnd.randint(50, 1000)
    culprit = rnd.randrange(n)
    rate = rnd.uniform(0.0, max_skip)
    skips = frozenset(i for i in range(n - 1)
                      if i not in (culprit, culprit - 1) and rnd.random() < rate)
    return Scenario(n, culprit, skips, noisy)


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


class VirtualCluster:
    """Virtual time: k workers; each evaluation ends after its cost-model minutes."""

    def __init__(self, s: Scenario, rng: CommitRange, workers: int, rnd: random.Random) -> None:
        self.s, self.rng, self.workers, self.rnd = s, rng, workers, rnd
        self.clock = 0.0
        self.heap: list[tuple[float, int]] = []
        self.pending: dict[int, tuple[str, Evaluation]] = {}
        self.next = 0
        self.busy_minutes = 0.0

    def _jit(self, x: float) -> float:
        return x * self.rnd.uniform(0.8, 1.2)

    def _run(self, commit: str, more: More) -> tuple[float, Evaluation]:
        i = self.rng.index(commit)
        if i in self.s.unbuildable:
            return self._jit(ARTIFACT), Evaluation(commit=commit, status=EvalStatus.UNAVAILABLE,
                                                   reason="no artifact")
        bad = i >= self.s.culprit
        mean = 10.0 * (1.3 if bad and self.s.noisy else 1.0)
        cv = 0.10 if self.s.noisy else 0.0

        def draw(k: int) -> list[float]:
            return [mean * max(0.05, self.rnd.gauss(1.0, cv)) for _ in range(k)]

        tokens = 128 if bad and not self.s.noisy else 256
        m = measurement(draw(3), tokens)
        runs = 3
        while more is not None and (k := more(m)) > 0:
            m = measurement([r.itl_ms or 0.0 for r in m.requests] + draw(k), tokens)
            runs += k
        cost = self._jit(ARTIFACT) + self._jit(START) + sum(self._jit(SAMPLE) for _ in range(runs))
        return cost, Evaluation(commit=commit, status=EvalStatus.MEASURED, measurement=m)

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


def commit_range(n: int) -> CommitRange:
    infos = [CommitInfo(sha=f"{i + 1:040x}", subject=f"commit {i}", author="a", date="d")
             for i in range(-1, n)]
    return CommitRange(good=infos[0], bad=infos[-1], commits=tuple(infos[1:]))


def spec(noisy: bool) -> BisectSpec:
    verdict = ({"symptom": "itl", "strategy": "sequential"} if noisy else {"symptom": "length"})
    verdict["verify_samples"] = 0  # the search only (verification adds the same to every k)
    return parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                       "probe": {"max_tokens": 256}, "verdict": verdict})


@dataclass(frozen=True)
class Run:
    exact: bool
    minutes: float
    rounds: int
    evaluations: int


def bisect(s: Scenario, workers: int, seed: int, tmp: Path) -> Run:
    rng = commit_range(s.n)
    cluster = VirtualCluster(s, rng, workers, random.Random(seed))
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        journal = SessionJournal(Path(d))
        try:
            result = Driver(spec(s.noisy), rng, cluster, journal, None,
                            executor=cluster if workers > 1 else None).run()
        finally:
            journal.close()
    exact = result.first_bad == rng.sha(s.culprit)
    return Run(exact, cluster.clock, result.rounds, result.server_starts)


def real(n: int, repeats: int) -> None:
    """The same bisect on the real simulator: generated history, venv builds, paced servers."""
    import time

    from vllm_bisect.bisect.driver import NullEvents
    from vllm_bisect.bisect.runner import run_bisect
    from vllm_bisect.sim.history import HistoryPlan, generate_history, sim_path

    print(f"real simulator: {n} commits, server start 1.0 s, probe 2 x 256 tokens at 10 ms per "
          "step (MTP, acceptance 0.8), source build per commit\n")
    print("| workers | culprit found | wall (s) | speed-up vs k=1 | ideal log2(k+1) | rounds | "
          "server starts |")
    print("|---|---|---|---|---|---|---|")
    base = 0.0
    for k in (1, 2, 4):
        walls, rounds, starts, found = [], [], [], True
        for r in range(repeats):
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d)
                plan = HistoryPlan(n_commits=n, cap_at=1 + (37 * (r + 1)) % (n - 1), step_ms=10.0,
                                   init_s=1.0, seed=r)
                h = generate_history(tmp / "vllm", plan)
                sp = parse_spec({
                    "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
                    "build": {"kind": "source"},
                    "serve": {"model": "sim", "env": {"VLLM_BISECT_SIM_PATH": sim_path()},
                              "serialize_startup": False, "startup_timeout_s": 60,
                              "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
                    "probe": {"max_tokens": 256, "requests": 2, "warmup": 0},
                    "verdict": {"symptom": "length", "verify_samples": 0},
                    "parallel": {"workers": k}})
                t0 = time.monotonic()
                res = run_bisect(sp, tmp / "session", tmp / "cache", NullEvents())
                walls.append(time.monotonic() - t0)
                rounds.append(res.rounds)
                starts.append(res.server_starts)
                found = found and res.first_bad == h.planted["length"]
        wall = statistics.fmean(walls)
        base = base or wall
        print(f"| {k} | {'yes' if found else 'NO'} | {wall:.1f} | {base / wall:.2f}x | "
              f"{math.log2(k + 1):.2f}x | {statistics.fmean(rounds):.1f} | "
              f"{statistics.fmean(starts):.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noisy", action="store_true")
    ap.add_argument("--max-skip", type=float, default=0.2, help="skip rates drawn from 0..this")
    ap.add_argument("--real", type=int, metavar="N", default=0,
                    help="instead: bisect an N-commit history on the real simulator")
    ap.add_argument("--repeats", type=int, default=3, help="--real: histories per row")
    a = ap.parse_args()
    if a.real:
        real(a.real, a.repeats)
        return
    kind = "sequential ITL, 1.3x, CV 10%" if a.noisy else "deterministic (length)"
    print(f"{a.trials} scenarios, n 50..1000, skip rate 0..{a.max_skip:.0%}, verdicts: {kind}\n")
    print("| workers | exact | mean wall (h) | wall speed-up vs k=1 | ideal log2(k+1) | "
          "of ideal | mean rounds | rounds speed-up | rounds <= ceil(log_{k+1} n)+1 | "
          "server starts |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rnd = random.Random(a.seed)
    scenarios = [scenario(rnd, a.noisy, a.max_skip) for _ in range(a.trials)]
    base: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in (1, 2, 4, 8):
            runs = [bisect(s, k, a.seed * 100003 + j, Path(tmp)) for j, s in enumerate(scenarios)]
            if k == 1:
                base = runs
            speed = statistics.fmean(b.minutes / r.minutes for b, r in zip(base, runs, strict=True))
            rspeed = statistics.fmean(b.rounds / max(1, r.rounds)
                                      for b, r in zip(base, runs, strict=True))
            ideal = math.log2(k + 1)
            within = sum(r.rounds <= ideal_rounds(s.n, k) + 1
                         for r, s in zip(runs, scenarios, strict=True)) / len(runs)
            print(f"| {k} | {sum(r.exact for r in runs) / len(runs):.1%} | "
                  f"{statistics.fmean(r.minutes for r in runs) / 60:.2f} | {speed:.2f}x | "
                  f"{ideal:.2f}x | {speed / ideal:.2f} | "
                  f"{statistics.fmean(r.rounds for r in runs):.1f} | {rspeed:.2f}x | "
                  f"{within:.1%} | {statistics.fmean(r.evaluations for r in runs):.1f} |")


if __name__ == "__main__":
    main()
