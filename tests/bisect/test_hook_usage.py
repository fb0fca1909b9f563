"""A usage mistake in `git bisect run vllm-bisect hook ...` aborts the bisect: click's exit 2
would read as "bad" to git, which would then name a wrong first bad commit with exit 0."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.bisect.test_hook_parity import HOOK, git, sim_serve, spec_for
from tests.helpers import history, write_spec


@pytest.mark.parametrize("args", [
    ["--spce", "{spec}"],                    # a typo in the option
    [],                                      # no --spec at all
    ["--spec", "{spec}", "--verbos"],        # a typo in a flag
    ["--spec"],                              # an option without its value
    ["--spec", "{spec}", "extra-arg"],       # a stray argument
])
def test_a_usage_error_aborts_git_bisect_run(tmp_path: Path, args: list[str]) -> None:
    h = history(tmp_path, n_commits=4)
    spec = write_spec(tmp_path / "spec.toml", spec_for(h, sim_serve()))
    argv = [a.format(spec=spec) for a in args]
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        r = subprocess.run(["git", "bisect", "run", *HOOK, *argv], cwd=h.path,
                           capture_output=True, text=True, timeout=120)
        log = git(h.path, "bisect", "log")
    finally:
        git(h.path, "bisect", "reset")
    assert r.returncode != 0, r.stdout + r.stderr
    assert "is the first bad commit" not in r.stdout
    assert "# bad:" not in log.split("git bisect start")[-1].split("\n", 2)[-1]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["--spce", "x.toml"], [], ["--spec", "x.toml", "--verbos"]])
def test_hook_usage_errors_exit_128(tmp_path: Path, args: list[str]) -> None:
    r = subprocess.run([*HOOK, *args], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 128, r.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_under_git_bisect_run_stops_the_bisect(tmp_path: Path, flag: str) -> None:
    """Help is not a verdict: exit 0 would mark every commit good under `git bisect run`."""
    h = history(tmp_path, n_commits=4)
    git(h.path, "bisect", "start", h.bad, h.good)
    try:
        r = subprocess.run(["git", "bisect", "run", *HOOK, flag], cwd=h.path,
                           capture_output=True, text=True, timeout=120)
        log = git(h.path, "bisect", "log")
    finally:
        git(h.path, "bisect", "reset")
    assert r.returncode != 0 and "exit code 128" in r.stderr, r.stdout + r.stderr
    assert "cli hook [OPTIONS]" in " ".join(r.stdout.split())   # the help is printed
    assert "help only, no verdict" in r.stderr
    judged = log.split("git bisect start")[-1].split("\n", 2)[-1]
    assert "# good:" not in judged and "# bad:" not in judged, log


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_outside_a_bisect_exits_0(tmp_path: Path, flag: str) -> None:
    h = history(tmp_path, n_commits=1)
    r = subprocess.run([*HOOK, flag], cwd=h.path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "cli hook [OPTIONS]" in " ".join(r.stdout.split())
    assert "--spec" in r.stdout


def test_a_relative_cache_dir_is_where_git_bisect_run_was_started(tmp_path: Path) -> None:
    # (a relative --cache-dir failed every commit's build, "No such file" under venvs/: the
    # build ran its tools from another directory; each commit was skipped)
    from tests.bisect.test_hook_guard import bisect_run
    from tests.helpers import make_spec

    h = history(tmp_path, n_commits=6, cap_at=3)
    spec = write_spec(tmp_path / "s.toml", make_spec(h))
    r, judged = bisect_run(h, [*HOOK, "--spec", str(spec), "--cache-dir", "../rel-cache"])
    assert f"{h.planted['length']} is the first bad commit" in r.stdout, r.stdout + r.stderr
    assert "# skip" not in judged, judged
    assert (h.path.parent / "rel-cache").is_dir()
