"""A session pins its range (issue 49, item 4): ``range.bad = "main"`` resolved once, when
the session starts. Through ``vllm-bisect run`` subprocesses over a real history whose main
is force-rewritten between a run and its resume: the resume bisects the pinned commits and
says where main points now; once the old commits are pruned, it refuses (exit 2), never
searching the new range under the session's name."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.bisect.test_hook_parity import git
from tests.helpers import history, make_spec, write_spec
from vllm_bisect.sim.history import History

CLI = [sys.executable, "-m", "vllm_bisect.cli"]


def run(spec: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "run", "--spec", str(spec), "--session", str(tmp / "s"),
                           "--cache-dir", str(tmp / "cache"), "--json"],
                          capture_output=True, text=True, timeout=600)


def rewrite_main(h: History) -> str:
    """main reset to commit 2 and commit 3 cherry-picked onto it (a new sha with the same
    cap): the range main..good as it is now ends in a commit outside the session's range."""
    git(h.path, "checkout", "-q", "-B", "main", h.shas[2])
    git(h.path, "-c", "user.name=x", "-c", "user.email=x@x", "cherry-pick", h.shas[3])
    return git(h.path, "rev-parse", "HEAD").strip()


def setup(tmp: Path) -> tuple[History, Path]:
    h = history(tmp, n_commits=6, cap_at=3)
    git(h.path, "checkout", "-q", "-B", "main", h.bad)
    spec = make_spec(h, range={"good": h.good, "bad": "main"},
                     verdict={"verify_samples": 0})
    return h, write_spec(tmp / "spec.toml", spec)


def test_a_resume_bisects_the_pinned_range_and_says_main_moved(tmp_path: Path) -> None:
    h, spec = setup(tmp_path)
    first = run(spec, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(first.stdout)["first_bad"] == h.planted["length"]
    new = rewrite_main(h)
    again = run(spec, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["first_bad"] == h.planted["length"]  # not `new`
    flat = " ".join(again.stderr.split())
    assert f"range.bad = 'main' now points to {new[:12]}" in flat, again.stderr[-3000:]
    assert f"keeps the commit it pinned when it started, {h.bad[:12]}" in flat


def test_a_resume_after_the_pinned_commits_are_pruned_is_refused(tmp_path: Path) -> None:
    h, spec = setup(tmp_path)
    first = run(spec, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    rewrite_main(h)
    shutil.rmtree(tmp_path / "cache" / "worktrees")  # (the source builds' checkouts)
    git(h.path, "worktree", "prune")
    git(h.path, "reflog", "expire", "--expire=now", "--all")
    git(h.path, "gc", "-q", "--prune=now")
    again = run(spec, tmp_path)
    assert again.returncode == 2, again.stdout + again.stderr[-3000:]
    flat = " ".join(again.stderr.split())
    assert f"this session's bad commit {h.bad[:12]} (range.bad = 'main'" in flat, flat
    assert "Traceback" not in again.stderr and again.stdout == ""
