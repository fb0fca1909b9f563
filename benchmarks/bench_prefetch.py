"""Prefetch benchmark: wall time to culprit with and without prefetching artifacts.

    python3 benchmarks/bench_prefetch.py [--minute 0.02] [--runs 12]

The real Driver, Prefetcher, SessionJournal and ResultCache over a real 200-commit git
history; artifact, start-up and probe costs are injected delays (defaults from issue 3:
5 min pull, 3 min server start, 1 min probe), with one simulated minute = --minute seconds.
Two bandwidth models: 'independent' (concurrent pulls do not slow each other) and 'shared'
(one pull transfers at a time, the pessimistic case for one registry link).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_driver import measurement
from synthetic_repo import make_linear_repo

from vllm_bisect.bisect.driver import Driver
from vllm_bisect.bisect.range import commit_range, open_repo
from vllm_bisect.bisect.state.journal import ResultCache, SessionJournal
from vllm_bisect.builders.base import Artifact, ArtifactKind, Builder
from vllm_bisect.builders.prefetch import Prefetcher
from vllm_bisect.errors import Cancelled
from vllm_bisect.models import EvalStatus, Evaluation
from vllm_bisect.spec import parse_spec

SPEC = parse_spec({"probe": {"max_tokens": 256}, "verdict": {"symptom": "length"}})


class DelayedPull:
    """A builder whose prepare() costs `pull_s` (serialized when bandwidth is shared)."""

    def __init__(self, pull_s: float, shared: bool) -> None:
        self.pull_s = pull_s
        self.link = threading.Lock() if shared else None
        self.done: dict[str, Artifact] = {}
        self.guard = threading.Lock()

    def _transfer(self, cancel: threading.Event | None) -> None:
        end = time.perf_counter() + self.pull_s
        while time.perf_counter() < end:  # chunk by chunk, like the real download loops
            if cancel is not None and cancel.is_set():
                raise Cancelled("pull cancelled")
            time.sleep(min(0.002, max(0.0, end - time.perf_counter())))

    def prepare(self, commit: str, cancel: threading.Event | None = None) -> Artifact:
        with self.guard:
            if commit in self.done:
                return self.done[commit]
        if self.link is not None:
            with self.link:
                self._transfer(cancel)
        else:
            self._transfer(cancel)
        a = Artifact(commit=commit, kind=ArtifactKind.IMAGE, identity=f"image:{commit}")
        with self.guard:
            self.done[commit] = a
        return a


class DelayedServeProbe:
    def __init__(self, builder: Builder, shas: list[str], culprit: int, serve_s: float,
                 probe_s: float) -> None:
        self.builder = builder
        self.pos = {s: i for i, s in enumerate(shas)}
        self.culprit = culprit
        self.serve_s, self.probe_s = serve_s, probe_s

    def evaluate(self, commit: str) -> Evaluation:
        self.builder.prepare(commit)
        time.sleep(self.serve_s + self.probe_s)
        bad = self.pos[commit] >= self.culprit
        return Evaluation(commit=commit, status=EvalStatus.MEASURED,
                          measurement=measurement(128 if bad else 256))


def run_once(repo: Path, shas: list[str], culprit: int, work: Path, minute: float,
             prefetch: bool, shared: bool) -> float:
    b = DelayedPull(5 * minute, shared)
    pf = Prefetcher(b) if prefetch else None
    ev = DelayedServeProbe(pf or b, shas, culprit, 3 * minute, 1 * minute)
    tag = f"{culprit}-{prefetch}-{shared}"
    j = SessionJournal(work / tag)
    c = ResultCache(work / f"{tag}.sqlite")
    t0 = time.perf_counter()
    r = Driver(SPEC, commit_range(open_repo(repo), shas[0], shas[-1]), ev, j, c,
               prefetcher=pf).run()
    wall = time.perf_counter() - t0
    assert r.first_bad == shas[culprit]
    if pf is not None:
        pf.close()
    j.close()
    c.close()
    return wall / minute  # in simulated minutes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--minute", type=float, default=0.02, help="seconds per simulated minute")
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shas = make_linear_repo(root / "repo", a.n)
        culprits = [rnd.randint(1, a.n) for _ in range(a.runs)]
        print(f"n = {a.n}, pull 5 min, server start 3 min, probe 1 min; {a.runs} culprits; "
              f"1 simulated minute = {a.minute} s\n")
        print("| bandwidth | without prefetch (min) | with prefetch (min) | saving |")
        print("|---|---|---|---|")
        for shared in (False, True):
            off = [run_once(root / "repo", shas, c, root, a.minute, False, shared) for c in culprits]
            on = [run_once(root / "repo", shas, c, root, a.minute, True, shared) for c in culprits]
            m_off, m_on = statistics.mean(off), statistics.mean(on)
            print(f"| {'shared' if shared else 'independent'} | {m_off:.1f} | {m_on:.1f} | "
                  f"{(1 - m_on / m_off) * 100:.0f}% |")


if __name__ == "__main__":
    main()
