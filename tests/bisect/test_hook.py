"""`vllm-bisect hook` on a real repository: exit codes, a bad spec (`git bisect run` itself,
against `vllm-bisect run`: test_hook_parity.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.bisect.test_hook_parity import HOOK, git, sim_serve, spec_for
from tests.helpers import history, write_spec


def test_hook_exit_codes(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, cap_at=3, unbuildable=(2,))
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    expect = {h.shas[1]: 0, h.shas[2]: 125, h.shas[4]: 1}
    for sha, code in expect.items():
        git(h.path, "checkout", "-q", sha)
        r = subprocess.run([*HOOK, "--spec", str(spec)], cwd=h.path, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == code, r.stderr


def test_git_bisect_run_with_fix_terms(tmp_path: Path) -> None:
    # range.search = "fix": exit 0 = has the problem (old term), 1 = fixed (new term)
    h = history(tmp_path, n_commits=8, cap_at=0, fixed_at=5)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve(), range={"search": "fix"}))
    git(h.path, "bisect", "start", "--term-old=broken", "--term-new=fixed", h.bad, h.good)
    hook = " ".join([*HOOK, "--spec", str(spec)])
    r = subprocess.run(["git", "bisect", "run", "sh", "-c", hook], cwd=h.path,
                       capture_output=True, text=True, timeout=300)
    git(h.path, "bisect", "reset")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{h.planted['fix']} is the first fixed commit" in r.stdout


def test_hook_invalid_spec_aborts(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=2)
    bad = tmp_path / "bad.toml"
    bad.write_text("[probe]\nmax_tokens = 'many'\n")
    r = subprocess.run([*HOOK, "--spec", str(bad)], cwd=h.path, capture_output=True, text=True)
    assert r.returncode == 128
    assert "probe.max_tokens" in r.stderr and "Traceback" not in r.stderr


def test_a_first_hook_call_says_each_commit_and_server_it_starts(tmp_path: Path) -> None:
    """issue 50: a first call (the endpoint check beside HEAD) ran 24.7 s and 10 server
    starts with one line. Each commit it tests and each server it starts is a line now."""
    import sqlite3

    h = history(tmp_path, n_commits=8, cap_at=5)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve(), verdict={
        "symptom": "length", "intermittent_runs": 3}))
    git(h.path, "bisect", "start", h.bad, h.good)   # checks out the midpoint
    r = subprocess.run([*HOOK, "--spec", str(spec)], cwd=h.path, capture_output=True,
                       text=True, timeout=300)
    git(h.path, "bisect", "reset")
    assert r.returncode in (0, 1), r.stderr
    (journal,) = (h.path / ".git" / "vllm-bisect-hook").glob("*/journal.sqlite")
    con = sqlite3.connect(journal)
    started = con.execute("SELECT COUNT(*) FROM starts WHERE done = 1").fetchone()[0]
    con.close()
    assert started >= 2   # the bad endpoint, and HEAD
    assert r.stderr.count("starting server") == started, r.stderr
    assert "bad endpoint" in r.stderr and " bisect " in r.stderr, r.stderr
