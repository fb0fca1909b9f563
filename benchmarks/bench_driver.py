"""Driver benchmarks: probes per bisect and driver overhead per step.

    python3 benchmarks/bench_driver.py [--overhead-n 10000]

Runs the real Driver, SessionJournal and ResultCache over real git histories (built with
git fast-import), with an instant evaluator whose verdicts are deterministic (bad from the
planted index on). No servers: this measures the bisection logic and its I/O, not vLLM.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_repo import make_linear_repo

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.range import commit_range, open_repo
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.models import EvalStatus, Evaluation, Measurement, TokensSource
from vllm_bisect.spec import parse_spec

SPEC = parse_spec({"probe": {"max_tokens": 256}, "verdict": {"symptom": "length"}})


def measurement(tokens: int) -> Measurement:
    return Measurement(endpoint="completions", model="m", requested_tokens=256,
                       min_output_tokens=256, output_tokens=[tokens], length_ok=tokens >= 256,
                       itl_ms=1.0, chunk_itl_ms=3.0, tokens_per_chunk=3.0, ttft_ms=10.0,
                       tpot_ms=1.0, finish_reasons=["length"], tokens_source=TokensSource.USAGE)


class InstantEvaluator:
    def __init__(self, shas: list[str], culprit_index: int) -> None:
        self.pos = {s: i for i, s in enumerate(shas)}
        self.culprit = culprit_index
        self.calls = 0
        self.time_s = 0.0

    def evaluate(self, commit: str) -> Evaluation:
        t = time.perf_counter()
        self.calls += 1
        bad = self.pos[commit] >= self.culprit
        ev = Evaluation(commit=commit, status=EvalStatus.MEASURED,
                        measurement=measurement(128 if bad else 256))
        self.time_s += time.perf_counter() - t
        return ev


def bisect_once(repo_path: Path, shas: list[str], culprit: int, work: Path) -> tuple[int, float, int]:
    repo = open_repo(repo_path)
    t0 = time.perf_counter()
    rng = commit_range(repo, shas[0], shas[-1])
    t_range = time.perf_counter() - t0
    ev = InstantEvaluator(shas, culprit)
    journal = SessionJournal(work / f"s-{culprit}")
    cache = ResultCache(work / f"cache-{culprit}.sqlite")
    t1 = time.perf_counter()
    result = Driver(SPEC, rng, ev, journal, cache).run()
    t_driver = time.perf_counter() - t1 - ev.time_s
    journal.close()
    cache.close()
    assert result.first_bad == shas[culprit], (culprit, result.first_bad)
    del t_range
    return ev.calls - 2, t_driver, ev.calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--overhead-n", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    print("## probes besides the two endpoint checks (deterministic verdicts)\n")
    print("| n | culprits tried | max probes | mean probes | bound ceil(log2 n)+1 | ok |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in (16, 32, 64, 128, 256, 512, 1024):
            shas = make_linear_repo(root / f"r{n}", n)
            culprits = list(range(1, n + 1)) if n <= 64 else sorted(rnd.sample(range(1, n + 1), 40))
            probes = [bisect_once(root / f"r{n}", shas, c, root / f"w{n}")[0] for c in culprits]
            bound = math.ceil(math.log2(n)) + 1
            print(f"| {n} | {len(culprits)} | {max(probes)} | {sum(probes) / len(probes):.2f} | "
                  f"{bound} | {'yes' if max(probes) <= bound else 'NO'} |")
        n = a.overhead_n
        t = time.perf_counter()
        shas = make_linear_repo(root / "big", n)
        print(f"\n## driver overhead on a {n}-commit history (built in {time.perf_counter() - t:.1f} s)\n")
        print("| culprit index | judged commits | driver time excl. evaluation | per step |")
        print("|---|---|---|---|")
        per_step = []
        for c in sorted(rnd.sample(range(1, n + 1), 5)):
            _, t_driver, calls = bisect_once(root / "big", shas, c, root / "wbig")
            per_step.append(t_driver / calls)
            print(f"| {c} | {calls} | {t_driver * 1000:.1f} ms | {t_driver / calls * 1000:.2f} ms |")
        print(f"\nmax per-step driver overhead: {max(per_step) * 1000:.2f} ms "
              f"(goal < 50 ms: {'met' if max(per_step) < 0.05 else 'NOT met'})")
        t = time.perf_counter()
        commit_range(open_repo(root / "big"), shas[0], shas[-1])
        print(f"listing the {n}-commit range once (GitPython rev-list + commit objects): "
              f"{(time.perf_counter() - t) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
