"""The costliest runs of one bench_cost.py row, and where their starts went.

    python3 benchmarks/bench_tail.py --effect 2.0 [--trials 150] [--top 10] [--jobs 2]

The same trials as ``bench_cost.py --trials N`` (its seeds for that row, ``trial_seed``), sorted
by server starts over plain bisect: each line is the starts over plain, the seed (for a trace),
the range's size and the starts by phase. docs/benchmarks.md cites it where a tail is traced.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_cost import EFFECTS, Trial, pct95, run_trial, trial_seed

from vllm_bisect.report.result import plain_starts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--effect", type=float, choices=EFFECTS, required=True)
    ap.add_argument("--trials", type=int, default=150)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    row = EFFECTS.index(a.effect)
    trials = [Trial(a.effect, trial_seed(0, row, j)) for j in range(a.trials)]
    with ProcessPoolExecutor(a.jobs) as ex:
        outs = list(ex.map(run_trial, trials))
    over = sorted(((o.starts - plain_starts(o.n), t.seed, o) for t, o in zip(trials, outs, strict=True)),
                  key=lambda x: (x[0], x[1]), reverse=True)
    extra = sorted(x[0] for x in over)
    print(f"{a.effect}x: exact {sum(o.exact for o in outs)} / {a.trials}, median over plain "
          f"+{statistics.median(extra):g}, 95th pct +{pct95(extra)}, "
          f"mean starts {statistics.fmean(o.starts for o in outs):.2f}")
    print("over plain | seed | n | starts by phase")
    for d, seed, o in over[:a.top]:
        phases = ", ".join(f"{k} {v}" for k, v in sorted(o.phases.items()))
        print(f"+{d} | {seed} | {o.n} | {phases}")


if __name__ == "__main__":
    main()
