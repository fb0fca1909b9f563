"""A floor for the model of the range (issue 48's H100 row): bisection by an oracle that knows
both levels, the server-level spread and the request spread, so it never measures an end and
never learns anything but where the step is. Each server: one draw of
N(level, tau^2 + sigma^2 / requests) at the commit splitting the posterior over the first bad
commit in half; stop at P >= confidence. Any real run adds at least the two ends' servers and
what it takes to learn the levels and spreads.

    python3 benchmarks/bench_oracle.py --trials 2000
"""

from __future__ import annotations

import argparse
import math

import numpy as np


def run(rng: np.random.Generator, n: int, step: float, tau: float, sigma: float,
        requests: int, confidence: float) -> tuple[bool, int]:
    sd = math.sqrt(tau ** 2 + sigma ** 2 / requests)
    k = int(rng.integers(0, n))          # the first bad commit
    ks = np.arange(n)
    logp = np.zeros(n)
    servers = 0
    while True:
        p = np.exp(logp - logp.max())
        p /= p.sum()
        if p.max() >= confidence:
            return int(np.argmax(p)) == k, servers
        cum = np.cumsum(p)
        c = int(np.argmin(np.abs(cum[:-1] - 0.5)))    # P(commit c bad) = P(k <= c) ~ 1/2
        y = (step if c >= k else 0.0) + rng.normal(0.0, sd)
        mu = np.where(c >= ks, step, 0.0)
        logp += -(y - mu) ** 2 / (2 * sd * sd)
        servers += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--effect", type=float, default=1.2)
    ap.add_argument("--tau", type=float, default=0.045)
    ap.add_argument("--sigma", type=float, default=0.11)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    plain = math.ceil(math.log2(a.n))
    print(f"n = {a.n}, step {a.effect}x, server sd {a.tau}, request sd {a.sigma} (logs), "
          f"{a.trials} trials, plain {plain}\n")
    print("| requests a server | exact | servers inside the range (mean) | 95th pct | "
          "+ the two ends |\n|---|---|---|---|---|")
    for requests in (3, 9, 20, 50):
        rng = np.random.default_rng(a.seed)
        outs = [run(rng, a.n, math.log(a.effect), a.tau, a.sigma, requests, 0.99)
                for _ in range(a.trials)]
        servers = [s for _, s in outs]
        print(f"| {requests} | {np.mean([e for e, _ in outs]):.1%} | {np.mean(servers):.2f} | "
              f"{np.percentile(servers, 95):.0f} | {np.mean(servers) + 2:.2f} |")


if __name__ == "__main__":
    main()
