"""A small asyncio HTTP/1.1 server that frames responses the way uvicorn does for vLLM.

Header order and spelling follow the captured vLLM 0.25.1 responses: ``date``, ``server:
uvicorn``, then the app's headers, ``Transfer-Encoding: chunked`` for streams, and
``Connection: close`` when the client asked for it. Keep-alive is honoured otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

logger = logging.getLogger(__name__)

MAX_BODY = 8 * 1024 * 1024
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           413: "Request Entity Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode() or "null")


@dataclass
class Responder:
    """Writes one response on a connection."""

    writer: asyncio.StreamWriter
    close_after: bool
    started: bool = False
    chunked: bool = False
    extra_headers: list[tuple[str, str]] = field(default_factory=list)

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}",
                 f"date: {formatdate(usegmt=True)}", "server: uvicorn"]
        lines += [f"{k}: {v}" for k, v in headers]
        if self.close_after:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def send(self, status: int, body: bytes, content_type: str | None = None) -> None:
        headers = [("content-length", str(len(body)))]
        if content_type:
            headers.append(("content-type", content_type))
        headers.append(("vary", "Origin"))
        self.writer.write(self._head(status, headers) + body)
        self.started = True
        await self.writer.drain()

    async def send_json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        await self.send(status, body, "application/json")

    async def start_stream(self, content_type: str = "text/event-stream; charset=utf-8") -> None:
        headers = [("content-type", content_type), ("vary", "Origin"),
                   ("Transfer-Encoding", "chunked")]
        self.writer.write(self._head(200, headers))
        self.started = self.chunked = True
        await self.writer.drain()

    async def write_chunk(self, data: bytes) -> None:
        if data:
            self.writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await self.writer.drain()

    async def end_stream(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()

    async def write_raw(self, data: bytes) -> None:
        """Bytes exactly as given (the replay server sends captured framing)."""
        self.writer.write(data)
        self.started = True
        await self.writer.drain()


Handler = Callable[[Request, Responder], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        line = await reader.readline()
    except (ConnectionError, asyncio.IncompleteReadError):
        return None
    if not line:
        return None
    parts = line.decode("latin-1").strip().split()
    if len(parts) != 3:
        raise ValueError("malformed request line")
    method, target, _version = parts
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    if length > MAX_BODY:
        raise ValueError("body too large")
    body = await reader.readexactly(length) if length else b""
    return Request(method=method.upper(), path=target.split("?", 1)[0], headers=headers, body=body)


def serve_connection(handler: Handler) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                                                   Awaitable[None]]:
    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    req = await _read_request(reader)
                except (ValueError, asyncio.IncompleteReadError):
                    resp = Responder(writer, close_after=True)
                    await resp.send_json(400, {"error": {"message": "malformed HTTP request",
                                                         "type": "BadRequestError",
                                                         "param": None, "code": 400}})
                    break
                if req is None:
                    break
                close = req.headers.get("connection", "").lower() == "close"
                resp = Responder(writer, close_after=close)
                await handler(req, resp)
                if resp.close_after:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a handler bug must not kill the server
            logger.exception("request handler failed")
        finally:
            with contextlib.suppress(Exception):
                writer.close()
    return on_connection


async def start(handler: Handler, host: str, port: int) -> asyncio.Server:
    return await asyncio.start_server(serve_connection(handler), host, port, reuse_address=True)
