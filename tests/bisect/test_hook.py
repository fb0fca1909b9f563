"""`git bisect run vllm-bisect hook --spec S` on a real repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import history, make_spec, write_spec

HOOK = [sys.executable, "-m", "vllm_bisect.cli", "hook"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def test_git_bisect_run_finds_the_cap(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=14, cap_at=9, unbuildable=(5,))
    spec = write_spec(tmp_path / "spec.toml", make_spec(h))
    git(h.path, "bisect", "start", h.bad, h.good)
    hook = " ".join([*HOOK, "--spec", str(spec)])
    r = subprocess.run(["git", "bisect", "run", "sh", "-c", hook], cwd=h.path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{h.planted['length']} is the first bad commit" in r.stdout
    log = git(h.path, "bisect", "log")
    git(h.path, "bisect", "reset")
    if h.unbuildable[0][:7] in log:
        assert f"skip {h.unbuildable[0]}" in log.replace("# skip: ", "skip ")


def test_hook_exit_codes(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, cap_at=3, unbuildable=(2,))
    spec = write_spec(tmp_path / "spec.toml", make_spec(h))
    expect = {h.shas[1]: 0, h.shas[2]: 125, h.shas[4]: 1}
    for sha, code in expect.items():
        git(h.path, "checkout", "-q", sha)
        r = subprocess.run([*HOOK, "--spec", str(spec)], cwd=h.path, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == code, r.stderr


def test_git_bisect_run_with_fix_terms(tmp_path: Path) -> None:
    # range.search = "fix": exit 0 = has the problem (old term), 1 = fixed (new term)
    h = history(tmp_path, n_commits=8, cap_at=0, fixed_at=5)
    spec = write_spec(tmp_path / "spec.toml", make_spec(h, range={"search": "fix"}))
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
