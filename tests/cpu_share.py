"""Tests that need the CPU to themselves (``@pytest.mark.exclusive_cpu``).

A few tests judge the measuring instrument itself: two clients timing one simulated server
at once (the concurrent peer check) must agree within a few percent, and a client that waits
~35 ms for a core (four pytest-xdist workers' simulators on two cores) moves a 0.2 s
request's per-token ITL by 17% (issue 42: 0.177 against 0.08, under load only). Such a test
runs alone within its test run: every test holds a shared lock while it runs (set-up,
call and tear-down, so a module's fixtures count), an ``exclusive_cpu`` test the exclusive
one. A gate lock gives the exclusive test priority: while it waits, no new test starts, the
running ones finish, then it runs, then the others go on. Other programs on the machine are
not paused (docs: an external CPU hog can still slow it).

The lock directory is per test run (pytest-xdist's ``PYTEST_XDIST_TESTRUNUID``); without
xdist the tests run one at a time anyway and nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = "exclusive_cpu"


def lock_dir(run: str) -> Path:
    d = Path(tempfile.gettempdir()) / f"vllm-bisect-cpu-share-{run}"
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def cpu_share(exclusive: bool, run: str | None = None) -> Iterator[None]:
    """Hold this test run's CPU lock: shared, or ``exclusive`` (alone)."""
    run = run if run is not None else os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield
        return
    d = lock_dir(run)
    with open(d / "gate", "a") as gate, open(d / "rw", "a") as rw:
        if exclusive:
            fcntl.flock(gate, fcntl.LOCK_EX)   # no new test starts from here on ...
            fcntl.flock(rw, fcntl.LOCK_EX)     # ... and the running ones finish
            try:
                yield
            finally:
                fcntl.flock(rw, fcntl.LOCK_UN)
                fcntl.flock(gate, fcntl.LOCK_UN)
            return
        fcntl.flock(gate, fcntl.LOCK_SH)       # waits while an exclusive test waits or runs
        fcntl.flock(gate, fcntl.LOCK_UN)
        fcntl.flock(rw, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(rw, fcntl.LOCK_UN)
