"""Per-GPU locks between processes: the second session waits and names the holder."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from vllm_bisect.errors import Cancelled
from vllm_bisect.runtime.gpulock import describe_holder, gpu_locks, holder

HOLD = textwrap.dedent("""
    import sys, time
    from vllm_bisect.runtime.gpulock import gpu_locks
    with gpu_locks([int(g) for g in sys.argv[1].split(",")], session="sess-A", commit="a" * 40):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def hold(gpus: str, seconds: float) -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLD, gpus, str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_second_session_waits_and_names_the_holder(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BISECT_LOCK_DIR", str(tmp_path))
    p = hold("1,2", 2.0)
    assert holder(2) is not None and holder(2)["session"] == "sess-A"  # type: ignore[index]
    said: list[str] = []
    t0 = time.monotonic()
    with gpu_locks([0, 2], session="sess-B", on_wait=said.append):
        waited = time.monotonic() - t0
        assert holder(2)["session"] == "sess-B"  # type: ignore[index]
    p.wait()
    assert waited > 1.0
    assert said == [f"GPU 2 is held by session sess-A (pid {p.pid}, testing aaaaaaaaaaaa); "
                    "waiting for it"]
    assert holder(2) is None  # released: nobody named


def test_a_killed_holder_releases_its_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BISECT_LOCK_DIR", str(tmp_path))
    p = hold("3", 60.0)
    p.kill()  # kill -9: the kernel drops the flock
    p.wait()
    t0 = time.monotonic()
    with gpu_locks([3], session="sess-B"):
        assert time.monotonic() - t0 < 1.0


def test_a_cancelled_waiter_leaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_BISECT_LOCK_DIR", str(tmp_path))
    p = hold("4", 30.0)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(Cancelled), gpu_locks([4], session="sess-B", cancel=cancel):
        pass
    assert "sess-A" in describe_holder(4)
    p.kill()
    p.wait()
