"""Two servers handed the same free port: the loser must not measure the winner.

The CI run of 2026-12-05 failed this way: a probe reached another test's simulator on the port
its own server could not bind ("The model `m` does not exist")."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from vllm_bisect.errors import PortTaken
from vllm_bisect.runtime.base import Artifact
from vllm_bisect.runtime.launch import ProcessLauncher, ServerSpec
from vllm_bisect.runtime.ports import Ownership, check_port, free_port, listen_inodes
from vllm_bisect.runtime.process import LaunchPlan, run_server
from vllm_bisect.spec import ArtifactKind, ServeSpec

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


@contextmanager
def listening() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_listener_of_this_session_is_ours_and_of_no_other() -> None:
    with listening() as port:
        assert listen_inodes(port)
        assert check_port(port, os.getsid(0)).ownership is Ownership.OURS
        other = check_port(port, os.getsid(0) + 1_000_000)
        assert other.ownership is Ownership.OTHER and f"pid {os.getpid()}" in other.holder


def test_no_listener_or_no_proc_is_unknown(tmp_path: Path) -> None:
    assert check_port(free_port(), os.getsid(0)).ownership is Ownership.UNKNOWN
    with listening() as port:
        assert listen_inodes(port, tmp_path) is None
        assert check_port(port, os.getsid(0), tmp_path).ownership is Ownership.UNKNOWN


@contextmanager
def impostor(port: int, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Another program answering 200 on /health at ``port``, in a session of its own."""
    root = tmp_path / "impostor"
    root.mkdir()
    (root / "health").write_text("ok\n")
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind",
                             "127.0.0.1"], cwd=root, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            raise RuntimeError("the impostor did not come up")
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_server_that_cannot_bind_its_port_is_port_taken_not_healthy(tmp_path: Path) -> None:
    port = free_port()
    with impostor(port, tmp_path):
        plan = LaunchPlan(argv=[sys.executable, "-m", "vllm_bisect.sim", "serve", "--port",
                                str(port), "--model", "m"])
        # before the check, the impostor's 200 made this healthy and the probe measured it
        with pytest.raises(PortTaken, match=r"its port is held by pid \d+"), \
                run_server(plan, url=f"http://127.0.0.1:{port}", model="m",
                           log_path=tmp_path / "log", timeout_s=30, serialize_startup=False):
            pass


def test_the_launcher_starts_the_server_again_on_another_port(tmp_path: Path) -> None:
    """The first start finds its port taken (the template starts an impostor there, then
    fails, as a server that lost the race does); the launcher tries another port."""
    web = tmp_path / "web"
    web.mkdir()
    (web / "health").write_text("ok\n")
    marker, pidfile = tmp_path / "first", tmp_path / "impostor.pid"
    sim = f"{sys.executable} -m vllm_bisect.sim serve --port {{port}}"
    template = (
        f"if [ ! -e {marker} ]; then touch {marker}; "
        f"cd {web} && setsid {sys.executable} -m http.server {{port}} --bind 127.0.0.1 "
        f">/dev/null 2>&1 & echo $! > {pidfile}; sleep 3; exit 1; fi; exec {sim}")
    artifact = Artifact(commit="c" * 40, kind=ArtifactKind.COMMAND, identity="sim",
                        serve_template=template)
    spec = ServerSpec(ServeSpec(model="sim-model"), tmp_path / "log", timeout_s=60,
                      serialize_startup=False)
    try:
        with ProcessLauncher().serve(artifact, spec) as h:
            models = httpx.get(h.url + "/v1/models", timeout=5).json()
            assert [m["id"] for m in models["data"]] == ["sim-model"]
            assert check_port(int(h.url.rsplit(":", 1)[1]), h.pid or 0).ownership \
                is Ownership.OURS
    finally:
        if pidfile.exists():
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert marker.exists()  # the first start did meet the impostor
    assert "Application startup complete" in (tmp_path / "log").read_text()
