"""explain's profiler switch (``POST /start_profile`` / ``/stop_profile``) against a real local
server that misbehaves: a 1 GiB error body is not read whole (the first 4 KiB are), and a
dripped answer ends at the call's total deadline, not 30 minutes per read."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vllm_bisect.errors import ProbeError
from vllm_bisect.explain.launch import Profiled
from vllm_bisect.runtime.base import ServerHandle


@contextlib.contextmanager
def server(mode: str) -> Iterator[tuple[str, list[int]]]:
    sent = [0]
    stop = threading.Event()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                if mode == "huge":  # 500 with a 1 GiB body
                    self.send_response(500)
                    self.send_header("Content-Length", str(1 << 30))
                    self.end_headers()
                    block = b"e" * (1 << 20)
                    while sent[0] < 1 << 30 and not stop.is_set():
                        self.wfile.write(block)
                        sent[0] += len(block)
                else:  # the status line and headers, a byte every 0.2 s
                    for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 5000 + b"\r\n\r\n":
                        if stop.is_set():
                            return
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                        sent[0] += 1
                        time.sleep(0.2)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", sent
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


def test_a_huge_error_body_is_not_read_whole() -> None:
    with server("huge") as (url, sent):
        with pytest.raises(ProbeError, match=r"answered 500: e{10}"):
            Profiled([])._post(ServerHandle(url=url, model="m"), "/start_profile", 60.0)
        time.sleep(0.5)
        assert sent[0] < 256 << 20, sent[0]   # the client closed long before 1 GiB


def test_a_dripped_answer_ends_at_the_deadline() -> None:
    with server("drip") as (url, _):
        started = time.monotonic()
        with pytest.raises(ProbeError, match="did not answer within 2 s"):
            Profiled([])._post(ServerHandle(url=url, model="m"), "/stop_profile", 2.0)
        assert time.monotonic() - started < 60   # the drip alone lasts 1000 s
