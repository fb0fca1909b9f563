"""One Ctrl-C ends a `vllm-bisect run` within seconds even while a prefetch is stalled on a
wheel index that drips (2 GiB declared, a byte every 2 s): "interrupted; nothing recorded is
lost", exit 130, no traceback, no second Ctrl-C. A real run (subprocess) against a real local
index laid out like wheels.vllm.ai; SIGINT as a terminal sends it."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.helpers import history, make_spec, write_spec
from vllm_bisect.bisect.range import open_repo
from vllm_bisect.builders.checkout import Checkouts
from vllm_bisect.sim.wheel_index import build_wheel, publish

CLI = [sys.executable, "-m", "vllm_bisect.cli"]
X86 = "cp38-abi3-manylinux_2_28_x86_64"


class Stalling(SimpleHTTPRequestHandler):
    """Serves a directory; a wheel under one of ``stall`` (commit folders) drips forever."""

    stall: tuple[str, ...] = ()
    stalled = threading.Event()
    stop = threading.Event()

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if not (self.path.endswith(".whl") and self.path.lstrip("/").startswith(self.stall)):
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(2 << 30))
        self.end_headers()
        self.stalled.set()
        try:
            while not self.stop.is_set():
                self.wfile.write(b"0")
                self.wfile.flush()
                self.stop.wait(2.0)
        except (BrokenPipeError, ConnectionResetError):
            pass


def test_one_ctrl_c_ends_a_run_with_a_stalled_prefetch(tmp_path: Path) -> None:
    h = history(tmp_path, n_commits=6, cap_at=3)
    co = Checkouts(open_repo(h.path), tmp_path / "build-cache")
    root = tmp_path / "index"
    for i, sha in enumerate(h.shas):
        publish(root, sha, {"default": [build_wheel(co.get(sha), tmp_path / "w" / str(i), X86)]})
    handler: type[Stalling] = type("H", (Stalling,), {"stall": tuple(h.shas[1:-1]),
                                      "stalled": threading.Event(), "stop": threading.Event()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    spec = make_spec(h, build={"kind": "wheel", "index_url": url, "variant": "default"},
                     ops={"prefetch": True}, probe={"max_tokens": 160, "requests": 3})
    path = write_spec(tmp_path / "spec.toml", spec)
    proc = subprocess.Popen([*CLI, "run", "--spec", str(path), "--session",
                             str(tmp_path / "session"), "--cache-dir", str(tmp_path / "cache")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1",
                                 "PYTHONFAULTHANDLER": "1"})
    try:
        assert handler.stalled.wait(300), "no interior wheel was ever asked for"
        time.sleep(1.0)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)  # once
        try:
            _out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say where it hangs: every thread's stack
            proc.send_signal(signal.SIGABRT)
            _out, err = proc.communicate(timeout=60)
            raise AssertionError(f"still running 60 s after one Ctrl-C:\n{err[-8000:]}") from None
    finally:
        proc.kill()
        handler.stop.set()
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted; nothing recorded is lost" in err
    assert "Traceback" not in err


def test_a_measurement_waiting_on_a_stalled_prefetch_leaves_when_cancelled(
        tmp_path: Path) -> None:
    # the search's next commit is the one a prefetch is stalled on: its measurement waits on
    # that prefetch, and a Ctrl-C (the measurement's cancel) must end the wait. Before, the
    # wait ignored it and the run's shutdown waited for the download's deadline (an hour):
    # the hang of `test_one_ctrl_c_ends_a_run_with_a_stalled_prefetch` in a full run
    from vllm_bisect.builders.base import prepare
    from vllm_bisect.builders.cache import ArtifactCache
    from vllm_bisect.builders.prefetch import Prefetcher
    from vllm_bisect.builders.wheel import WheelBuilder
    from vllm_bisect.envinfo import Platform
    from vllm_bisect.errors import Cancelled
    from vllm_bisect.spec import WheelBuild

    h = history(tmp_path, n_commits=3)
    co = Checkouts(open_repo(h.path), tmp_path / "build-cache")
    root = tmp_path / "index"
    mid = h.shas[1]
    publish(root, mid, {"default": [build_wheel(co.get(mid), tmp_path / "w", X86)]})
    handler: type[Stalling] = type("H", (Stalling,), {"stall": (mid,),
                                      "stalled": threading.Event(), "stop": threading.Event()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    builder = WheelBuilder(WheelBuild(index_url=url, variant="default"),  # type: ignore[arg-type]
                           ArtifactCache(tmp_path / "cache"), tmp_path / "logs",
                           platform=Platform(machine="x86_64", glibc=(2, 36)))
    pre = Prefetcher(builder, workers=1)
    cancel = threading.Event()
    got: list[BaseException | object] = []

    def measure() -> None:
        try:
            got.append(prepare(pre, mid, cancel))  # as the evaluator calls it
        except BaseException as err:
            got.append(err)

    try:
        pre.prefetch([mid])
        assert handler.stalled.wait(120), "the prefetch never asked for the wheel"
        waiter = threading.Thread(target=measure, daemon=True)
        waiter.start()
        cancel.set()
        waiter.join(120)  # bounds the suite only: before, the wait lasted the download's hour
        assert not waiter.is_alive(), "the measurement still waits on the stalled prefetch"
        assert len(got) == 1 and isinstance(got[0], Cancelled), got
    finally:
        handler.stop.set()
        pre.close()
        httpd.shutdown()
        httpd.server_close()
