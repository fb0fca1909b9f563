"""Bounded HTTP: every read has a total deadline and a size cap, not only a per-read timeout.

httpx's timeouts are per operation: a server that drips its response headers or its body one
byte at a time, or sends a gigabyte, never trips them. :func:`stream` arms a watchdog that
shuts the request's socket down when its total deadline passes (response headers included:
the socket is taken from httpx's ``trace`` extension when the connection is made, so the
clients of :func:`client` keep no idle connection and every request makes its own), and
:func:`iter_bytes` / :func:`read` count the body against a cap. Redirects are followed only
where ``on_redirect`` allows (it raises to refuse): the wheel builder and isolate's PEP 503
client both stay on their index's origin.

One module for every network read of the tool: the wheel builder and its index
(``builders``), the probes (``/version``, the completions stream, ``/metrics``), the
server's ``/health`` wait (``runtime``) and isolate's package index client.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

MAX_REDIRECTS = 5


class NetLimitError(Exception):
    """A bounded read was stopped (internal: each caller turns it into its own error)."""


class DeadlineExceeded(NetLimitError):
    """The request's total deadline passed."""


class TooLarge(NetLimitError):
    """The body is larger than its cap."""

    def __init__(self, cap: int) -> None:
        super().__init__(f"larger than {cap} bytes")
        self.cap = cap


class TooManyRedirects(NetLimitError):
    """More than MAX_REDIRECTS redirects."""


@cache
def _tls_context(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=bool(cafile or capath))


def tls_context() -> ssl.SSLContext:
    """httpx's default verifying TLS context (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), made
    once per process: httpx makes a new one for every client, ~40 ms of CPU to load the CA
    bundle, which a client per health poll, probe and /metrics read paid over and over.
    Shared across threads (an SSLContext is safe to share)."""
    return _tls_context(os.environ.get("SSL_CERT_FILE") or None,
                        os.environ.get("SSL_CERT_DIR") or None)


def client(timeout: float | httpx.Timeout = 30.0, **kwargs: Any) -> httpx.Client:
    """An httpx client for :func:`stream`: no kept-alive connections, so every request's
    socket is its own and the watchdog can shut it down before the headers arrive. Verifies
    TLS with :func:`tls_context` unless ``verify`` is given."""
    if "verify" not in kwargs and kwargs.get("trust_env", True):
        kwargs["verify"] = tls_context()
    limits = kwargs.pop("limits", None) or httpx.Limits()
    limits = httpx.Limits(max_connections=limits.max_connections, max_keepalive_connections=0)
    return httpx.Client(timeout=timeout, limits=limits, **kwargs)


@dataclass
class Watchdog:
    """Shuts the request's socket down ``deadline_s`` after it was armed; ``fired`` says so."""

    deadline_s: float
    end: float = 0.0
    fired: threading.Event = field(default_factory=threading.Event)
    _sock: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _timer: threading.Timer | None = None

    def __post_init__(self) -> None:
        self.end = time.monotonic() + self.deadline_s

    def left(self) -> float:
        return self.end - time.monotonic()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's ``trace`` extension: remember the connection's socket (TLS too)."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            self.adopt(info.get("return_value"))

    def adopt(self, stream: Any) -> None:
        sock = None
        with contextlib.suppress(Exception):
            sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sock = sock
            if self.fired.is_set():
                self._shut()

    def _shut(self) -> None:
        with self._lock:
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _fire(self) -> None:
        self.fired.set()
        self._shut()

    def start(self) -> None:
        self._timer = threading.Timer(max(0.0, self.left()), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def check(self) -> None:
        if self.fired.is_set() or self.left() <= 0:
            raise DeadlineExceeded


@contextlib.contextmanager
def stream(http: httpx.Client, method: str, url: str, *, deadline_s: float,
           on_redirect: Callable[[str], None] | None = None,
           **kwargs: Any) -> Iterator[tuple[httpx.Response, Watchdog]]:
    """``method url`` as a streamed response, all of it (connection, headers, body, each
    redirect) within ``deadline_s``. Redirects are followed when ``on_redirect`` is given
    (called with each target first; it raises to refuse), else returned as they are.
    Raises DeadlineExceeded, TooManyRedirects, or httpx's errors."""
    dog = Watchdog(deadline_s)
    ext = {**kwargs.pop("extensions", {}), "trace": dog.trace}
    dog.start()
    try:
        for _ in range(MAX_REDIRECTS + 1):
            req = http.build_request(method, url, extensions=ext, **kwargs)
            try:
                r = http.send(req, stream=True, follow_redirects=False)
            except httpx.HTTPError:
                dog.check()
                raise
            dog.adopt(r.extensions.get("network_stream"))  # a pooled connection's socket
            if on_redirect is None or not r.is_redirect:
                try:
                    yield r, dog
                except httpx.HTTPError:
                    dog.check()
                    raise
                finally:
                    r.close()
                return
            r.close()
            url = urljoin(url, r.headers.get("location", ""))
            on_redirect(url)
            method = "GET" if r.status_code == 303 else method
        raise TooManyRedirects(f"more than {MAX_REDIRECTS} redirects, last to {url[:200]}")
    finally:
        dog.cancel()


def iter_bytes(r: httpx.Response, dog: Watchdog, max_bytes: int | None = None,
               chunk_size: int | None = None) -> Iterator[bytes]:
    """The body's chunks, stopped by the deadline (DeadlineExceeded) or past ``max_bytes``
    (TooLarge; a declared Content-Length over the cap is refused before any byte)."""
    declared = r.headers.get("content-length", "")
    if max_bytes is not None and declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(max_bytes)
    size = 0
    try:
        for chunk in r.iter_bytes(chunk_size):
            dog.check()
            size += len(chunk)
            if max_bytes is not None and size > max_bytes:
                raise TooLarge(max_bytes)
            yield chunk
    except httpx.HTTPError:
        dog.check()
        raise
    dog.check()


def read(r: httpx.Response, dog: Watchdog, max_bytes: int) -> bytes:
    """The whole body, within the deadline and the cap."""
    return b"".join(iter_bytes(r, dog, max_bytes))


def get(http: httpx.Client, url: str, *, deadline_s: float, max_bytes: int,
        on_redirect: Callable[[str], None] | None = None,
        **kwargs: Any) -> tuple[int, bytes]:
    """(status, body) of a GET, bounded in time and size."""
    with stream(http, "GET", url, deadline_s=deadline_s, on_redirect=on_redirect,
                **kwargs) as (r, dog):
        return r.status_code, read(r, dog, max_bytes)


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL with default ports filled in; None if it is
    not one."""
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        return None
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return None
    return u.scheme, u.hostname.lower(), port
