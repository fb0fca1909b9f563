"""A run killed with SIGKILL at a random moment, then resumed, through the CLI (issue 48).

    python3 benchmarks/bench_resume.py [--runs 20] [--seed 0] [--commits 30] [--unpaired]
        [--keep DIR]

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

Paired (the default; ``--unpaired``: each bisect its own OS-seeded noise, as before): both
bisects of a run see the same simulator noise for the same (commit, n-th server of that commit
that ended), through ``VLLM_SIM_PAIRED`` (``sim/paired.py``; the killed and the resumed call
share one count), so until the kill both take the same path, and a server killed in flight is
started again with the draw it had: the difference in starts is the kill's own, not two noisy
runs taking different paths. Each row also lists both runs' server starts in order (commit
numbers; ``*``: a start the journal has not marked done, the one in flight at the kill).
``--keep DIR`` keeps the histories, sessions and caches there.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


def run(spec: Path, session: Path, cache: Path, kill_after: float | None = None,
        paired: str | None = None) -> tuple[float, bool]:
    """One ``vllm-bisect run`` (killed after ``kill_after`` seconds if given): its wall
    time, and whether it was killed before it ended."""
    cmd = [*CLI, "run", "--spec", str(spec), "--session", str(session), "--cache-dir",
           str(cache)]
    env = dict(os.environ)
    if paired is not None:
        env["VLLM_SIM_PAIRED"] = paired
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, env=env)
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


def starts(session: Path, hist: Path) -> str:
    """The session's server starts in order: commit numbers, ``*`` on one not done."""
    shas = subprocess.run(["git", "rev-list", "--reverse", "main"], cwd=hist, check=True,
                          capture_output=True, text=True).stdout.split()
    with sqlite3.connect(session / "journal.sqlite") as con:
        rows = con.execute("SELECT commit_sha, done FROM starts ORDER BY seq").fetchall()
    return " ".join(f"{shas.index(sha) if sha in shas else '?'}{'' if done else '*'}"
                    for sha, done in rows)


def one(k: int, rnd: random.Random, root: Path, commits: int, paired: bool
        ) -> dict[str, object]:
    at = rnd.randrange(2, commits)
    hist = root / f"h{k}"
    subprocess.run([*CLI, "sim", "history", str(hist), "--commits", str(commits),
                    "--slow-at", str(at), "--slow-factor", "1.5", "--seed", str(k)],
                   check=True, capture_output=True)
    spec = root / f"spec{k}.toml"
    made = Path(f"{hist}-spec.toml").read_text()
    head, _, _ = made.partition("[verdict]")
    spec.write_text(head + '[verdict]\nsymptom = "itl"\nstrategy = "changepoint"\n')
    pair_a = f"{k}:{root / f'paired-a{k}'}" if paired else None
    pair_b = f"{k}:{root / f'paired-b{k}'}" if paired else None
    wall, _ = run(spec, root / f"plain{k}", root / f"cache-a{k}", paired=pair_a)
    culprit, n_starts = result(root / f"plain{k}")
    cut = rnd.uniform(0.5, wall)
    session = root / f"killed{k}"
    _, killed = run(spec, session, root / f"cache-b{k}", kill_after=cut, paired=pair_b)
    run(spec, session, root / f"cache-b{k}", paired=pair_b)
    again, resumed_starts = result(session)
    return {"run": k, "planted": at, "culprit": culprit, "resumed_culprit": again,
            "starts": n_starts, "resumed_starts": resumed_starts, "killed_at_s": round(cut, 1),
            "killed": killed, "wall_s": round(wall, 1),
            "order": starts(root / f"plain{k}", hist),
            "resumed_order": starts(session, hist)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--commits", type=int, default=30)
    ap.add_argument("--unpaired", action="store_true",
                    help="each bisect its own OS-seeded simulator noise")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep histories, sessions and caches in this (new) directory")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) if a.keep is None else a.keep
        root.mkdir(parents=True, exist_ok=True)
        for k in range(a.runs):
            row = one(k, rnd, root, a.commits, not a.unpaired)
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
