"""The test run's CPU lock (tests/cpu_share.py, issue 42): an exclusive_cpu test waits for
the running tests, keeps new ones from starting, and runs alone; the timing tests that failed
under load carry the marker."""

from __future__ import annotations

import ast
import fcntl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cpu_share import MARKER, lock_dir

ROOT = Path(__file__).parents[1]
HOLDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.cpu_share import cpu_share
run, exclusive, me, go = sys.argv[1], sys.argv[2] == "x", Path(sys.argv[3]), Path(sys.argv[4])
with cpu_share(exclusive, run):
    me.write_text("in")
    while not go.exists():
        time.sleep(0.01)
"""


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def gate_held(run: str) -> bool:
    with open(lock_dir(run) / "gate", "a") as gate:
        try:
            fcntl.flock(gate, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(gate, fcntl.LOCK_UN)
        return False


def test_an_exclusive_test_waits_for_the_running_ones_and_goes_first(tmp_path: Path) -> None:
    run = f"test-{tmp_path.name}-{time.time_ns()}"
    code = HOLDER.format(root=str(ROOT))
    procs = []

    def start(name: str, exclusive: bool) -> tuple[Path, Path]:
        me, go = tmp_path / f"{name}.in", tmp_path / f"{name}.go"
        procs.append(subprocess.Popen([sys.executable, "-c", code, run,
                                       "x" if exclusive else "s", str(me), str(go)]))
        return me, go

    try:
        a_in, a_go = start("a", False)        # a running test
        wait_for(a_in.exists, "a to start")
        b_in, b_go = start("b", True)         # the exclusive one: waits for a
        wait_for(lambda: gate_held(run), "b to take the gate")
        c_in, c_go = start("c", False)        # a test that starts later: waits for b
        assert not b_in.exists()              # a still runs: b waits
        a_go.touch()
        wait_for(b_in.exists, "b to run once a finished")
        assert not c_in.exists()              # b runs alone
        b_go.touch()
        wait_for(c_in.exists, "c to run after b")
        c_go.touch()
        for p in procs:
            assert p.wait(timeout=60) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.parametrize(("path", "name"), [
    ("tests/probes/test_peer_concurrent.py", "test_peer_concurrent_stage_on_a_drifting_simulator"),
    ("tests/probes/test_peer_interleaved.py", "test_peer_interleaved_stage_on_the_simulator")])
def test_the_timing_tests_are_marked(path: str, name: str) -> None:
    tree = ast.parse((ROOT / path).read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    assert any(isinstance(d, ast.Attribute) and d.attr == MARKER for d in fn.decorator_list)
    assert MARKER in (ROOT / "pyproject.toml").read_text()
