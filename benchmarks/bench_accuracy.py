"""Bisect accuracy and cost under noise: vllm-bisect's Driver vs plain `git bisect run`.

    python3 benchmarks/bench_accuracy.py [--trials 1000] [--seed 0] [--jobs N]
                                         [--max-crash 0.05] [--rows all|goals]
                                         [--prefetch none|independent|shared]

Every arm runs on the same randomized scenarios and noise seeds (src/vllm_bisect/sim/virtual.py: n
50..1000 commits, skip rate 0..20%, server crashes 0..5% per start, the cost model
artifact 5 min / server start 3 min / probe request 1 min):

- plain git bisect run: the real binary search (``strategy.next_step``, as git does), no
  endpoint checks (git trusts them), one server start and ONE probe request per commit,
  judged by vllm-bisect's threshold judge at the midpoint between the endpoints' true means
  (a threshold hook that knows the answer's scale: the best a one-run hook can do); a
  crash or an unbuildable commit exits 125 (skip).
- vllm-bisect sequential: the real ``Driver`` with ``verdict.strategy = "sequential"``
  (endpoint calibration, the sequential Bayes-factor test, its first batch being
  ``probe.requests = 3``, one more request at a time on the same server, ops.retries 1).
- vllm-bisect bayes: the real ``Driver`` with ``verdict.strategy = "bayes"``, the same
  one-request midpoint threshold as plain per server start, runs chosen by information.

Culprit verification (``verify_samples``) is off in every arm: the search alone is compared.
A refusal (the endpoints did not reproduce) counts as not exact. Goal checks are computed
from the rows printed, never written by hand.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import statistics
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import plain_arms

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.forecast import Forecast
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import EvalStatus, Verdict
from vllm_bisect.sim.link import Link
from vllm_bisect.sim.virtual import (
    ARTIFACT,
    SAMPLE,
    START,
    Scenario,
    VirtualCluster,
    commit_range,
    scenario,
)
from vllm_bisect.spec import BisectSpec, parse_spec
from vllm_bisect.verdict import Judge

# (effect, request CV, server CV, acceptance noise); None: drawn per scenario
ITL_ROWS: tuple[tuple[float | None, float | None, float, bool], ...] = (
    (1.3, 0.10, 0.0, False), (7.0, 0.02, 0.0, False), (1.1, 0.02, 0.0, False),
    (1.3, 0.15, 0.0, False), (2.0, 0.05, 0.0, False), (None, None, 0.0, False),
    (1.3, 0.10, 0.05, True), (2.0, 0.05, 0.10, True))
# issue 30's row (seeded after the cap rows, so no earlier row's draws move)
NEW_ITL_ROWS: tuple[tuple[float | None, float | None, float, bool], ...] = (
    (1.1, 0.05, 0.03, False),)
GOAL_ROWS = (0, 1, 6)
CAP_QS = (0.3, 0.5, 0.7, 0.9, 1.0)
ARMS = {"itl": ("plain", "sequential", "default", "changepoint"),
        "length": ("plain", "bayes", "default", "changepoint")}
NAMES = {"plain": "plain git bisect run", "sequential": "vllm-bisect sequential",
         "bayes": "vllm-bisect bayes", "default": "vllm-bisect default (auto)",
         "changepoint": "vllm-bisect changepoint (the default's spec + the model of the range)"}


@dataclass(frozen=True)
class Trial:
    arm: str
    seed: int
    symptom: str
    effect: float | None  # None: drawn per scenario (log-uniform 1.1..7x, CV 2..15%)
    cv: float | None
    cap_q: float = 1.0
    max_crash: float = 0.05
    server_cv: float = 0.0
    acceptance: bool = False
    link: str = "none"   # vllm-bisect arms: "none" (no prefetch), "independent", "shared"
    pool: int = 2        # prefetch threads (the Prefetcher's default: 2)
    recheck: int | None = None  # default arm: verdict.recheck_runs (None: the spec's default)
    plateau: bool | None = None  # default arm: verdict.plateau (None: the spec's default)


@dataclass(frozen=True)
class Outcome:
    exact: bool
    refused: bool
    commits: int
    starts: int
    samples: int
    minutes: float
    predicted: float | None = None  # minutes the forecast said, before the search
    first: float | None = None      # the first forecast's (before auto switched to bayes)
    first_range: tuple[float, float] | None = None  # its printed 5%..95% range (minutes)



def make_scenario(t: Trial) -> Scenario:
    rnd = random.Random(t.seed)
    effect, cv = t.effect, t.cv
    if effect is None or cv is None:
        effect = math.exp(rnd.uniform(math.log(1.1), math.log(7.0)))
        cv = rnd.uniform(0.02, 0.15)
    if t.symptom == "length":
        effect, cv = 1.0, 0.0
    return scenario(rnd, symptom=t.symptom, effect=effect, cv=cv, max_skip=0.2,
                    max_crash=t.max_crash, cap_q=t.cap_q, server_cv=t.server_cv,
                    acceptance=t.acceptance)


def spec_for(arm: str, s: Scenario, recheck: int | None = None,
             plateau: bool | None = None) -> BisectSpec:
    """The arm's spec. default: what a new user writes (the symptom, ``itl_factor`` as the
    smallest change that matters: 1.15, or half the planted effect below 1.3x; no strategy,
    no probe.requests)."""
    verdict: dict[str, object] = {"symptom": s.symptom, "verify_samples": 0}
    probe: dict[str, object] = {"max_tokens": 256}
    if arm == "changepoint":   # what the default arm writes, and the model of the range
        verdict["strategy"] = "changepoint"
        if s.symptom == "itl":
            verdict["itl_factor"] = round(min(1.15, 1 + (s.effect - 1) / 2), 4)
    elif arm == "default":
        if recheck is not None:
            verdict["recheck_runs"] = recheck
        if plateau is not None:
            verdict["plateau"] = plateau
        if s.symptom == "itl":
            verdict["itl_factor"] = round(min(1.15, 1 + (s.effect - 1) / 2), 4)
    else:
        if s.symptom == "itl" and arm != "sequential":
            verdict["max_itl_ms"] = s.midpoint
        rs = plain_arms.parse(arm)
        verdict["strategy"] = "threshold" if rs is not None else arm
        probe["requests"] = 3 if arm == "sequential" else rs[0] if rs is not None else 1
    return parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"}, "probe": probe,
                       "verdict": verdict})


def plain(s: Scenario, sp: BisectSpec, cluster: VirtualCluster) -> int | None:
    """`git bisect run` with a one-run hook: 0 good, 1 bad, 125 skip; no endpoint checks."""
    judge = Judge(sp.verdict, sp.min_output_tokens())

    def one_run(i: int) -> Verdict:
        ev = cluster.evaluate(cluster.rng.sha(i))
        return (judge.judge(ev.measurement).verdict
                if ev.status is EvalStatus.MEASURED and ev.measurement else Verdict.SKIP)
    return plain_arms.git_bisect(s.n, one_run)


def run_trial(t: Trial) -> Outcome:
    logging.disable(logging.WARNING)  # the Driver's retry warnings, thousands of them
    s = make_scenario(t)
    rng = commit_range(s.n)
    sp = spec_for(t.arm, s, t.recheck, t.plateau)
    rs = plain_arms.parse(t.arm)
    # plain `git bisect run` fetches each artifact when git checks the commit out: no link
    link = None if rs is not None or t.link == "none" else Link(t.link == "independent",
                                                                    pool=t.pool)
    cluster = VirtualCluster(s, rng, 1, random.Random(t.seed * 7919 + 1),
                             first_batch=sp.probe.requests, link=link)
    refused = False
    predicted = first = first_range = None
    if t.arm == "plain":
        culprit = plain(s, sp, cluster)
        exact = culprit == s.culprit
    elif rs is not None:
        exact = plain_arms.plain_repeats(s, sp, cluster, rs[1]) == s.culprit
    else:
        with tempfile.TemporaryDirectory() as d:
            journal = SessionJournal(Path(d))
            try:
                driver = Driver(sp, rng, cluster, journal, None,
                                prefetcher=cluster if link is not None else None)
                driver.forecaster.clock, driver.forecaster.t0 = (lambda: cluster.clock * 60,
                                                                 0.0)
                result = driver.run()
                exact = result.first_bad == rng.sha(s.culprit)
                predicted = forecast_minutes(result.forecast)
                first = forecast_minutes(driver.forecaster.first)
                first_range = forecast_range(driver.forecaster.first)
            except NotReproduced:
                exact, refused = False, True
            finally:
                journal.close()
    return Outcome(exact, refused, len(cluster.tried), cluster.starts, cluster.samples,
                   cluster.clock, predicted, first, first_range)


def forecast_minutes(f: Forecast | None) -> float | None:
    """The forecast's wall at the cost model's mean times (the virtual cluster reports no
    start-up or probe times; these are what a real run would measure at the endpoints)."""
    if f is None:
        return None
    return (f.elapsed_s / 60 + f.builds * ARTIFACT + f.server_starts * START
            + f.requests * SAMPLE)


def forecast_range(f: Forecast | None) -> tuple[float, float] | None:
    """The forecast's printed 5%..95% range at the same times (None: one point)."""
    if f is None or f.low is None or f.high is None:
        return None
    lo, hi = (f.elapsed_s / 60 + b * ARTIFACT + s * START + r * SAMPLE
              for b, s, r in (f.low, f.high))
    return lo, hi


