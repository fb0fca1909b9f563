"""Does ``explain`` name the planted kernel change, and only it?

    python3 benchmarks/bench_explain.py [--histories 100] [--seed 0] [--servers 2]
    python3 benchmarks/bench_explain.py --real 5      # the real CLI path, a few histories

Virtual path (no server processes: a real simulator server per history is ~20 s of a
2-core machine, 100 histories x 4 servers would be over half an hour): each history draws
a planted kernel-level change the way ``sim/history.py`` plants it (``kernel_table``: a
kernel slows, a new kernel appears, or the host gap between steps grows, by 10-50% of a
5-30 ms decode step), and each profiled server is the simulator's own profiler
(``sim/profiler.py``: the server start's level ``N(1, server_cv)``, 1% per kernel and start,
``noise_cv`` per launch) recording 1 prefill and 40-200 decode steps, writing a gzipped
torch-shaped trace to disk. The traces are read by ``explain``'s parser and diffed by its
spread test (``explain/trace.py``, ``explain/diff.py``) exactly as ``vllm-bisect explain``
does after its servers ran. Only the HTTP and the engine pacing are left out; the
end-to-end path through the real CLI is tests/explain/test_cli_explain.py.

Rows:
- planted: the planted kernel (or the idle gap) is the top reported delta, with the right
  kind (new / slower); any other reported delta is a false report (nothing else changed).
- A/A: both sides the same commit (no change at all): how often is anything reported.
- inside the spread: a planted slowdown of 1% of the kernel's own time (or of the host
  gap), the size of a kernel's start-to-start variation: how often is it reported.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vllm_bisect.explain.diff import profile_diff
from vllm_bisect.explain.trace import TraceSummary, summarize
from vllm_bisect.sim.engine import SimConfig
from vllm_bisect.sim.profile_trace import BASE_KERNELS, kernel_table
from vllm_bisect.sim.profiler import SimProfiler

NEW_KERNELS = ("_rms_norm_gated_kernel", "_forward_core_kernel", "triton_red_fused_0",
               "cutlass_scaled_mm_sm90_kernel")
CHANGES = ("slower", "new", "host-gap")


@dataclass(frozen=True)
class Plant:
    change: str | None
    kernel: str
    effect: float
    step_ms: float

    @property
    def key(self) -> str:
        return "step:gpu_idle" if self.change == "host-gap" else f"kernel:{self.kernel}"


def profile(root: Path, plant: Plant, planted: bool, n: int, seed: str, steps: int,
            server_cv: float, noise_cv: float) -> TraceSummary:
    kernels, gap = kernel_table(plant.step_ms, plant.change if planted else None, plant.kernel,
                                plant.effect)
    cfg = SimConfig(kernels=kernels, host_gap_us=gap, profiler_dir=str(root / seed / str(n)),
                    noise_cv=noise_cv, seed=0)
    rng = random.Random(f"{seed}|{n}|level")
    p = SimProfiler(cfg, max(0.2, rng.gauss(1.0, server_cv)), f"{seed}|{n}")
    p.active = True
    p.record(True, 30)
    for _ in range(steps):
        p.record(False, 4)
    return summarize(p.flush())


def one(root: Path, plant: Plant, seed: str, servers: int, server_cv: float, noise_cv: float,
        same: bool = False) -> tuple[bool, int, list[str]]:
    """(top delta is the planted one, other deltas reported, reported keys)."""
    rng = random.Random(seed)
    a, b = [], []
    for n in range(servers):  # interleaved as explain runs them
        steps = rng.randint(40, 200)
        a.append(profile(root, plant, False, 2 * n, seed, steps, server_cv, noise_cv))
        b.append(profile(root, plant, not same, 2 * n + 1, seed, rng.randint(40, 200),
                         server_cv, noise_cv))
    d = profile_diff(a, b)
    keys = [x.key for x in d.deltas]
    want = "new" if plant.change == "new" else "slower"
    top = bool(d.deltas) and d.deltas[0].key == plant.key and d.deltas[0].kind.value == want
    return top, len(keys) if same else sum(k != plant.key for k in keys), keys


def draw(rng: random.Random, effect: tuple[float, float] = (0.10, 0.50),
         changes: tuple[str, ...] = CHANGES, own: float | None = None) -> Plant:
    """A planted change of ``effect`` x the step, or (``own``) of ``own`` x the changed
    kernel's (or host gap's) own time per step."""
    change = rng.choice(changes)
    kernel = (rng.choice(NEW_KERNELS) if change == "new"
              else rng.choice([k for k, _, _ in BASE_KERNELS]))
    step_ms = rng.uniform(5.0, 30.0)
    eff = rng.uniform(*effect)
    if own is not None:
        kernels, gap = kernel_table(step_ms, None, kernel, 0.0)
        size = gap if change == "host-gap" else next(us * n for k, us, n in kernels
                                                      if k == kernel)
        eff = own * size / (step_ms * 1000.0)
    return Plant(change, kernel, eff, step_ms)


def real(n: int, seed: int) -> None:
    """``--real N``: N synthetic histories through the real CLI (``run`` with
    ``explain.profile = true``, real simulator servers): the culprit, and the top delta."""
    import json
    import subprocess
    import sys

    from vllm_bisect.sim.history import HistoryPlan, generate_history, sim_path
    from vllm_bisect.spec import dump_spec, parse_spec

    rng = random.Random(seed)
    print("| history | planted | culprit found | top delta | explain server starts (said) | "
          "server logs under explain/ (counted) | bisect server starts |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            plant = draw(rng, (0.6, 1.0), (CHANGES[i % 3],))  # each kind in turn
            at = rng.randint(1, 7)
            h = generate_history(Path(tmp) / f"h{i}", HistoryPlan(
                n_commits=8, kernel_at=at, kernel_change=str(plant.change),
                kernel_name=plant.kernel, kernel_effect=plant.effect, step_ms=10.0,
                init_s=0.0, profiler_config_from=rng.choice([None, 0]), seed=seed + i))
            spec = parse_spec({
                "range": {"repo": str(h.path), "good": h.good, "bad": h.bad},
                "build": {"kind": "source"}, "ops": {"startup_timeout_s": 60},
                "serve": {"model": "sim-model", "env": {"VLLM_BISECT_SIM_PATH": sim_path()},
                          "speculative": {"method": "mtp", "num_speculative_tokens": 3}},
                "probe": {"max_tokens": 60, "requests": 3, "warmup": 0},
                "verdict": {"symptom": "itl", "itl_factor": 1.3, "strategy": "threshold"},
                "explain": {"profile": True}})
            (Path(tmp) / f"s{i}.toml").write_text(dump_spec(spec))
            r = subprocess.run([sys.executable, "-m", "vllm_bisect.cli", "run", "--spec",
                                str(Path(tmp) / f"s{i}.toml"), "--session",
                                str(Path(tmp) / f"session{i}"), "--cache-dir",
                                str(Path(tmp) / "cache"), "--json"],
                               capture_output=True, text=True, timeout=900)
            doc = json.loads(r.stdout) if r.returncode == 0 else {}
            ex = doc.get("explain") or {}
            top = (ex.get("deltas") or [{}])[0]
            print(f"| {i} | {plant.change} {plant.kernel if plant.change != 'host-gap' else ''}"
                  f" +{plant.effect:.0%} at {at} | "
                  f"{doc.get('first_bad') == h.planted['kernel']} | "
                  f"{top.get('key')} {top.get('kind')} "
                  f"({'right' if top.get('key') == plant.key else 'WRONG'}) | "
                  f"{ex.get('server_starts')} | {_started(Path(tmp) / f'session{i}')} | "
                  f"{doc.get('server_starts')} |", flush=True)


def _started(session: Path) -> int:
    """The servers explain really started: one serve log each under explain/logs/."""
    return len(list((session / "explain" / "logs").glob("*/serve-*.log")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--servers", type=int, default=2, help="profiled servers per side")
    ap.add_argument("--server-cv", type=float, default=0.02)
    ap.add_argument("--noise-cv", type=float, default=0.05)
    ap.add_argument("--real", type=int, default=0,
                    help="instead: this many histories through the real CLI and simulator")
    args = ap.parse_args()
    if args.real:
        real(args.real, args.seed)
        return
    rng = random.Random(args.seed)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for label, eff, same, changes, own in (
                ("planted 10-50% of the step", (0.10, 0.50), False, CHANGES, None),
                ("A/A (no change)", (0.10, 0.50), True, CHANGES, None),
                # a kernel's time varies 1% from server start to start (sim/profiler.py): a
                # change of 1% of its own time is inside the run-to-run spread (a new kernel
                # never is: it was not there before)
                ("inside the spread (1% of the kernel's or gap's own time)", (0.0, 0.0),
                 False, ("slower", "host-gap"), 0.01)):
            tops = false_any = reported = 0
            false_keys: list[str] = []
            by_change = {c: [0, 0] for c in changes}
            for i in range(args.histories):
                plant = draw(rng, eff, changes, own)
                top, others, keys = one(root, plant, f"{label}-{args.seed}-{i}", args.servers,
                                        args.server_cv, args.noise_cv, same)
                tops += top
                if keys and (same or others):
                    false_keys.extend(k for k in keys if same or k != plant.key)
                false_any += others > 0
                reported += plant.key in keys
                assert plant.change is not None
                by_change[plant.change][0] += top
                by_change[plant.change][1] += 1
            n = args.histories
            split = ", ".join(f"{c} {t}/{k}" for c, (t, k) in by_change.items())
            if false_keys:
                print(f"{label}: false deltas {sorted(set(false_keys))}")
            rows.append((label, f"{100 * tops / n:.1f}%" if not same and eff[0] >= 0.1 else "-",
                         f"{100 * reported / n:.1f}%", f"{100 * false_any / n:.1f}%", split))
    print(f"histories per row: {args.histories}, {args.servers} servers per side, server_cv "
          f"{args.server_cv}, per-launch noise {args.noise_cv}, seed {args.seed}\n")
    print("| row | planted is the top delta | planted change reported | histories with a "
          "false delta | top delta by change |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
