"""What ``git bisect run vllm-bisect hook`` costs under ``strategy = "changepoint"`` (issue 48
item 5: the hook answers from the model of the range rebuilt from its journal).

    python3 benchmarks/bench_hook.py [--trials 100] [--jobs N] [--rows clean h100]

git's side is simulated as git does it on a linear history: the candidates are the commits
between the last good and the first bad, HEAD their middle; each answer moves one end. Each
"hook call" is a fresh core (a fresh ``Tester``, as each hook call is a process of its own)
over the same journal, asking :class:`HookSearch` about HEAD, on the virtual cluster of
bench_cost.py (the same scenarios: a clean single ITL step). Counted: every server start
(git's ends included) against plain (``ceil(log2 n)``, one server a step, ends not
measured), and whether git's first bad commit is the planted one.

Rows: ``clean`` (1.3x / 1.5x / 2x, n 32..1000, request and server CV 2..5%, as bench_cost's),
``h100`` (1.2x, 30 commits, request CV 11%, server CV 4.5%, a start costs 60 s against a
~2.6 s request, as measured on the H100).
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench_cost import Trial, scenario_for  # the same trials and scenarios

from vllm_bisect.bisect.core import open_core
from vllm_bisect.bisect.driver import inline
from vllm_bisect.bisect.measurement.executor import InlineExecutor
from vllm_bisect.bisect.search.changepoint_hook import HookSearch
from vllm_bisect.bisect.state.journal import SessionJournal
from vllm_bisect.errors import NotReproduced
from vllm_bisect.models import Verdict
from vllm_bisect.sim.virtual import VirtualCluster, commit_range
from vllm_bisect.spec import parse_spec


@dataclass(frozen=True)
class Outcome:
    exact: bool
    refused: bool
    n: int
    starts: int
    skips: int


def run_trial(t: Trial) -> Outcome:
    logging.disable(logging.WARNING)
    n, at, s = scenario_for(t)
    rng = commit_range(n)
    spec = parse_spec({"build": {"kind": "url", "url": "http://127.0.0.1:1"},
                       "verdict": {"symptom": "itl", "strategy": "changepoint"}})
    cluster = VirtualCluster(s, rng, 1, random.Random(t.seed * 7919 + 1),
                             first_batch=spec.probe.requests, start_s=t.start_s)
    lo, hi, skips = -1, n - 1, 0     # git's last good and first bad (indices; -1: the good end)
    with tempfile.TemporaryDirectory() as d:
        journal = SessionJournal(Path(d))
        try:
            while hi - lo > 1:
                mid = min(max((lo + hi + 1) // 2, lo + 1), hi - 1)
                core = open_core(spec, rng, journal, None, InlineExecutor(inline(cluster)))
                out = HookSearch(core.tester).judge(rng.commits[mid].sha)
                if out.verdict is Verdict.BAD:
                    hi = mid
                elif out.verdict is Verdict.GOOD:
                    lo = mid
                else:   # a skip: git would test a neighbour; counted, and the run stops here
                    skips += 1
                    break
        except NotReproduced:
            return Outcome(False, True, n, cluster.starts, skips)
        finally:
            journal.close()
    return Outcome(hi == at and not skips, False, n, cluster.starts, skips)


def summarize(name: str, outs: list[Outcome]) -> str:
    k = len(outs)
    over = [o.starts - math.ceil(math.log2(o.n)) for o in outs]
    over.sort()
    p95 = over[min(k - 1, math.ceil(0.95 * k) - 1)]
    return (f"| {name} | {k} | {100 * sum(o.exact for o in outs) / k:.1f}% | "
            f"{sum(o.refused for o in outs)} | {sum(o.skips for o in outs)} | "
            f"{statistics.mean(o.starts for o in outs):.1f} | "
            f"{statistics.mean(math.ceil(math.log2(o.n)) for o in outs):.1f} | "
            f"+{statistics.median(over):g} | +{p95} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--rows", nargs="+", default=["clean", "h100"])
    a = ap.parse_args()
    rows: list[tuple[str, list[Trial]]] = []
    if "clean" in a.rows:
        for eff in (1.3, 1.5, 2.0):
            rows.append((f"clean {eff}x", [Trial(eff, a.seed + i) for i in range(a.trials)]))
    if "h100" in a.rows:
        rows.append(("h100 1.2x", [Trial(1.2, a.seed + i, n=30, cv=0.11, server_cv=0.045,
                                          start_s=60.0) for i in range(a.trials)]))
    print("| row | runs | exact | refused | skipped | mean starts | plain | median over "
          "plain | p95 over plain |")
    print("|---|---|---|---|---|---|---|---|---|")
    with ProcessPoolExecutor(a.jobs) as pool:
        for name, trials in rows:
            print(summarize(name, list(pool.map(run_trial, trials))), flush=True)


if __name__ == "__main__":
    main()
