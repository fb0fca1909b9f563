"""Git repositories whose git commands all have a deadline.

GitPython starts a ``git`` child process per command (``repo.git.rev_list(...)``,
``worktree add``...) and waits for it without a limit: a hook that hangs (``post-checkout``
runs on ``worktree add``), a lock held by another git, a network filesystem that stalls would
hang a bisect, or the ``git bisect run`` hook, for ever. :func:`open_repo` returns a
repository whose commands are killed after ``VLLM_BISECT_GIT_TIMEOUT_S`` seconds (default
600: a ``worktree add`` of vLLM takes seconds); a killed command raises GitPython's
``GitCommandError``, which the callers map to their errors (a checkout that cannot be made is
a skip). GitPython's long-lived ``cat-file --batch`` readers (the objects of commits, trees,
blobs), which it reuses across commands, get the same deadline per object read: at the
deadline the reader is killed (the next read starts a fresh one) and the read raises
``GitCommandError``.

GitPython's deadline is a ``threading.Timer`` that is not a daemon and that it cancels only
when the command returns: a Ctrl-C (or SIGTERM) during a git command left it waiting, and
the interpreter's exit joined it, so an interrupted run hung for the whole deadline before it
exited (seen in CI: an explain interrupted while it read the commit's source).
:class:`BoundedGit` cancels the watchdogs a call started when the call raises.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import git

DEFAULT_TIMEOUT_S = 600.0


def timeout_s() -> float:
    """The deadline of one git command (``VLLM_BISECT_GIT_TIMEOUT_S``, else 600 s)."""
    raw = os.environ.get("VLLM_BISECT_GIT_TIMEOUT_S", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if math.isfinite(value) and 0 < value <= 86400 else DEFAULT_TIMEOUT_S


T = TypeVar("T")

# the qualified name of the function GitPython's watchdog Timer runs (git/cmd.py)
WATCHDOG_QUALNAME = "Git.execute.<locals>.kill_process"


def _watchdogs() -> dict[int, threading.Timer]:
    return {id(t): t for t in threading.enumerate() if isinstance(t, threading.Timer)
            and getattr(getattr(t, "function", None), "__qualname__", "") == WATCHDOG_QUALNAME}


class BoundedGit(git.Git):
    """``git.Git`` whose commands are killed at :func:`timeout_s` unless a call sets its own."""

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("as_process"):
            return super().execute(*args, **kwargs)
        kwargs.setdefault("kill_after_timeout", timeout_s())
        before = _watchdogs()
        try:
            return super().execute(*args, **kwargs)
        except git.GitError:  # git's own failure: the wait ended, the watchdog was cancelled
            raise
        except BaseException:
            # an interrupted wait leaves GitPython's watchdog running (see the module's
            # docstring). A command another thread started meanwhile loses its deadline too:
            # only when this one raised out of its wait (an interrupt, which ends the process)
            for key, timer in _watchdogs().items():
                if key not in before:
                    timer.cancel()
            raise


    def get_object_header(self, ref: str | bytes) -> tuple[str, str, int]:
        return self._read_object("cat_file_header", lambda: super(BoundedGit, self)
                                 .get_object_header(ref))

    def stream_object_data(self, ref: str | bytes) -> Any:
        return self._read_object("cat_file_all", lambda: super(BoundedGit, self)
                                 .stream_object_data(ref))

    def _read_object(self, reader: str, read: Callable[[], T]) -> T:
        """``read`` from the persistent ``cat-file`` process GitPython keeps in attribute
        ``reader``, killing it at the deadline (a lock, a stalled filesystem)."""
        limit = timeout_s()
        fired = threading.Event()

        def kill() -> None:
            fired.set()
            proc = getattr(getattr(self, reader, None), "proc", None)
            if proc is not None:
                with contextlib.suppress(OSError):
                    proc.kill()

        timer = threading.Timer(limit, kill)
        timer.daemon = True
        timer.start()
        try:
            return read()
        except Exception:
            if not fired.is_set():
                raise
            raise git.GitCommandError(["git", "cat-file"], -9, (
                f"Timeout: git cat-file did not answer within {limit:g} secs")) from None
        finally:
            timer.cancel()
            if fired.is_set():  # killed, even if this read had just ended in time
                setattr(self, reader, None)


class BoundedRepo(git.Repo):
    GitCommandWrapperType = BoundedGit


def open_bounded(path: str | Path, search_parent_directories: bool = False) -> git.Repo:
    """A repository whose git commands have a deadline (GitPython's errors as they are)."""
    return BoundedRepo(path, search_parent_directories=search_parent_directories)
