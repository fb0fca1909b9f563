"""Which connections the bot keeps: header deadlines, a per-client cap, idle ones evicted first.

uvicorn's ``limit_concurrency`` counts every open connection, idle ones included, and answers
503 to every request once the count is reached: 80 sockets that connect and say nothing
(slow-loris), reconnecting as they are closed, kept ``/healthz`` and signed deliveries at 503
for the whole attack. Here instead:

- a connection must send a complete request head within ``header_timeout_s`` of opening (or
  of its last response), else it is closed;
- one client address keeps at most ``per_client`` connections: a new one evicts that client's
  oldest idle connection (one with no request in progress), or is refused with a 503;
- at most ``total`` connections are open: a new one evicts the oldest idle connection of
  any client, or is refused with a 503 when every open connection is serving a request.

So idle and slow-header sockets can never starve a client that sends its request at once (a
health check, a GitHub delivery).

A request whose head came complete but whose body drips (slow-body loris: 80 addresses each
holding one such request kept ``/healthz`` at 503 for 40 of 40 probes) counts as evictable
too, after the idle ones: one still sending its body ``SLOW_GRACE_S`` after its head, at
under ``MIN_BODY_RATE`` bytes a second, slowest first, then a younger one that slow. A
connection opened under ``SLOW_GRACE_S`` ago with no request yet (a health check on its way)
goes only after those. Bytes waiting unread in the socket (the event loop is behind, not the
client) count as arrived: a body that has all arrived is not slow. A request whose body has
arrived (it is being handled) is never evicted.

A new connection counts (and may evict another) only once its request head has come, or
``HEAD_GRACE_S`` after it opened, whichever is first; until then it is pending, at most
``PENDING_PER_TOTAL`` x ``total`` at once (beyond that a new one counts at once, as before).
Counted at once, a health check from an address that 80 idle sockets kept reopening from
was, before its head was read, the oldest "idle" connection of its address: evicted with a
503 (issue 49: 1-10 of 80 /healthz, 0-3 signed pings).

A refused connection, or an evicted one whose request has not come yet, gets a 503 (with
``Retry-After``), then a lingering close: our side is shut for writing and the client's
request is read and dropped for up to ``LINGER_S`` before the socket closes. Closing at once,
with the client's request unread, sent a reset that discarded the 503: in a burst of 300
signed deliveries, 29-43 got no HTTP answer at all. A request head that does not come within
``header_timeout_s`` gets a 408 the same way.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import struct
import termios
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)
RETRY_AFTER_S = 5
REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n"
           b"retry-after: %d\r\ncontent-length: 20\r\nconnection: close\r\n\r\n"
           b"Too many connections" % RETRY_AFTER_S)
TIMED_OUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
             b"content-length: 15\r\nconnection: close\r\n\r\nRequest timeout")
SLOW_GRACE_S = 1.0      # a body may take this long before its rate counts
YOUNG_BODY_S = 0.1      # ... and a younger one (second in line) at least this long: a body
#                         whose head came a millisecond ago has no rate yet (a signed ping
#                         from an address 80 idle sockets kept reopening from was evicted as
#                         "slow" before they were: 1 of 5 pings 503 in a full test run)
MIN_BODY_RATE = 1024.0  # bytes a second: a slower body may be evicted when room is needed
LINGER_S = 2.0          # a refused connection's request is read and dropped this long
HEAD_GRACE_S = 0.25     # a new connection's head may take this long before it counts
PENDING_PER_TOTAL = 4   # connections not counted yet: at most this many times ``total``


class Admission:
    """The open connections in arrival order (event loop only) and the refusal count."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = total, per_client
        self.open: dict[Any, str] = {}      # protocol -> client address, oldest first
        self.pending = 0                    # connections not counted yet (no head yet)
        self.refused = self.evicted = 0
        self.last_warning = -60.0

    @staticmethod
    def _idle(conn: Any) -> bool:
        return conn.cycle is None or bool(conn.cycle.response_complete)

    @staticmethod
    def _pending(conn: Any) -> int:
        """The bytes the client sent that the event loop has not read yet."""
        try:
            fd = int(conn.transport.get_extra_info("socket").fileno())
            pending: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
        except (AttributeError, OSError, ValueError):
            return 0
        return pending

    @classmethod
    def _waiting(cls, conn: Any) -> bool:
        """Has the client sent bytes the event loop has not read yet?"""
        return cls._pending(conn) > 0

    @staticmethod
    def _length(conn: Any) -> int | None:
        """The current request's Content-Length, None without one (chunked)."""
        for key, value in getattr(conn, "headers", None) or ():
            if key == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return None
        return None

    @classmethod
    def _slow_body(cls, conn: Any, now: float, grace: float) -> float | None:
        """The body rate of a request still sending its body slowly (``grace`` seconds after
        its head); None for any other. Bytes waiting unread in the socket count as arrived
        (the event loop is behind, not the client): a body that has all arrived is never
        slow, and a loris's dripped byte left unread by a busy loop does not make it fast
        (on a loaded machine that kept every loris unevictable: /healthz 503). A chunked
        body with bytes waiting is not slow (its end cannot be told)."""
        head_at = getattr(conn, "head_at", None)
        if head_at is None or conn.conn.their_state is not h11.SEND_BODY:
            return None
        pending, length = cls._pending(conn), cls._length(conn)
        got = conn.body_bytes + pending
        if (length is not None and got >= length) or (length is None and pending > 0):
            return None
        rate = float(got) / max(now - head_at, 1e-6)
        return rate if now - head_at >= grace and rate < MIN_BODY_RATE else None

    def _victim(self, pool: list[Any]) -> Any | None:
        """The oldest idle connection (but one opened under ``SLOW_GRACE_S`` ago, whose
        request may be on its way), else the slowest body past ``SLOW_GRACE_S``, then past
        ``YOUNG_BODY_S``, else the oldest fresh connection with nothing sent, else the
        slowest body younger still."""
        now = time.monotonic()
        idle = [c for c in pool if self._idle(c)]
        settled = next((c for c in idle if (now - getattr(c, "opened_at", 0.0) >= SLOW_GRACE_S
                                            or c.cycle is not None) and not self._waiting(c)),
                       None)
        if settled is not None:
            return settled

        def slowest(grace: float) -> Any | None:
            slow = [(r, i) for i, c in enumerate(pool)
                    if (r := self._slow_body(c, now, grace)) is not None]
            return pool[min(slow)[1]] if slow else None

        for grace in (SLOW_GRACE_S, YOUNG_BODY_S):   # (a young slow body too, before a
            if (body := slowest(grace)) is not None:   # fresh socket)
                return body
        # a fresh connection whose request waits unread in its socket (the loop is behind a
        # storm of reconnects from its own address) is a client about to be served: the
        # oldest fresh one with nothing sent goes first (issue 49: 80 idle sockets from the
        # prober's address evicted 1-10 of 80 /healthz probes this way), then a body whose
        # head came under YOUNG_BODY_S ago (slow-body loris reconnecting)
        quiet = next((c for c in idle if not self._waiting(c)), None)
        if quiet is None:
            quiet = slowest(0.0)
        return quiet or (idle[0] if idle else None)   # (it gets a 503: sent, never silence)

    def admit(self, conn: Any, client: str) -> bool:
        """Room for ``conn`` from ``client``: evict an idle connection if needed, else the
        slowest body; False when every connection that would have to go is serving a
        request."""
        mine = [c for c, who in self.open.items() if who == client]
        pool = mine if len(mine) >= self.per_client else (
            list(self.open) if len(self.open) >= self.total else [])
        if pool:
            victim = self._victim(pool)
            if victim is None:
                self.refused += 1
                self._warn()
                return False
            self.evicted += 1
            self.open.pop(victim, None)
            victim.shed()
        self.open[conn] = client
        return True

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self.last_warning >= 60.0:
            self.last_warning = now
            logger.warning("connection limit reached: %d connections refused, %d idle ones "
                           "evicted so far", self.refused, self.evicted)

    def gone(self, conn: Any) -> None:
        self.open.pop(conn, None)