@dataclass(frozen=True)
class Row:
    label: str
    arm: str
    exact: float
    refused: float
    commits: float
    starts: float
    samples: float
    hours: float


def summarize(label: str, arm: str, outs: list[Outcome]) -> Row:
    return Row(label, arm, sum(o.exact for o in outs) / len(outs),
               sum(o.refused for o in outs) / len(outs),
               statistics.fmean(o.commits for o in outs),
               statistics.fmean(o.starts for o in outs),
               statistics.fmean(o.samples for o in outs),
               statistics.fmean(o.minutes for o in outs) / 60)


def label_of(effect: float | None, cv: float | None, server_cv: float, acc: bool) -> str:
    base = (f"{effect}x | {cv:.0%}" if effect is not None and cv is not None
            else "1.1-7x | 2-15%")
    return f"{base} | {server_cv:.0%}{' +acc' if acc else ''}"


def row_arms(kind: str, arms: tuple[str, ...], repeats: bool) -> list[str]:
    out = [arm for arm in ARMS[kind] if arm in arms]
    return out + ([a for a in plain_arms.arm_names() if a != "plain"] if repeats else [])


def trials(seed: int, n: int, crash: float, rows: str, arms: tuple[str, ...],
           link: str = "none", pool: int = 2, recheck: int | None = None,
           repeats: bool = False, plateau: bool | None = None) -> Iterator[tuple[str, Trial]]:
    """Every (row label, trial). A row's seeds include its position (the cap rows and the
    rows added later keep the positions they had: their draws do not move)."""
    for r, (effect, cv, server_cv, acc) in enumerate(ITL_ROWS + NEW_ITL_ROWS):
        if r >= len(ITL_ROWS):
            if rows not in ("all", "new", "issue30", "issue30itl"):
                continue
            r = len(ITL_ROWS) + len(CAP_QS) + r - len(ITL_ROWS)
        elif (rows in ("cap", "capgoals") or (rows == "goals" and r not in GOAL_ROWS)
              or (rows == "new" and not server_cv) or (rows == "rest" and r in GOAL_ROWS)
              or (rows in ("issue30", "issue30itl") and r != 6)):
            continue
        label = label_of(effect, cv, server_cv, acc)
        for arm in row_arms("itl", arms, repeats):
            for j in range(n):
                yield label, Trial(arm, seed * 1_000_003 + r * 10_007 + j, "itl", effect, cv,
                                   max_crash=crash, server_cv=server_cv, acceptance=acc,
                                   link=link, pool=pool, plateau=plateau)
    qs = {"all": CAP_QS, "cap": CAP_QS, "issue30": CAP_QS, "capgoals": (0.5, 0.7, 1.0)}
    for r, q in enumerate(CAP_QS, start=len(ITL_ROWS)):
        if q not in qs.get(rows, ()):
            continue
        for arm in row_arms("length", arms, repeats):
            for j in range(n):
                yield f"q = {q}", Trial(arm, seed * 1_000_003 + r * 10_007 + j, "length",
                                        None, None, q, crash, link=link, pool=pool,
                                        recheck=recheck)


