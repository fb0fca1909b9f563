"""`git bisect run vllm-bisect hook` and `vllm-bisect run` name the same first bad commit on
the same real history (threshold, sequential, crash): one verdict policy for both."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.events import NullEvents
from vllm_bisect.run_bisect import run_bisect
from vllm_bisect.sim.history import History, sim_path
from vllm_bisect.spec import BisectSpec

HOOK = [sys.executable, "-m", "vllm_bisect.cli", "hook"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def sim_serve(before: str = "") -> str:
    """The commit's simulated vLLM with MTP (the planted cap shows with speculative
    decoding), served straight from its checkout (no venv build)."""
    return (f"{before}PYTHONPATH=. VLLM_BISECT_SIM_PATH={sim_path()} exec {sys.executable} "
            "-m vllm.entrypoints.cli.main serve {model} --port {port} "
            """--speculative-config '{{"method": "mtp", "num_speculative_tokens": 3}}'""")


# the history's unbuildable commits (their build backend requires a newer CMake) fail this
SETUP = "! grep -q CMake _build/backend.py"  # setup step


def spec_for(h: History, command: str, **over: dict[str, Any]) -> BisectSpec:
    """A command build serving with ``command``; culprit verification off (these tests compare
    first bad commits)."""
    sections: dict[str, dict[str, Any]] = {
        "build": {"kind": "command", "serve": command, "setup": SETUP},
        "verdict": {"verify_samples": 0}}
    for name, values in over.items():
        sections[name] = {**sections.get(name, {}), **values}
    return make_spec(h, **sections)


def git_bisect_run(h: History, spec: BisectSpec,
                   tmp: Path) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run `git bisect run vllm-bisect hook` for real over the history; what it printed and
    git's bisect log."""
    path = write_spec(tmp / "hook-spec.toml", spec)
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        r = subprocess.run(["git", "bisect", "run", *HOOK, "--spec", str(path), "--cache-dir",
                            str(tmp / "hook-cache")],
                           cwd=h.path, capture_output=True, text=True, timeout=600)
    finally:
        log = git(h.path, "bisect", "log")
        git(h.path, "bisect", "reset")
    return r, log


def hook_first_bad(h: History, spec: BisectSpec, tmp: Path) -> tuple[str, str]:
    """The hook's first bad commit under `git bisect run`, and the log."""
    r, log = git_bisect_run(h, spec, tmp)
    m = re.search(r"([0-9a-f]{40}) is the first bad commit", r.stdout)
    assert m, r.stdout[-3000:] + r.stderr[-3000:]
    return m.group(1), log


def run_first_bad(spec: BisectSpec, tmp: Path) -> str | None:
    return run_bisect(spec, tmp / "session", tmp / "run-cache", NullEvents()).first_bad


def test_threshold_relative_to_the_good_endpoint(tmp_path: Path) -> None:
    # commit 5 (both searches' first midpoint) does not build; the culprit is 8
    h = history(tmp_path, n_commits=10, slow_at=8, slow_factor=3.0, step_ms=5.0,
                unbuildable=(5,))
    spec = spec_for(h, sim_serve(), verdict={"symptom": "itl", "itl_factor": 2.0})
    hook, log = hook_first_bad(h, spec, tmp_path)
    assert hook == run_first_bad(spec, tmp_path) == h.planted["itl"]
    skipped = re.findall(r"# skip: \[([0-9a-f]{40})\]", log)  # an unbuildable commit: exit 125
    assert skipped == list(h.unbuildable)


def test_sequential_calibrates_on_git_bisects_refs(tmp_path: Path) -> None:
    # per-request pace noise CV 5%; the culprit makes engine steps 1.5x slower; no threshold
    # in the spec: only a calibrated policy can tell (the old hook judged all good)
    h = history(tmp_path, n_commits=8, slow_at=3, slow_factor=1.5, step_ms=5.0, noise_cv=0.05)
    spec = spec_for(h, sim_serve(),
                    verdict={"symptom": "itl", "strategy": "sequential", "alpha": 0.001,
                             "calibration_samples": 6},
                    # (the pace noise is per request: 60 tokens tell what 120 did, in half the
                    # time)
                    probe={"max_tokens": 60, "requests": 2, "warmup": 0})
    hook, _ = hook_first_bad(h, spec, tmp_path)
    assert hook == run_first_bad(spec, tmp_path) == h.planted["itl"]
    # one journal for the whole bisect; the endpoints were measured by the first hook call
    # (calibration, before its HEAD), then reused from the cache by every later call
    (journal,) = (h.path / ".git" / "vllm-bisect-hook").glob("*/journal.sqlite")
    with sqlite3.connect(journal) as con:
        started = [c for (c,) in con.execute("SELECT commit_sha FROM servers ORDER BY started")]
    heads = [i for i, c in enumerate(started) if c not in (h.good, h.bad)]
    assert len(heads) >= 2 and {h.good, h.bad} <= set(started[:heads[0]])
    assert not {h.good, h.bad} & set(started[heads[0]:])


