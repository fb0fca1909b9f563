"""Bounds on what a server may send the probe: a total deadline per request, a line-length
cap for SSE and a size cap for ``/metrics``.

httpx's ``read`` timeout is per read, so a server that sends one byte every few seconds, or
streams forever, never trips it. :func:`deadline_guard` arms a timer that shuts the
response's socket down when the request's total time is up (the blocked read then returns),
and :func:`bounded_bytes` checks the deadline between received chunks.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable, Iterator

import httpx

from vllm_bisect.errors import StreamFormatError

MAX_LINE_BYTES = 1 << 20        # one SSE line (a chunk with logprobs is a few KB)
MAX_METRICS_BYTES = 32 << 20    # vLLM's /metrics is well under 1 MB


class DeadlineExceeded(Exception):
    """The request's total deadline passed (internal: the probe turns it into a ProbeError)."""


@contextlib.contextmanager
def deadline_guard(response: httpx.Response, seconds: float) -> Iterator[threading.Event]:
    """Shut the response's socket down after ``seconds``; the yielded event tells whether
    that happened."""
    fired = threading.Event()
    stream = response.extensions.get("network_stream")
    sock = None
    with contextlib.suppress(Exception):
        sock = stream.get_extra_info("socket") if stream is not None else None

    def fire() -> None:
        fired.set()
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(max(0.0, seconds), fire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


def bounded_bytes(chunks: Iterable[bytes], end: float,
                  fired: threading.Event | None = None) -> Iterator[bytes]:
    """Pass chunks through until ``time.monotonic()`` passes ``end``; a stream that ended
    because ``deadline_guard`` shut it down (``fired``) raises DeadlineExceeded too."""
    try:
        for chunk in chunks:
            if time.monotonic() > end:
                raise DeadlineExceeded
            yield chunk
    except httpx.HTTPError:
        if fired is not None and fired.is_set():
            raise DeadlineExceeded from None
        raise
    if fired is not None and fired.is_set():
        raise DeadlineExceeded


def split_lines(chunks: Iterable[bytes], max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """Lines of a byte stream (``\\n`` or ``\\r\\n``), refusing any longer than the cap."""
    buf = bytearray()
    for chunk in chunks:
        buf += chunk
        start = 0
        while (i := buf.find(b"\n", start)) >= 0:
            if i - start > max_line_bytes:
                raise _too_long(max_line_bytes)
            yield buf[start:i].rstrip(b"\r").decode("utf-8", errors="replace")
            start = i + 1
        del buf[:start]
        if len(buf) > max_line_bytes:
            raise _too_long(max_line_bytes)
    if buf:
        yield buf.rstrip(b"\r").decode("utf-8", errors="replace")


def _too_long(cap: int) -> StreamFormatError:
    return StreamFormatError(f"SSE line longer than {cap} bytes",
                             hint="the server is not speaking vLLM's streaming format")


def read_capped(response: httpx.Response, cap: int, end: float,
                fired: threading.Event | None = None) -> bytes | None:
    """The body, or None when it is larger than ``cap`` bytes."""
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        return None
    out = bytearray()
    for chunk in bounded_bytes(response.iter_bytes(), end, fired):
        out += chunk
        if len(out) > cap:
            return None
    return bytes(out)
