"""A run killed with SIGKILL at a random moment, then resumed, through the CLI (issue 48).

    python3 benchmarks/bench_resume.py [--runs 20] [--seed 0] [--commits 30]

Per run: a synthetic history (``vllm-bisect sim history``: a 1.5x ITL step at a random
commit, the simulator's own request and server noise), bisected once uninterrupted with the
spec a user writes (``[verdict] symptom = "itl"``) and the model of the range
(``strategy = "changepoint"``), and once killed with SIGKILL at a moment
drawn uniformly over the uninterrupted run's wall time and resumed (``vllm-bisect run
--session S`` again). Each bisect has its own cache directory (nothing carried between the
two). Printed: per run, both culprits, both server-start totals (result.json:
``server_starts`` + ``verify_server_starts``, every call of the session), and the summary the
issue asks for: the same culprit each time, mean total starts of the resumed runs <= the
uninterrupted runs' + 1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


def run(spec: Path, session: Path, cache: Path, kill_after: float | None = None
        ) -> tuple[float, bool]:
    """One ``vllm-bisect run`` (killed after ``kill_after`` seconds if given): its wall
    time, and whether it was killed before it ended."""
    cmd = [*CLI, "run", "--spec", str(spec), "--session", str(session), "--cache-dir",
           str(cache)]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        p.wait(timeout=kill_after if kill_after is not None else 1800)
        return time.monotonic() - t0, False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return time.monotonic() - t0, True


def result(session: Path) -> tuple[str | None, int]:
    doc = json.loads((session / "result.json").read_text())
    return doc["first_bad"], int(doc["server_starts"]) + int(doc["verify_server_starts"])


def one(k: int, rnd: random.Random, root: Path, commits: int) -> dict[str, object]:
    at = rnd.randrange(2, commits)
    hist = root / f"h{k}"
    subprocess.run([*CLI, "sim", "history", str(hist), "--commits", str(commits),
                    "--slow-at", str(at), "--slow-factor", "1.5", "--seed", str(k)],
                   check=True, capture_output=True)
    spec = root / f"spec{k}.toml"
    made = Path(f"{hist}-spec.toml").read_text()
    head, _, _ = made.partition("[verdict]")
    spec.write_text(head + '[verdict]\nsymptom = "itl"\nstrategy = "changepoint"\n')
    wall, _ = run(spec, root / f"plain{k}", root / f"cache-a{k}")
    culprit, starts = result(root / f"plain{k}")
    cut = rnd.uniform(0.5, wall)
    session = root / f"killed{k}"
    _, killed = run(spec, session, root / f"cache-b{k}", kill_after=cut)
    run(spec, session, root / f"cache-b{k}")
    again, resumed_starts = result(session)
    return {"run": k, "planted": at, "culprit": culprit, "resumed_culprit": again,
            "starts": starts, "resumed_starts": resumed_starts, "killed_at_s": round(cut, 1),
            "killed": killed, "wall_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--commits", type=int, default=30)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for k in range(a.runs):
            row = one(k, rnd, Path(d), a.commits)
            rows.append(row)
            print(json.dumps(row), flush=True)
    same = sum(r["culprit"] == r["resumed_culprit"] for r in rows)
    killed = sum(bool(r["killed"]) for r in rows)
    base = statistics.fmean(float(r["starts"]) for r in rows)          # type: ignore[arg-type]
    resumed = statistics.fmean(float(r["resumed_starts"]) for r in rows)  # type: ignore[arg-type]
    print(f"\n{len(rows)} runs, {killed} killed before they ended; the same culprit "
          f"{same}/{len(rows)}; mean server starts uninterrupted {base:.2f}, killed and "
          f"resumed {resumed:.2f} (goal: <= {base + 1:.2f})")


if __name__ == "__main__":
    main()
