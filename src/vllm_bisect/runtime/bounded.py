"""A child process with a deadline that holds: :func:`run_bounded`.

``subprocess.run(timeout=...)`` kills the child at the deadline, then waits for its pipes to
close; a grandchild that inherited them (a ``.pth`` file that starts a process, a build
step's daemon) keeps them open and the caller waits on. Here the child leads its own process
group and the whole group is killed at the deadline (and on Ctrl-C), so the call returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# the installed-version check, interpreter queries: Python starts in well under a second
PROBE_S = 120.0


def _kill(proc: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5.0)   # (the group is gone: its pipes close)


def run_bounded(argv: Sequence[str], timeout_s: float, *, input: bytes | None = None,
                cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
                stdout: int | IO[Any] | None = subprocess.PIPE,
                stderr: int | IO[Any] | None = subprocess.PIPE
                ) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` to its end within ``timeout_s`` seconds; at the deadline its whole
    process group is killed and :class:`subprocess.TimeoutExpired` raised. stdin is
    /dev/null unless ``input`` is given."""
    proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env) if env is not None else None,
                            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        out, err = proc.communicate(input, timeout=timeout_s)
    except BaseException:  # the deadline, Ctrl-C: never leave the group running
        _kill(proc)
        raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
