"""What the default path costs on a clean single step, phase by phase, against plain bisect.

    python3 benchmarks/bench_cost.py [--trials 300] [--seed 0] [--jobs N] [--rows ...]

Issue 40's goal: with the spec a user writes (``[verdict] symptom = "itl"``, nothing else:
the two-level test, the final pair at the whole-bisect bound, the culprit's verification and
both rest checks as shipped), a clean single ITL step of 1.3x, 1.5x or 2x under 2-5% request
noise and 2-5% server-level noise over 32-1000 commits is named exactly in >= 99% of runs,
with every server start of every phase <= plain + 4 in >= 95% of runs; plain is
``git bisect run``'s one server per step, ceil(log2 n).

The same virtual cluster as bench_accuracy.py (src/vllm_bisect/sim/virtual.py: the real
Driver and the real multi-symptom loop with its rest checks, per-commit outcomes drawn from
the scenario; no skips, no crashes: a clean step). Per row: n uniform in 32..1000, the
culprit anywhere, request CV and server CV each uniform in 2..5%. Exact: the one culprit
named and no other. The phases are ``models.Phase`` as result.json's ``starts_by_phase``
counts them.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.bisect.multi import run_symptoms
from vllm_bisect.bisect.policies import Plan
from vllm_bisect.bisect.range import CommitRange
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Phase
from vllm_bisect.report.result import plain_starts
from vllm_bisect.sim.virtual import VirtualCluster, commit_range
from vllm_bisect.sim.virtual_steps import StepsScenario, steps_scenario
from vllm_bisect.spec import BisectSpec, parse_spec

EFFECTS = (1.3, 1.5, 2.0)
SLACK = 4   # the goal: every start <= plain + SLACK


@dataclass(frozen=True)
class Trial:
    effect: float
    seed: int
    lo: float = 0.02   # request and server CV drawn in [lo, hi]
    hi: float = 0.05
    spec: tuple[tuple[str, object], ...] = ()   # verdict keys over the default
    requests: int | None = None   # probe.requests (None: the default)
    n: int | None = None          # commits (None: uniform in 32..1000)
    cv: float | None = None       # request and server CV (None: drawn in [lo, hi])
    server_cv: float | None = None
    start_s: float | None = None  # seconds to healthy each server reports (None: none)


@dataclass(frozen=True)
class Outcome:
    exact: bool
    refused: bool
    n: int
    starts: int
    phases: dict[str, int] = field(default_factory=dict)
    p: float | None = None     # the model's P of the culprit it named (changepoint)


def spec_for(t: Trial) -> BisectSpec:
    probe = {} if t.requests is None else {"requests": t.requests}
    return parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"}, "probe": probe,
                       "verdict": {"symptom": "itl", **dict(t.spec)}})


def scenario_for(t: Trial) -> tuple[int, int, StepsScenario]:
    """The trial's range size, culprit index and scenario (drawn from its seed; bench_hook.py
    draws the same)."""
    rnd = random.Random(t.seed)
    n = t.n or rnd.randint(32, 1000)
    at = rnd.randrange(n)
    cv, server_cv = rnd.uniform(t.lo, t.hi), rnd.uniform(t.lo, t.hi)
    cv = cv if t.cv is None else t.cv
    server_cv = server_cv if t.server_cv is None else t.server_cv
    return n, at, steps_scenario(n, ((at, t.effect),), cv=cv, server_cv=server_cv)


def run_trial(t: Trial) -> Outcome:
    logging.disable(logging.WARNING)
    n, at, s = scenario_for(t)
    rng = commit_range(n)
    sp = spec_for(t)
    cluster = VirtualCluster(s, rng, 1, random.Random(t.seed * 7919 + 1),
                             first_batch=sp.probe.requests, start_s=t.start_s)
    with tempfile.TemporaryDirectory() as d:
        journal = SessionJournal(Path(d))

        def driver(spec: BisectSpec, r: CommitRange, plan: Plan) -> Driver:
            return Driver(spec, r, cluster, journal, None, plan=plan)

        try:
            multi = run_symptoms(sp, rng, driver, NullEvents())
        except NotReproduced:
            return Outcome(False, True, n, cluster.starts)
        finally:
            journal.close()
    named = {rng.index(c.commit) for c in multi.culprits if c.commit is not None and c.confirmed}
    return Outcome(named == {at}, False, n, cluster.starts,
                   getattr(multi.result, "starts_by_phase", {}),   # (none before issue 40)
                   getattr(multi.result, "confidence", None))


def trial_seed(seed: int, row: int, j: int) -> int:
    """Trial ``j`` of row ``row`` (the effect's place in ``--effects``) under ``--seed``."""
    return seed * 1_000_003 + row * 10_007 + j


def pct95(ordered: list[int]) -> int:
    """The 95th percentile of sorted values, as the rows' "95th pct" column reads it."""
    return ordered[int(0.95 * (len(ordered) - 1))]


def summarize(effect: float, outs: list[Outcome]) -> str:
    k = len(outs)
    within = sum(o.starts <= plain_starts(o.n) + SLACK for o in outs)
    phases: Counter[str] = Counter()
    for o in outs:
        phases.update(o.phases)
    over = sorted(o.starts - plain_starts(o.n) for o in outs)
    per = " / ".join(f"{phases[p.value] / k:.1f}" for p in Phase)
    return (f"| {effect}x | {sum(o.exact for o in outs) / k:.1%} | "
            f"{sum(o.refused for o in outs) / k:.1%} | "
            f"{statistics.fmean(plain_starts(o.n) for o in outs):.1f} | "
            f"{statistics.fmean(o.starts for o in outs):.1f} | {per} | "
            f"{within / k:.1%} | {pct95(over):+d} | {over[-1]:+d} |")


def calibration(outs: list[Outcome], bar: float = 0.99) -> str:
    """Of the culprits named with P >= ``bar``, how many are right (the model's calibration)."""
    named = [o for o in outs if o.p is not None and o.p >= bar and not o.refused]
    right = sum(o.exact for o in named)
    return (f"calibration: {len(named)} culprits named with P >= {bar}, {right} right "
            f"({right / len(named):.2%})" if named else "calibration: none named with a P")


def parse_value(val: str) -> object:
    """A --set value: true/false, an int, a float, else the string."""
    if val.lower() in ("true", "false"):
        return val.lower() == "true"
    for kind in (int, float):
        try:
            return kind(val)
        except ValueError:
            continue
    return val


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--effects", default=",".join(map(str, EFFECTS)))
    ap.add_argument("--noise", default="0.02,0.05", help="request and server CV range lo,hi")
    ap.add_argument("--requests", type=int, default=None, help="probe.requests")
    ap.add_argument("--row", choices=("clean", "h100"), default="clean",
                    help="h100: issue 48's row like the real H100 run: n = 30, a 1.2x step, "
                         "per-request CV 11%%, server CV 4.5%% (--effects 1.2 implied)")
    ap.add_argument("--set", action="append", default=[],
                    help="a verdict key over the default, KEY=VALUE (int/float/bool/str)")
    a = ap.parse_args()
    lo, hi = (float(x) for x in a.noise.split(","))
    extra: list[tuple[str, object]] = []
    for kv in a.set:
        key, val = kv.split("=", 1)
        extra.append((key, parse_value(val)))
    effects = [float(x) for x in a.effects.split(",")]
    fixed: dict[str, object] = {}
    if a.row == "h100":
        # a start 60 s to healthy (real vLLM 0.25.1 on an H100: 60.6-69.5 s, docs/
        # validation.md) against the virtual request's 2.56 s (10 ms x 256 tokens; real: 8.5 ms)
        effects, fixed = [1.2], {"n": 30, "cv": 0.11, "server_cv": 0.045, "start_s": 60.0}
    items = [Trial(e, trial_seed(a.seed, r, j), lo, hi, tuple(extra), a.requests,
                   **fixed)  # type: ignore[arg-type]
             for r, e in enumerate(effects) for j in range(a.trials)]
    with ProcessPoolExecutor(a.jobs) as pool:
        outs = list(pool.map(run_trial, items, chunksize=4))
    noise = ("n = 30, request CV 11%, server CV 4.5%" if a.row == "h100" else
             f"n 32..1000, request and server CV {lo:.0%}..{hi:.0%} each")
    print(f"{a.trials} scenarios per row (seed {a.seed}); {noise}; spec: symptom = \"itl\""
          f"{''.join(f', {k} = {v}' for k, v in extra)}\n")
    print("| step | exact | refused | plain (ceil log2 n) | server starts, all phases | "
          f"{' / '.join(p.value for p in Phase)} | <= plain + {SLACK} | 95th pct over plain | "
          "max over plain |\n|---|---|---|---|---|---|---|---|---|")
    for r, e in enumerate(effects):
        print(summarize(e, outs[r * a.trials:(r + 1) * a.trials]))
    print()
    for r, e in enumerate(effects):
        row = outs[r * a.trials:(r + 1) * a.trials]
        over = [o.starts - plain_starts(o.n) for o in row]
        print(f"{e}x: median server starts over plain {statistics.median(over):+.1f}")
    print(calibration(outs))


if __name__ == "__main__":
    main()
