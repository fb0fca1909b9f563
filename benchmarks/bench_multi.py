"""One culprit per symptom, and two steps of one symptom (issue 28), on virtual time.

    python3 benchmarks/bench_multi.py [--trials 300] [--seed 0] [--jobs N] [--rest-servers K]

The same virtual cluster as bench_accuracy.py (src/vllm_bisect/sim/virtual.py; cost model
artifact 5 min / server start 3 min / probe request 1 min; per-request ITL CV 10% and a
server-level CV 5%; no skips, no crashes), scenarios from sim/virtual_steps.py. The real
Driver and the real multi-symptom loop (bisect/multi.py) run unchanged; the spec is what a
user writes (``itl_factor = 1.15``, no strategy, ``verify_samples = 0``).

Rows:

- two symptoms: a 128-token cap at one commit and a 1.3x ITL step at another (n 50..1000).
  Arms: ``length`` alone, ``itl`` alone (each a single-symptom bisect, as today), and
  ``verdict.symptoms = ["length", "itl"]`` (one run): exact = every planted culprit named.
- two 1.3x ITL steps in one range (n = 32, the issue's range, and n 50..1000; the steps at
  least 2 commits apart): exact = both named, in one run with the rest check.
- one 1.3x ITL step (n 50..1000): what the rest check costs when there is nothing more
  (exact = the one culprit named and no second one).
- one 2x ITL step under the H200 source bisect's noise (docs/validation.md (j): request CV
  6%, server-level CV 10%, the default smallest change 5%): the rest cannot be settled in a
  few servers; what the capped rest check (``verdict.rest_servers``) costs there.

"rest-check starts": the server starts of the rest checks that ended without a search
(explained, undecided, or refused), read from the culprits' notes.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.multi import run_symptoms
from vllm_bisect.bisect.policies import Plan
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import NotReproduced
from vllm_bisect.sim.virtual import VirtualCluster, commit_range
from vllm_bisect.sim.virtual_steps import StepsScenario, steps_scenario
from vllm_bisect.spec import BisectSpec, parse_spec

CV, SERVER_CV, EFFECT = 0.10, 0.05, 1.3
ROWS = ("two symptoms", "two itl steps, n = 32", "two itl steps, n 50..1000",
        "one itl step, n 50..1000", "one 2x itl step, H200-like noise, n = 26")
ARMS = {ROWS[0]: ("length", "itl", "length+itl"), ROWS[1]: ("itl", "itl, no rest check"),
        ROWS[2]: ("itl",), ROWS[3]: ("itl", "itl, no rest check"),
        ROWS[4]: ("itl", "itl, no rest check")}
# the H200 source bisect's noise (docs/validation.md (j)): per-request CV ~6%, server-level
# ~10%, a 2x step, and the default smallest change that matters (min_effect 5%)
H200_CV, H200_SERVER_CV, H200_EFFECT = 0.06, 0.10, 2.0
# a rest check's note: "rest check, <question>: <answer> (N server starts)..."
REST_STARTS = re.compile(r"rest check, [^;]*?\((\d+) server starts?\b")


@dataclass(frozen=True)
class Trial:
    row: str
    arm: str
    seed: int
    plateau: bool | None = None   # verdict.plateau (None: the spec's default)
    rest_servers: int | None = None   # verdict.rest_servers (None: the spec's default)
    strategy: str | None = None   # verdict.strategy of every arm (None: auto)


@dataclass(frozen=True)
class Outcome:
    exact: bool
    first_exact: bool   # the first search's culprit is a planted one
    starts: int
    minutes: float
    rest: int = 0       # server starts of the rest checks that ended without a search


def make_scenario(t: Trial) -> tuple[StepsScenario, set[int], set[int]]:
    """The scenario, the planted cap culprits and the planted ITL steps."""
    rnd = random.Random(t.seed)
    n = 32 if t.row == ROWS[1] else rnd.randint(50, 1000)
    if t.row == ROWS[0]:
        cap, itl = rnd.sample(range(n), 2)
        return steps_scenario(n, ((itl, EFFECT),), cap_at=cap, cv=CV,
                              server_cv=SERVER_CV), {cap}, {itl}
    if t.row == ROWS[4]:
        at = rnd.randrange(26)
        return steps_scenario(26, ((at, H200_EFFECT),), cv=H200_CV,
                              server_cv=H200_SERVER_CV), set(), {at}
    if t.row == ROWS[3]:
        at = rnd.randrange(n)
        return steps_scenario(n, ((at, EFFECT),), cv=CV, server_cv=SERVER_CV), set(), {at}
    while True:
        a, b = sorted(rnd.sample(range(n), 2))
        if b - a >= 2:
            break
    return (steps_scenario(n, ((a, EFFECT), (b, EFFECT)), cv=CV, server_cv=SERVER_CV),
            set(), {a, b})


def spec_for(arm: str, row: str = "", rest_servers: int | None = None,
             plateau: bool | None = None, strategy: str | None = None) -> BisectSpec:
    symptoms = ["length", "itl"] if arm == "length+itl" else [arm.split(",")[0]]
    verdict: dict[str, object] = {"symptoms": symptoms, "verify_samples": 0,
                                  "rest_check": "no rest" not in arm}
    if rest_servers is not None:
        verdict["rest_servers"] = rest_servers
    if plateau is not None:
        verdict["plateau"] = plateau
    if strategy is not None:   # (the model of the range judges a cap too, since session 23)
        verdict["strategy"] = strategy
    if row != ROWS[4]:   # the H200-like row: the default (min_effect 5%)
        verdict["itl_factor"] = 1.15
    # the ITL arms probe as the two-symptom run does (one request first, more on demand)
    return parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                       "probe": {"max_tokens": 256, "requests": 1}, "verdict": verdict})


def run_trial(t: Trial) -> Outcome:
    logging.disable(logging.WARNING)
    s, caps, steps = make_scenario(t)
    rng = commit_range(s.n)
    sp = spec_for(t.arm, t.row, t.rest_servers, t.plateau, t.strategy)
    cluster = VirtualCluster(s, rng, 1, random.Random(t.seed * 7919 + 1),
                             first_batch=sp.probe.requests)
    want = {"length": caps, "itl": steps}
    with tempfile.TemporaryDirectory() as d:
        journal = SessionJournal(Path(d))

        def driver(spec: BisectSpec, r: CommitRange, plan: Plan) -> Driver:
            return Driver(spec, r, cluster, journal, None, plan=plan)

        try:
            multi = run_symptoms(sp, rng, driver, NullEvents())
        except NotReproduced:
            return Outcome(False, False, cluster.starts, cluster.clock)
        finally:
            journal.close()
    named: dict[str, set[int]] = {}
    for c in multi.culprits:
        if c.commit is not None and c.confirmed:
            named.setdefault(c.symptom, set()).add(rng.index(c.commit))
    exact = all(named.get(sym, set()) == want[sym] for sym in map(str, sp.symptom_list()))
    first = multi.culprits[0].commit if multi.culprits else None
    first_exact = first is not None and rng.index(first) in caps | steps
    rest = sum(int(n) for c in multi.culprits for n in REST_STARTS.findall(c.note))
    return Outcome(exact, first_exact, cluster.starts, cluster.clock, rest)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rows", choices=("all", "steps", "symptoms"), default="all",
                    help="steps: the ITL step rows only (not the two-symptom row); "
                         "symptoms: the two-symptom row only")
    ap.add_argument("--plateau", choices=("on", "off"), default=None,
                    help="verdict.plateau (default: the spec's)")
    ap.add_argument("--strategy", default=None,
                    help="verdict.strategy (default: the spec's, auto), e.g. changepoint")
    ap.add_argument("--rest-servers", type=int, default=None,
                    help="verdict.rest_servers (default: the spec's)")
    a = ap.parse_args()
    plateau = None if a.plateau is None else a.plateau == "on"
    items = [Trial(row, arm, a.seed * 1_000_003 + r * 10_007 + j, plateau, a.rest_servers,
                   a.strategy)
             for r, row in enumerate(ROWS)
             if a.rows == "all" or (r > 0) == (a.rows == "steps")
             for arm in ARMS[row] for j in range(a.trials)]
    with ProcessPoolExecutor(a.jobs) as pool:
        outs = list(pool.map(run_trial, items, chunksize=4))
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for t, o in zip(items, outs, strict=True):
        groups.setdefault((t.row, t.arm), []).append(o)
    print(f"{a.trials} scenarios per row (seed {a.seed}); ITL {EFFECT}x per step, request CV "
          f"{CV:.0%}, server CV {SERVER_CV:.0%}; itl_factor 1.15\n")
    print("| row | arm | every planted culprit named, no other | first search exact | "
          "server starts (mean) | server starts (median) | rest-check starts (mean) | "
          "sim. wall (h) |\n|---|---|---|---|---|---|---|---|")
    mean: dict[tuple[str, str], float] = {}
    for (row, arm), os_ in groups.items():
        mean[row, arm] = statistics.fmean(o.starts for o in os_)
        print(f"| {row} | {arm} | {sum(o.exact for o in os_) / len(os_):.1%} | "
              f"{sum(o.first_exact for o in os_) / len(os_):.1%} | {mean[row, arm]:.1f} | "
              f"{statistics.median(o.starts for o in os_):.0f} | "
              f"{statistics.fmean(o.rest for o in os_):.1f} | "
              f"{statistics.fmean(o.minutes for o in os_) / 60:.2f} |")
    if (ROWS[0], "length+itl") not in mean:
        return
    both, one = mean[ROWS[0], "length+itl"], max(mean[ROWS[0], "length"], mean[ROWS[0], "itl"])
    print(f"\ngoal two symptoms: {both:.1f} server starts vs {one:.1f} for the costlier "
          f"single-symptom bisect = {both / one:.2f}x (<= 1.5x: {both <= 1.5 * one}); vs both "
          f"single bisects run one after the other: "
          f"{both / (mean[ROWS[0], 'length'] + mean[ROWS[0], 'itl']):.2f}x")


if __name__ == "__main__":
    main()
