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
health check, a GitHub delivery). Requests that are in progress are bounded by the body
deadline and ``max_pending`` (the app), not by eviction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)
REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n"
           b"content-length: 20\r\nconnection: close\r\n\r\nToo many connections")


class Admission:
    """The open connections in arrival order (event loop only) and the refusal count."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = total, per_client
        self.open: dict[Any, str] = {}      # protocol -> client address, oldest first
        self.refused = self.evicted = 0
        self.last_warning = -60.0

    @staticmethod
    def _idle(conn: Any) -> bool:
        return conn.cycle is None or bool(conn.cycle.response_complete)

    def admit(self, conn: Any, client: str) -> bool:
        """Room for ``conn`` from ``client``: evict an idle connection if needed; False when
        every connection that would have to go is serving a request."""
        mine = [c for c, who in self.open.items() if who == client]
        pool = mine if len(mine) >= self.per_client else (
            list(self.open) if len(self.open) >= self.total else [])
        if pool:
            victim = next((c for c in pool if self._idle(c)), None)
            if victim is None:
                self.refused += 1
                self._warn()
                return False
            self.evicted += 1
            self.open.pop(victim, None)
            victim.transport.close()
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
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not admission.admit(self, self.client[0] if self.client else ""):
                transport.write(REFUSED)
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            admission.gone(self)
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self.loop.call_later(header_timeout_s, self._expire, self.cycle)

        def _expire(self, cycle: Any) -> None:
            if self.cycle is cycle and not self.transport.is_closing():
                self.transport.close()

    return Guarded
