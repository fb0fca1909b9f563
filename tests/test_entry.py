"""The console script's guard (issue 41): a CLI that cannot be imported exits 128 for the
hook under a real `git bisect run` (which then stops), not 1 (which git reads as "bad")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bisect.test_hook_guard import assert_aborted, bisect_run
from tests.bisect.test_hook_parity import sim_serve, spec_for
from tests.helpers import history, write_spec

ENTRY = [sys.executable, "-m", "vllm_bisect.cli.entry"]
MODULE = [sys.executable, "-m", "vllm_bisect.cli"]   # what the tests and docs run


def broken_dependency(tmp: Path) -> str:
    """A PYTHONPATH whose ``typer`` fails at import, as a half-upgraded environment's can."""
    fake = tmp / "broken"
    (fake / "typer").mkdir(parents=True)
    (fake / "typer" / "__init__.py").write_text("raise ImportError('typer is half-installed')\n")
    return os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])


@pytest.mark.parametrize("entry", [ENTRY, MODULE], ids=["console-script", "python-m-cli"])
def test_a_cli_that_cannot_be_imported_stops_git_bisect_run(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            entry: list[str]) -> None:
    h = history(tmp_path, n_commits=4)
    spec = write_spec(tmp_path / "s.toml", spec_for(h, sim_serve()))
    monkeypatch.setenv("PYTHONPATH", broken_dependency(tmp_path))
    r, judged = bisect_run(h, [*entry, "hook", "--spec", str(spec)])
    assert_aborted(r, judged, "cannot start: ImportError: typer is half-installed")


def test_other_commands_exit_1_with_the_cause(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": broken_dependency(tmp_path)}
    r = subprocess.run([*ENTRY, "version"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1, r.stderr
    assert "cannot start: ImportError" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("entry", [ENTRY, MODULE], ids=["console-script", "python-m-cli"])
def test_the_entry_runs_the_cli(entry: list[str]) -> None:
    r = subprocess.run([*entry, "version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