def guarded_protocol(header_timeout_s: float, total: int = 64,
                     per_client: int = 16) -> type[H11Protocol]:
    """uvicorn's h11 protocol under :class:`Admission` and a request-head deadline (uvicorn
    has none, so idle or slow-header connections would stay open)."""
    admission = Admission(total, per_client)

    class Guarded(H11Protocol):
        refused = False
        pending = False                # opened, not counted yet (its head has not come)
        opened_at = 0.0
        head_at: float | None = None   # when the current request's head was complete
        body_bytes = 0                 # bytes received since
        _seen: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self.opened_at = time.monotonic()
            self._arm()
            if admission.pending < PENDING_PER_TOTAL * admission.total:   # counts at its head
                self.pending = True
                admission.pending += 1
                self.loop.call_later(HEAD_GRACE_S, self._count)
            else:
                self._count()

        def _count(self) -> None:
            """This connection counts from now: room is made for it, or it is refused."""
            if self.pending:
                self.pending = False
                admission.pending -= 1
            elif self in admission.open or self.refused:
                return
            if self.refused or self.transport.is_closing():
                return
            if not admission.admit(self, self.client[0] if self.client else ""):
                self.shed()

        def shed(self) -> None:
            """Let this connection go: with no request yet, or a (slow) body still coming, a
            503 and a lingering close (the client's bytes are read and dropped, so no reset
            discards the 503; the app sees a disconnect and writes nothing); idle after a
            response, a lingering close."""
            if self.refused or self.transport.is_closing():
                return
            self.refused = True
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                if cycle.response_started:   # (never chosen: only bodies still coming are)
                    self.transport.close()
                    return
                cycle.disconnected = True    # as uvicorn's connection_lost does
                cycle.message_event.set()
            self._linger(REFUSED if cycle is None or not cycle.response_complete else b"")

        def _linger(self, answer: bytes) -> None:
            try:
                self.transport.write(answer)
                if self.transport.can_write_eof():
                    self.transport.write_eof()
            except (OSError, RuntimeError):   # the client is gone already
                self.transport.close()
                return
            self.loop.call_later(LINGER_S, self.transport.close)

        def data_received(self, data: bytes) -> None:
            if self.refused:
                return
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._seen:
                self._seen, self.head_at, self.body_bytes = self.cycle, time.monotonic(), 0
            elif self.cycle is cycle:
                self.body_bytes += len(data)
            if self.pending and self.cycle is not None:   # its head came: it counts now
                self._count()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.pending:
                self.pending = False
                admission.pending -= 1
            admission.gone(self)
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self.loop.call_later(header_timeout_s, self._expire, self.cycle)

        def _expire(self, cycle: Any) -> None:
            if self.cycle is cycle and not self.transport.is_closing() and not self.refused:
                self.refused = True   # no head in time: a 408, then a lingering close
                self._linger(TIMED_OUT)

    return Guarded
