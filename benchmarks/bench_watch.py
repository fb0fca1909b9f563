#!/usr/bin/env python3
"""How well `vllm-bisect watch` finds steps in seeded synthetic benchmark series.

    python3 benchmarks/bench_watch.py [--trials 1000] [--points 60] [--noise 0.02] [--step 0.05]

Rows (each over --trials seeded series, the step at a uniform position in [10, n-10)):
- one step: the planted step lies inside a reported location window ("detected at the right
  commit window"), exactly one change point reported, the window's width in points;
- pure noise: series with at least one reported change point (false alarms);
- two steps, a step that recovers: both planted steps inside reported windows.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from vllm_bisect.watch.detect import DetectOptions, detect


def series(rng: np.random.Generator, n: int, noise: float, steps: dict[int, float]) -> list[float]:
    x = 1.0 + noise * rng.standard_normal(n)
    for at, f in steps.items():
        x[at:] *= f
    return [float(v) for v in x]


def covered(values: list[float], planted: list[int], opts: DetectOptions) -> tuple[bool, int, list[int]]:
    rep = [c for c in detect(values, opts) if c.reported]
    hits = [next((c for c in rep if c.lo <= k <= c.hi), None) for k in planted]
    return all(hits), len(rep), [c.hi - c.lo + 1 for c in hits if c is not None]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--points", type=int, default=60)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--step", type=float, default=0.05)
    ap.add_argument("--max-pvalue", type=float, default=None)
    a = ap.parse_args()
    opts = DetectOptions(max_pvalue=a.max_pvalue)
    n, t0 = a.points, time.monotonic()
    rows: dict[str, list[tuple[bool, int, list[int]]]] = {"one": [], "noise": [], "two": [],
                                                           "recover": []}
    for s in range(a.trials):
        rng = np.random.default_rng(s)
        k = int(rng.integers(10, n - 10))
        rows["one"].append(covered(series(rng, n, a.noise, {k: 1 + a.step}), [k], opts))
        rows["noise"].append(covered(series(rng, n, a.noise, {}), [], opts))
        k1 = int(rng.integers(8, n // 2 - 8))
        k2 = int(rng.integers(n // 2 + 8, n - 8))
        rows["two"].append(covered(series(rng, n, a.noise, {k1: 1 + a.step, k2: 1 + a.step}),
                                   [k1, k2], opts))
        rows["recover"].append(covered(series(rng, n, a.noise, {k1: 1 + a.step, k2: 1 / (1 + a.step)}),
                                       [k1, k2], opts))
    T = a.trials
    print(f"{T} series of {n} points, noise {a.noise:.0%} a point, steps {a.step:.0%}, "
          f"max_pvalue {opts.max_pvalue or 'auto'}, location level {opts.location_level}")
    one = rows["one"]
    widths = [w for _, _, ws in one for w in ws]
    print(f"one step:   in a reported window {sum(h for h, _, _ in one) / T:.1%}, exactly one "
          f"reported and it holds the step {sum(h and r == 1 for h, r, _ in one) / T:.1%}, "
          f"window width median {statistics.median(widths):.0f} / mean {statistics.mean(widths):.2f}"
          f" / p90 {np.percentile(widths, 90):.0f} points")
    print(f"pure noise: false alarms {sum(r > 0 for _, r, _ in rows['noise']) / T:.1%} of series")
    for name in ("two", "recover"):
        print(f"{'two steps' if name == 'two' else 'recovering'}: both in reported windows "
              f"{sum(h for h, _, _ in rows[name]) / T:.1%}, exactly two reported "
              f"{sum(h and r == 2 for h, r, _ in rows[name]) / T:.1%}")
    print(f"wall {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
