"""Wall time to culprit with k workers: the real Driver and parallel search on a cost model.

    python3 benchmarks/bench_parallel.py [--trials 300] [--seed 0] [--noisy] [--max-skip 0.2]
    python3 benchmarks/bench_parallel.py --noisy --strategy changepoint --server-cv 0.03
    python3 benchmarks/bench_parallel.py --real 100 [--repeats 3] [--noisy --strategy changepoint]

The Driver (endpoint verification, multisection, work-conserving dispatch, cancellation,
journal) runs unchanged; only time is virtual: a `VirtualCluster` is both the one-at-a-time
evaluator (k = 1) and the executor (k > 1), and a commit's evaluation finishes after its
cost-model minutes (src/vllm_bisect/sim/virtual.py: artifact 5 min, server start 3 min, one probe
request 1 min, +-20% jitter; an unbuildable commit costs its 5 artifact minutes and is a
skip; a cancelled run frees its worker after 0.2 min of teardown). Scenarios as in bench_accuracy:
n 50..1000 commits, skip rate 0..20%. Deterministic verdicts (the length symptom) by
default; --noisy uses the sequential strategy on ITL with effect 1.3x and CV 10%
(``--strategy``: another written one, e.g. changepoint, the model of the range, or twolevel,
or "default": auto, with the spec's ``parallel.workers`` = k as a real run writes it;
``--set KEY=VALUE``: a verdict key over it). ``--costs A,S,R``: the cost model's artifact,
server start and request minutes instead (e.g. ``1.5,1,0.043``: an H100's ~60 s start and
~2.6 s request of 256 tokens at 10 ms); each server then reports its start's seconds, from
which a search that measures its costs (the model of the range) prices a start in requests.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench_cost import parse_value

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.search.multisection import ideal_rounds
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.sim import virtual
from vllm_bisect.sim.virtual import Scenario, VirtualCluster, commit_range, scenario
from vllm_bisect.spec import BisectSpec, parse_spec

STRATEGY = "sequential"   # --noisy: a written strategy, or "default" (none written: auto)
EXTRA: dict[str, object] = {}   # --set: verdict keys over the spec
START_S: list[float] = []       # --costs: the seconds to healthy each server reports


def spec(noisy: bool, workers: int = 1) -> BisectSpec:
    verdict: dict[str, object] = (
        ({"symptom": "itl", "itl_factor": 1.15} if STRATEGY == "default"
         else {"symptom": "itl", "strategy": STRATEGY}) if noisy else {"symptom": "length"})
    verdict["verify_samples"] = 0  # the search only (verification adds the same to every k)
    verdict.update(EXTRA)
    return parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                       "probe": {"max_tokens": 256}, "verdict": verdict,
                       "parallel": {"workers": workers}})


@dataclass(frozen=True)
class Run:
    exact: bool
    minutes: float
    rounds: int
    evaluations: int


def bisect(s: Scenario, workers: int, seed: int, tmp: Path) -> Run:
    rng = commit_range(s.n)
    sp = spec(s.symptom == "itl", workers)
    cluster = VirtualCluster(s, rng, workers, random.Random(seed), first_batch=sp.probe.requests,
                             start_s=START_S[0] if START_S else None)
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        journal = SessionJournal(Path(d))
        try:
            result = Driver(sp, rng, cluster, journal, None,
                            executor=cluster if workers > 1 else None).run()
        finally:
            journal.close()
    exact = result.first_bad == rng.sha(s.culprit)
    return Run(exact, cluster.clock, result.rounds, result.server_starts)


def real(n: int, repeats: int, noisy: bool = False) -> None:
    """The same bisect on the real simulator: generated history, venv builds, paced servers.
    ``noisy``: a 1.5x ITL step under 3% request and 3% server noise, judged by the written
    ``--strategy`` (else a 128-token cap, the length symptom); ``--set`` keys over either."""
    import time

    from vllm_bisect.bisect.driver import NullEvents
    from vllm_bisect.run_bisect import run_bisect
    from vllm_bisect.sim.history import HistoryPlan, generate_history, sim_path

    symptom = "itl" if noisy else "length"
    what = ("a 1.5x ITL step, request and server CV 3%, verdict.strategy = " + STRATEGY
            if noisy else "a 128-token cap")
    print(f"real simulator: {n} commits, server start 1.0 s, probe 2 x 256 tokens at 10 ms per "
          f"step (MTP, acceptance 0.8), source build per commit; {what}"
          f"{''.join(f', {k} = {v}' for k, v in EXTRA.items())}\n")
    print("| workers | culprit found | wall (s) | speed-up vs k=1 | ideal log2(k+1) | rounds | "
          "server starts |")
    print("|---|---|---|---|---|---|---|")
    base = 0.0
    for k in (1, 2, 4):
        walls, rounds, starts, found = [], [], [], True
        for r in range(repeats):
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d)
                at = 1 + (37 * (r + 1)) % (n - 1)
                plan = (HistoryPlan(n_commits=n, slow_at=at, slow_factor=1.5, noise_cv=0.03,
                                    server_cv=0.03, step_ms=10.0, init_s=1.0, seed=r) if noisy
                        else HistoryPlan(n_commits=n, cap_at=at, step_ms=10.0, init_s=1.0,
                                         seed=r))
                h = generate_history(tmp / "vllm", plan)
                sp = parse_spec({
                    "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
                    "build": {"kind": "source"},
                    "ops": {"serialize_startup": False, "startup_timeout_s": 60},
                    "serve": {"model": "sim", "env": {"VLLM_BISECT_SIM_PATH": sim_path()},
                              "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
                    "probe": {"max_tokens": 256, "requests": 2, "warmup": 0},
                    "verdict": {"symptom": symptom, "verify_samples": 0,
                                **({"strategy": STRATEGY} if noisy and STRATEGY != "default"
                                   else {}), **EXTRA},
                    "parallel": {"workers": k}})
                t0 = time.monotonic()
                res = run_bisect(sp, tmp / "session", tmp / "cache", NullEvents())
                walls.append(time.monotonic() - t0)
                rounds.append(res.rounds)
                starts.append(res.server_starts)
                found = found and res.first_bad == h.planted[symptom]
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
    ap.add_argument("--strategy", choices=("sequential", "twolevel", "changepoint", "default"),
                    default="sequential",
                    help="--noisy: a written verdict.strategy, or the default spec (auto)")
    ap.add_argument("--set", action="append", default=[],
                    help="a verdict key over the spec, KEY=VALUE (int/float/bool/str)")
    ap.add_argument("--server-cv", type=float, default=0.0,
                    help="--noisy: server-level CV (with acceptance noise when > 0)")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--costs", default="",
                    help="the cost model's artifact,start,request minutes (default 5,3,1)")
    ap.add_argument("--max-skip", type=float, default=0.2, help="skip rates drawn from 0..this")
    ap.add_argument("--real", type=int, metavar="N", default=0,
                    help="instead: bisect an N-commit history on the real simulator")
    ap.add_argument("--repeats", type=int, default=3, help="--real: histories per row")
    a = ap.parse_args()
    global STRATEGY
    STRATEGY = a.strategy
    for kv in a.set:
        key, val = kv.split("=", 1)
        EXTRA[key] = parse_value(val)
    if a.real:
        real(a.real, a.repeats, a.noisy)
        return
    if a.costs:
        virtual.ARTIFACT, virtual.START, virtual.SAMPLE = (float(x) for x in a.costs.split(","))
        START_S.append(virtual.START * 60)
    logging.disable(logging.WARNING)  # the Driver's per-scenario warnings: hundreds
    kind = (f"{a.strategy} ITL, 1.3x, CV 10%, server CV {a.server_cv:.0%}" if a.noisy
            else "deterministic (length)") + "".join(f", {k} = {v}" for k, v in EXTRA.items())
    costs = (f"artifact {virtual.ARTIFACT:g} min, start {virtual.START:g} min, request "
             f"{virtual.SAMPLE:g} min")
    print(f"{a.trials} scenarios, n 50..1000, skip rate 0..{a.max_skip:.0%}, verdicts: {kind}; "
          f"{costs}\n")
    print("| workers | exact | mean wall (h) | wall speed-up vs k=1 | ideal log2(k+1) | "
          "of ideal | mean rounds | rounds speed-up | rounds <= ceil(log_{k+1} n)+1 | "
          "server starts |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rnd = random.Random(a.seed)
    scenarios = [scenario(rnd, symptom="itl" if a.noisy else "length", effect=1.3,
                          cv=0.10 if a.noisy else 0.0, max_skip=a.max_skip,
                          server_cv=a.server_cv if a.noisy else 0.0,
                          acceptance=bool(a.noisy and a.server_cv))
                 for _ in range(a.trials)]
    base: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in (int(w) for w in a.workers.split(",")):
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