def test_a_server_that_dies_is_bad_under_the_crash_symptom(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=8)
    crashing = tmp_path / "crashing"
    crashing.write_text("\n".join(h.shas[4:]) + "\n")  # from commit 4 on the server dies
    die = (f"if grep -q {{commit}} {crashing}; then "
           "echo 'RuntimeError: CUDA error: an illegal memory access' >&2; exit 3; fi; ")
    # (threshold written: auto would choose bayes for a crash, which the hook refuses)
    spec = spec_for(h, sim_serve(die), verdict={"symptom": "crash", "strategy": "threshold"})
    hook, log = hook_first_bad(h, spec, tmp_path)
    assert hook == run_first_bad(spec, tmp_path) == h.shas[4]
    assert "skip" not in log.replace("# skip", "")  # a crash is bad, not a skip


def test_bayes_is_refused_at_once(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2)
    spec = write_spec(tmp_path / "spec.toml", spec_for(
        h, sim_serve(), verdict={"symptom": "crash", "strategy": "bayes"}))
    r = subprocess.run([*HOOK, "--spec", str(spec)], cwd=h.path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 128
    assert "bayes" in r.stderr and "Traceback" not in r.stderr
    assert not (h.path / ".git" / "vllm-bisect-hook").exists()  # refused before any work


def test_auto_resolving_to_bayes_is_refused_and_says_so(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve(),
                                                       verdict={"symptom": "crash"}))
    r = subprocess.run([*HOOK, "--spec", str(spec)], cwd=h.path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 128
    assert "'auto' (resolved to 'bayes'" in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr
    assert not (h.path / ".git" / "vllm-bisect-hook").exists()


def test_default_spec_under_server_level_noise(tmp_path: Path) -> None:
    # what a user writes: the symptom and the smallest change that matters, no strategy.
    # Every server start has its own speed level (server CV 5%) on top of request noise:
    # auto resolves to the model of the range under `run` and under the hook (rebuilt from
    # the hook's journal on each call), which must agree.
    h = history(tmp_path, n_commits=8, slow_at=5, slow_factor=2.0, step_ms=4.0,
                noise_cv=0.05, server_cv=0.05)
    spec = spec_for(h, sim_serve(), verdict={"symptom": "itl", "itl_factor": 1.3},
                    probe={"max_tokens": 48, "warmup": 0})
    assert spec.verdict.strategy == "auto"
    r, log = git_bisect_run(h, spec, tmp_path)
    m = re.search(r"([0-9a-f]{40}) is the first bad commit", r.stdout)
    assert m, r.stdout[-3000:] + r.stderr[-3000:]
    assert "model of the range: P(new side)" in r.stderr, r.stderr[-3000:]
    ran = run_bisect(spec, tmp_path / "session", tmp_path / "run-cache", NullEvents())
    assert ran.strategy_chosen == "changepoint"
    assert m.group(1) == ran.first_bad == h.planted["itl"]
    assert "# skip" not in log
    # the hook measured git's two ends (on its first call, as `run` measures its ends first)
    (journal,) = (h.path / ".git" / "vllm-bisect-hook").glob("*/journal.sqlite")
    with sqlite3.connect(journal) as con:
        started = [c for (c,) in con.execute("SELECT commit_sha FROM servers")]
    assert started.count(h.good) >= 1 and started.count(h.bad) >= 1


def test_auto_on_a_cap_that_shows_in_some_runs_only_is_refused_as_run_would_go_bayes(
        tmp_path: Path) -> None:
    from tests.bisect.test_auto_driver import seeded_serve

    # `run` with this spec switches to bayes (tests/bisect/test_auto_driver.py); the hook runs
    # the same endpoint check on its first call and refuses, naming what it saw
    h = history(tmp_path, n_commits=4, cap_at=3, cap_probability=0.5)
    spec = spec_for(h, seeded_serve(tmp_path), verdict={"symptom": "length",
                                                        "intermittent_runs": 8})
    assert spec.verdict.strategy == "auto"
    r, _ = git_bisect_run(h, spec, tmp_path)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode != 0 and "is the first bad commit" not in out
    assert "some runs only" in out and "vllm-bisect run" in out and "Traceback" not in out
    (mark,) = (h.path / ".git" / "vllm-bisect-hook").glob("*/intermittence.txt")
    assert "bayes" in mark.read_text()