def fmt(r: Row) -> str:
    return (f"| {r.label} | {NAMES.get(r.arm, r.arm)} | {r.exact:.1%} | {r.refused:.1%} | {r.commits:.1f} | "
            f"{r.starts:.1f} | "
            f"{r.samples:.1f} | {r.hours:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-crash", type=float, default=0.05,
                    help="server crash rates drawn from 0..this per start")
    ap.add_argument("--rows", choices=("all", "goals", "new", "rest", "cap", "capgoals",
                                       "issue30", "issue30itl"), default="all",
                    help="goals: the rows issue 14 sets goals for; new: the server-CV rows; "
                         "rest: the ITL rows that are not goal rows; capgoals: q 0.5, 0.7, 1; "
                         "issue30: the rows issue 30 sets goals for; issue30itl: its two "
                         "ITL rows only")
    ap.add_argument("--plain-repeats", action="store_true",
                    help="also plain git bisect run with r requests on each of s servers "
                         "(r 1, 3, 5, 10; s 1, 2, 3) on every row")
    ap.add_argument("--arms", default="plain,sequential,bayes,default",
                    help="comma-separated arms to run")
    ap.add_argument("--prefetch", choices=("none", "independent", "shared"), default="none",
                    help="vllm-bisect arms prefetch the next commits' artifacts (its default "
                         "for wheels and images) over a link of independent or shared "
                         "bandwidth; plain git bisect run never prefetches")
    ap.add_argument("--prefetch-pool", type=int, default=2,
                    help="prefetch threads (the Prefetcher's default: 2)")
    ap.add_argument("--recheck-runs", type=int, default=None,
                    help="default arm on caps: verdict.recheck_runs (default: the spec's)")
    ap.add_argument("--plateau", choices=("on", "off"), default=None,
                    help="default arm on the ITL rows: verdict.plateau (default: the spec's)")
    a = ap.parse_args()
    arms = tuple(a.arms.split(","))
    items = list(trials(a.seed, a.trials, a.max_crash, a.rows, arms, a.prefetch,
                        a.prefetch_pool, a.recheck_runs, a.plain_repeats,
                        None if a.plateau is None else a.plateau == "on"))
    with ProcessPoolExecutor(a.jobs) as pool:
        outs = list(pool.map(run_trial, [t for _, t in items], chunksize=4))
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for (label, t), o in zip(items, outs, strict=True):
        groups.setdefault((label, t.arm), []).append(o)
    rows = [summarize(label, arm, os_) for (label, arm), os_ in groups.items()]
    threads = f"{a.prefetch_pool} prefetch thread{'s' * (a.prefetch_pool > 1)}"
    print(f"{a.trials} scenarios per row (seed {a.seed}): n 50..1000, skip rate 0..20%, "
          f"server crashes 0..{a.max_crash:.0%} per start; vllm-bisect prefetch: "
          f"{a.prefetch}{f' ({threads})' if a.prefetch != 'none' else ''}\n")
    head = ("| {} | arm | exact culprit | refused | commits probed | server starts | "
            "probe requests | sim. wall (h) |\n|---|---|---|---|---|---|---|---|")
    print("ITL slowdown (effect | request CV | server CV, +acc: acceptance noise):\n")
    print(head.format("effect &#124; CV &#124; server CV"))
    for r in rows:
        if not r.label.startswith("q ="):
            print(fmt(r))
    if any(r.label.startswith("q =") for r in rows):
        print("\nFlaky 128-token cap (a bad commit's server shows it with probability q):\n")
        print(head.format("flake"))
        for r in rows:
            if r.label.startswith("q ="):
                print(fmt(r))
    print()
    if a.plain_repeats:
        print("At equal accuracy (plain arms: r requests on each of s servers, the median):\n")
        for line in plain_arms.equal_accuracy(rows):
            print(line)
        print()
    print("Forecast (default arm): predicted wall / actual, per scenario (the forecast made "
          "again when auto switches to bayes):\n")
    for line in plain_arms.forecast_lines(groups):
        print(line)
    print("\nThe first forecast only (before any switch to bayes):\n")
    for line in plain_arms.forecast_lines(groups, first=True):
        print(line)
    print()
    for line in goal_lines({(r.label, r.arm): r for r in rows}):
        print(line)


