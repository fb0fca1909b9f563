"""Local TCP ports: pick a free one, and tell whose process group listens on one.

``free_port`` asks the kernel for an unused port and closes it again, so two processes asking at
the same moment can be handed the same port: the first server to bind it wins and the other
cannot listen. Worse, the loser's health check then reaches the winner's ``/health``, and its
probe would measure another commit's server. So a server counts as healthy only when the
listening socket on its port belongs to its own process group (its session: the runtime starts
every server with ``setsid``). Linux tells through ``/proc/net/tcp{,6}`` (listening sockets and
their inodes) and ``/proc/PID/fd`` (which process holds which socket); elsewhere the answer is
``Ownership.UNKNOWN`` and the check is not made.

A command that starts its server outside its own process group (``docker run -p`` publishes the
port from ``docker-proxy``) reads as another process's listener; such a server is served as an
image artifact, or started by hand and given as a URL.
"""

from __future__ import annotations

import enum
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
PROC = Path("/proc")


def free_port() -> int:
    """A TCP port nothing listens on now (it may be taken before it is used: see above)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Ownership(enum.Enum):
    OURS = "ours"        # a process of the server's session listens on the port
    OTHER = "other"      # the port's listener belongs to no process of that session
    UNKNOWN = "unknown"  # no listener seen, or no /proc to look in


@dataclass(frozen=True)
class PortCheck:
    ownership: Ownership
    holder: str = ""  # "pid 123 (python3)" when another process's listener was found


def listen_inodes(port: int, proc: Path = PROC) -> set[int] | None:
    """Inodes of the TCP sockets listening on ``port`` (any address); None without /proc."""
    inodes: set[int] = set()
    seen = False
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            try:
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(int(fields[9]))
            except (IndexError, ValueError):
                continue
    return inodes if seen else None


def _pids(proc: Path) -> list[int]:
    try:
        return [int(e.name) for e in os.scandir(proc) if e.name.isdigit()]
    except OSError:
        return []


def _holds(pid: int, inodes: set[int], proc: Path) -> bool:
    fd_dir = proc / str(pid) / "fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # gone, or another user's
        return False
    for fd in fds:
        try:
            link = os.readlink(fd_dir / fd)
        except OSError:
            continue
        if link.startswith("socket:[") and link.endswith("]") and int(link[8:-1]) in inodes:
            return True
    return False


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _command(pid: int, proc: Path) -> str:
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def check_port(port: int, session: int, proc: Path = PROC) -> PortCheck:
    """Whose listener answers on ``port``: one of session ``session``'s processes, another
    process (named when it can be read), or unknown (nothing listens yet, or no /proc). The
    session's own processes are this user's, so an unreadable holder is another's."""
    inodes = listen_inodes(port, proc)
    if not inodes:
        return PortCheck(Ownership.UNKNOWN)
    # the common answer first: a process of the session holds it (a few processes' fds read,
    # not every process's on the machine: ~25 ms of CPU per check with 200 processes)
    if any(_holds(pid, inodes, proc) for pid in _pids(proc) if _session(pid) == session):
        return PortCheck(Ownership.OURS)
    return _check(port, lambda pid: _session(pid) == session, Ownership.OTHER, proc)


def check_port_in_container(port: int, container_id: str,
                            container_pids: Callable[[], set[int]] | None = None,
                            proc: Path = PROC) -> PortCheck:
    """The same for a host-network container: the listener must run in the container, which
    its cgroup path names (or, where cgroup paths are another namespace's, the daemon's list
    of the container's processes, ``container_pids``). A holder this user cannot read (a root
    container, run by a user in the docker group) is unknown, not another's."""
    listed: set[int] | None = None

    def in_container(pid: int) -> bool:
        nonlocal listed
        try:
            if container_id in (proc / str(pid) / "cgroup").read_text():
                return True
        except OSError:
            pass
        if container_pids is None:
            return False
        if listed is None:
            listed = container_pids()
        return pid in listed
    return _check(port, in_container, Ownership.UNKNOWN, proc)


def _check(port: int, ours: Callable[[int], bool], unreadable: Ownership,
           proc: Path) -> PortCheck:
    inodes = listen_inodes(port, proc)
    if not inodes:
        return PortCheck(Ownership.UNKNOWN)
    pids = _pids(proc)
    holders = [pid for pid in pids if _holds(pid, inodes, proc)]
    if any(ours(pid) for pid in holders):
        return PortCheck(Ownership.OURS)
    if holders:
        return PortCheck(Ownership.OTHER, f"pid {holders[0]} ({_command(holders[0], proc)})")
    if unreadable is Ownership.OTHER:
        return PortCheck(Ownership.OTHER, "a process this user cannot see")
    return PortCheck(unreadable)
