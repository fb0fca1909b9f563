"""Run a server as a process group: start, wait for /health, always tear down.

The server gets its own session (so SIGTERM reaches every process it spawned, vLLM's engine
core included) and, on Linux, a parent-death signal so it dies with us even on kill -9 of the
driver. Its pid is recorded by the caller in the journal so a later run can reap a group left
behind by anything that escaped both.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from vllm_bisect import interrupt, net
from vllm_bisect.errors import Cancelled, PortTaken, ServeError
from vllm_bisect.runtime.base import ServerHandle
from vllm_bisect.runtime.childenv import child_env
from vllm_bisect.runtime.gpulock import lock_dir
from vllm_bisect.runtime.ports import Ownership, PortCheck, check_port, free_port

__all__ = ["LaunchPlan", "free_port", "kill_group", "run_server", "startup_lock",
           "startup_lock_path", "tail", "wait_healthy"]

logger = logging.getLogger(__name__)

GRACE_S = 10.0
HEALTH_POLL_S = 5.0  # one /health request, all of it
PR_SET_PDEATHSIG = 1


def _child_setup() -> None:  # runs in the child between fork and exec
    os.setsid()
    # an ignored SIGINT survives exec: a run started with `cmd &` from a script would give
    # its servers a SIGINT they cannot receive
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class LaunchPlan:
    """How to start one server: argv (or a shell line), its env additions, cwd."""

    argv: Sequence[str] | None = None
    shell: str | None = None
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    pass_env: tuple[str, ...] = ()   # credentials the operator lets through (serve.pass_env)

    def describe(self) -> str:
        if self.shell is not None:
            return self.shell
        return " ".join(self.argv or ())


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def kill_group(pid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM the process group led by pid, then SIGKILL after the grace period."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    try:
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
    finally:  # also when the grace wait is interrupted (Ctrl-C, a Ray cancel sent again)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def wait_healthy(url: str, exit_code: Callable[[], int | None], timeout_s: float,
                 log_path: Path, interval_s: float = 0.1, what: str = "server",
                 cancel: threading.Event | None = None,
                 port_check: Callable[[], PortCheck] | None = None) -> float:
    """Poll GET /health until 200; raise ServeError when ``exit_code()`` reports an exit
    (a process's poll, a container's state) or on timeout, Cancelled when ``cancel`` is set.
    Each poll has a total deadline (a server dripping its headers cannot hold start-up past
    ``timeout_s``); the status decides, the body is never read.

    With ``port_check``, a 200 counts only when the port's listener is the server's own (see
    :mod:`vllm_bisect.runtime.ports`); a server that exits while another process holds its
    port raises PortTaken, which the launcher answers with another port."""
    started = time.monotonic()
    deadline = started + timeout_s
    other = ""  # who answered /health on the port instead of the server

    def foreign() -> str:
        """Who holds the port when it is not the server ("": the server, or cannot tell)."""
        check = port_check() if port_check is not None else None
        return check.holder if check is not None and check.ownership is Ownership.OTHER else ""

    with net.client(timeout=HEALTH_POLL_S) as client:
        while True:
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"{what} start-up cancelled")
            code = exit_code()
            if code is not None:
                if holder := foreign():
                    raise PortTaken(
                        f"{what} exited with code {code}: its port is held by {holder}",
                        hint="two servers were given the same free port; another port is tried",
                        log_tail=tail(log_path), log=log_path)
                raise ServeError(
                    f"{what} exited with code {code} before it was healthy",
                    hint=f"see the server log: {log_path}", log_tail=tail(log_path),
                    log=log_path)
            poll_s = max(0.1, min(HEALTH_POLL_S, deadline - time.monotonic()))
            try:
                with net.stream(client, "GET", f"{url}/health", deadline_s=poll_s) as (r, _):
                    if r.status_code == 200:
                        holder = foreign()
                        if not holder:
                            return time.monotonic() - started
                        if not other:
                            logger.warning("%s/health answered by %s, not the %s; waiting",
                                           url, holder, what)
                        other = holder
            except (httpx.HTTPError, net.NetLimitError):
                pass  # vLLM binds its port only once the engine is up
            if time.monotonic() > deadline:
                if other:
                    raise ServeError(
                        f"{what} not healthy after {timeout_s:.0f} s: its port answers from "
                        f"{other}, outside the server's process group",
                        hint="a command that starts its server in another process group "
                             "(docker run -p) is served as an image artifact or a --url; "
                             f"see the server log: {log_path}",
                        log_tail=tail(log_path), log=log_path)
                raise ServeError(
                    f"{what} not healthy after {timeout_s:.0f} s",
                    hint="raise ops.startup_timeout_s if loading is slow; "
                         f"see the server log: {log_path}",
                    log_tail=tail(log_path), log=log_path)
            time.sleep(min(interval_s * (1 + (time.monotonic() - started) / 5), 1.0))


def startup_lock_path(env: Mapping[str, str]) -> Path:
    """One lock per set of visible GPUs on this host, in the GPU locks' directory
    (``$VLLM_BISECT_LOCK_DIR``, else the temp dir: all sessions and users share it)."""
    devices = re.sub(r"[^0-9A-Za-z,-]", "_", env.get("CUDA_VISIBLE_DEVICES", "all")) or "none"
    return lock_dir() / f"vllm-bisect-startup-{devices}.lock"


def flock_wait(fh: object, cancel: threading.Event | None, what: str) -> None:
    """flock(LOCK_EX) on fh; with a cancel event, poll so that a cancelled waiter leaves."""
    if cancel is None:
        fcntl.flock(fh, fcntl.LOCK_EX)  # type: ignore[arg-type]
        return
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
            return
        except BlockingIOError:
            if cancel.wait(0.2):
                raise Cancelled(f"cancelled while waiting for {what}") from None


@contextlib.contextmanager
def startup_lock(path: Path | None, cancel: threading.Event | None = None) -> Iterator[None]:
    """Hold an exclusive lock while a server starts: vLLM sizes its KV cache from the GPU
    memory it sees free during start-up, so two servers profiling at once on one GPU both
    count each other ("Available KV cache memory: -1.14 GiB", seen on an H200)."""
    if path is None:
        yield
        return
    with open(path, "a") as fh:
        waited = time.monotonic()
        flock_wait(fh, cancel, "another server's start-up")
        if time.monotonic() - waited > 1.0:
            logger.info("waited %.1f s for another server's start-up (%s)",
                        time.monotonic() - waited, path)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _launch(plan: LaunchPlan, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        log.write(f"$ {plan.describe()}\n".encode())
        log.flush()
        argv = list(plan.argv or ()) if plan.shell is None else ["/bin/sh", "-c", plan.shell]
        try:
            return subprocess.Popen(argv, cwd=plan.cwd, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=_child_setup)
        except OSError as err:
            raise ServeError(f"cannot start server: {err}",
                             hint="check that the serve command exists") from None


def _teardown(proc: subprocess.Popen[bytes], on_stop: Callable[[int], None] | None) -> None:
    kill_group(proc.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)
    if on_stop is not None:
        on_stop(proc.pid)


def _port_check(url: str, session: int) -> Callable[[], PortCheck] | None:
    """Whose listener serves ``url``, for a server on this host started as session leader."""
    parsed = httpx.URL(url)
    if parsed.host not in ("127.0.0.1", "localhost", "::1") or parsed.port is None:
        return None
    port = parsed.port
    return lambda: check_port(port, session)


@contextlib.contextmanager
def run_server(plan: LaunchPlan, *, url: str, model: str, log_path: Path, timeout_s: float,
               on_start: Callable[[int], None] | None = None,
               on_stop: Callable[[int], None] | None = None,
               serialize_startup: bool = True,
               cancel: threading.Event | None = None,
               model_root: str | None = None) -> Iterator[ServerHandle]:
    """Start the server, yield a handle once healthy, and always tear the group down.

    With serialize_startup, start-ups on the same GPUs of this host happen one at a time:
    the lock is held from launch until healthy, then released for the probe."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = child_env(plan.env, pass_env=plan.pass_env)  # an allowlist: no credentials
    env.setdefault("PYTHONUNBUFFERED", "1")
    with startup_lock(startup_lock_path(env) if serialize_startup else None, cancel):
        proc = _launch(plan, env, log_path)
        try:
            if on_start is not None:
                on_start(proc.pid)
            interrupt.check()   # a Ctrl-C that landed in the fork's hooks was swallowed
            startup = wait_healthy(url, proc.poll, timeout_s, log_path, cancel=cancel,
                                   port_check=_port_check(url, proc.pid))
        except BaseException:
            _teardown(proc, on_stop)
            raise
    logger.info("server pid %d healthy after %.1f s", proc.pid, startup)
    try:
        yield ServerHandle(url=url, model=model, model_root=model_root, log_path=log_path,
                           pid=proc.pid, startup_s=startup, stop=lambda: kill_group(proc.pid, grace_s=2.0))
    finally:
        _teardown(proc, on_stop)
