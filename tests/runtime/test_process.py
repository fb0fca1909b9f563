"""The process runtime: health wait, early exit, hang, and teardown of the whole group."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from vllm_bisect.errors import ServeError
from vllm_bisect.runtime.process import LaunchPlan, free_port, run_server


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_starts_waits_and_kills_the_group(tmp_path: Path) -> None:
    port = free_port()
    pidfile = tmp_path / "grandchild.pid"
    # a shell that starts the server as a grandchild, like `setup && vllm serve`
    line = (f"sleep 1000 & echo $! > {pidfile}; exec {sys.executable} -m vllm_bisect.sim serve "
            f"--port {port} --startup-delay 0.5")
    with run_server(LaunchPlan(shell=line), url=f"http://127.0.0.1:{port}", model="sim-model",
                    log_path=tmp_path / "log", timeout_s=20) as h:
        assert h.startup_s is not None and h.startup_s >= 0.5
        grandchild = int(pidfile.read_text())
        server_pid = h.pid
        assert server_pid is not None and alive(grandchild)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(grandchild):
        time.sleep(0.05)
    assert not alive(grandchild) and not alive(server_pid)
    assert "Application startup complete" in (tmp_path / "log").read_text()


def test_early_exit_is_a_serve_error_with_log_tail(tmp_path: Path) -> None:
    line = "echo 'RuntimeError: CUDA error: no kernel image is available'; exit 3"
    with pytest.raises(ServeError, match="exited with code 3") as e, \
            run_server(LaunchPlan(shell=line), url=f"http://127.0.0.1:{free_port()}",
                       model="m", log_path=tmp_path / "log", timeout_s=10):
        pass
    assert "no kernel image" in e.value.log_tail


def test_hang_times_out(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="not healthy after"), \
            run_server(LaunchPlan(argv=["sleep", "30"]), url=f"http://127.0.0.1:{free_port()}",
                       model="m", log_path=tmp_path / "log", timeout_s=1.0):
        pass


def test_missing_program(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="cannot start server"), \
            run_server(LaunchPlan(argv=["/nonexistent/vllm"]), url="http://127.0.0.1:9",
                       model="m", log_path=tmp_path / "log", timeout_s=1.0):
        pass


def test_startups_on_one_gpu_do_not_overlap(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> float:
        port = free_port()
        plan = LaunchPlan(argv=[sys.executable, "-m", "vllm_bisect.sim", "serve", "--port",
                                str(port), "--startup-delay", "0.6"],
                          env={"CUDA_VISIBLE_DEVICES": f"test-{os.getpid()}"})
        with run_server(plan, url=f"http://127.0.0.1:{port}", model="m",
                        log_path=tmp_path / f"{i}.log", timeout_s=30) as h:
            assert h.startup_s is not None and h.startup_s >= 0.6
            healthy = time.monotonic()
            time.sleep(0.3)  # probing overlaps freely
        return healthy

    with ThreadPoolExecutor(3) as pool:
        healthy = sorted(pool.map(one, range(3)))
    # each start-up takes >= 0.6 s and they run one after another
    assert healthy[1] - healthy[0] >= 0.55 and healthy[2] - healthy[1] >= 0.55