def goal_lines(by: dict[tuple[str, str], Row]) -> Iterator[str]:
    """Issue 14's goals, read off the rows (default arm vs plain)."""
    def get(label: str) -> tuple[Row, Row] | None:
        p, d = by.get((label, "plain")), by.get((label, "default"))
        return (p, d) if p is not None and d is not None else None

    if (pd := get("1.3x | 10% | 5% +acc")) is not None:
        p, d = pd
        yield (f"goal 1.3x, req CV 10% + server CV 5%: default exact {d.exact:.1%} (>= 99%: "
               f"{d.exact >= 0.99}); plain {p.exact:.1%}; wall {d.hours / p.hours:.2f}x plain")
    if (pd := get("7.0x | 2% | 0%")) is not None:
        p, d = pd
        yield (f"goal 7x, CV 2%: default exact {d.exact:.1%} (100%: {d.exact >= 1.0}); wall "
               f"{d.hours:.2f} h vs plain {p.hours:.2f} h = {d.hours / p.hours:.2f}x (<= 1.25x: "
               f"{d.hours <= 1.25 * p.hours}); server starts {d.starts:.1f} vs {p.starts:.1f}; "
               f"requests {d.samples:.1f} vs {p.samples:.1f}")
    if (pd := get("1.3x | 10% | 0%")) is not None:
        p, d = pd
        yield (f"goal 1.3x, CV 10%, no server noise: default exact {d.exact:.1%} (>= 99.5%: "
               f"{d.exact >= 0.995}); wall {d.hours / p.hours:.2f}x plain (<= 1.6x: "
               f"{d.hours <= 1.6 * p.hours})")


if __name__ == "__main__":
    main()
