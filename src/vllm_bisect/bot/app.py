"""The webhook service (Starlette): read, verify, validate, deduplicate, hand off, acknowledge.

Nothing blocking runs on the event loop. The body is read under a deadline and a size cap;
the signature is checked before anything is parsed; the payload is validated (a mismatch is a
400 naming the field); a delivery needs ``X-GitHub-Delivery`` and is a duplicate if its id or
its body's hash was handled within ``replay_window_s`` (or is being handled now). Handling
(GitHub calls, SQLite, triage) runs in a thread pool; the webhook waits for it at most
``ack_wait_s`` and then answers 202. A delivery is recorded only once it was handled, so
GitHub's redelivery of one that failed is handled again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import re
from concurrent.futures import ThreadPoolExecutor

import anyio.to_thread
import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.github import GitHub
from vllm_bisect.bot.handler import Handler, Outcome
from vllm_bisect.bot.payload import (
    Event,
    EventKind,
    ValidationError,
    parse_event,
    validation_summary,
)
from vllm_bisect.bot.queue import JobQueue

logger = logging.getLogger(__name__)
DELIVERY = re.compile(r"^[A-Za-z0-9-]{1,64}$")
CLOSE = {"Connection": "close"}  # the rest of the body is not read: do not reuse


class BodyTooLarge(Exception):
    pass


def signature_ok(secret: bytes, body: bytes, header: str | None) -> bool:
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header)


WEBHOOK_PATH = "/webhook"   # GitHub's webhook "Payload URL": http(s)://HOST:PORT/webhook
HEALTH_PATH = "/healthz"


class BotApp:
    def __init__(self, cfg: BotConfig, queue: JobQueue, github: GitHub) -> None:
        self.cfg = cfg
        self.queue = queue
        self.handler = Handler(cfg, queue, github)
        self.secret = cfg.secret()
        self.pool = ThreadPoolExecutor(cfg.handler_threads, thread_name_prefix="bot-hook")
        self.inflight: set[str] = set()   # keys being handled (event loop only)
        self.pending = 0
        self.app = Starlette(routes=[Route(WEBHOOK_PATH, self.webhook, methods=["POST"]),
                                     Route(HEALTH_PATH, self.health, methods=["GET"])])

    async def health(self, request: Request) -> Response:
        return JSONResponse({"ok": True, "pending": self.pending})

    async def _read_body(self, request: Request) -> bytes:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.cfg.max_body_bytes):
            raise BodyTooLarge
        body = bytearray()
        async with asyncio.timeout(self.cfg.body_timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > self.cfg.max_body_bytes:
                    raise BodyTooLarge
        return bytes(body)

    async def webhook(self, request: Request) -> Response:
        try:
            body = await self._read_body(request)
        except BodyTooLarge:
            return JSONResponse({"error": "body too large"}, status_code=413, headers=CLOSE)
        except TimeoutError:
            return JSONResponse({"error": f"body not received within "
                                          f"{self.cfg.body_timeout_s:.0f} s"},
                                status_code=408, headers=CLOSE)
        except ClientDisconnect:
            return Response(status_code=400, headers=CLOSE)  # nobody is listening
        if not signature_ok(self.secret, body, request.headers.get("x-hub-signature-256")):
            return JSONResponse({"error": "bad signature"}, status_code=401)
        delivery = request.headers.get("x-github-delivery", "")
        if not DELIVERY.match(delivery):
            return JSONResponse({"error": "X-GitHub-Delivery header missing or malformed"},
                                status_code=400)
        try:
            kind = EventKind(request.headers.get("x-github-event", ""))
        except ValueError:
            return JSONResponse({"status": "ignored"})
        try:
            event = parse_event(kind, body)
        except ValidationError as err:
            return JSONResponse({"error": f"not a valid {kind.value} payload: "
                                          f"{validation_summary(err)}"}, status_code=400)
        return await self._dispatch(event, [f"d:{delivery}",
                                            "b:" + hashlib.sha256(body).hexdigest()])

    async def _dispatch(self, event: Event, keys: list[str]) -> Response:
        duplicate = JSONResponse({"status": "duplicate delivery"})
        if self.inflight.intersection(keys):
            return duplicate
        if self.pending >= self.cfg.max_pending:
            return JSONResponse({"error": "busy; redeliver later"}, status_code=503,
                                headers={"Retry-After": "5"})
        self.inflight.update(keys)
        self.pending += 1
        loop = asyncio.get_running_loop()

        def done(_: object = None) -> None:
            self.inflight.difference_update(keys)
            self.pending -= 1

        try:
            seen = await anyio.to_thread.run_sync(self.queue.seen, keys,
                                                  self.cfg.replay_window_s)
        except BaseException:
            done()
            raise
        if seen:
            done()
            return duplicate
        fut = self.pool.submit(self._handle, event, keys)

        def finished(_: object) -> None:  # in the pool thread
            with contextlib.suppress(RuntimeError):  # the loop closed: shutting down
                loop.call_soon_threadsafe(done)

        fut.add_done_callback(finished)
        handled = asyncio.wrap_future(fut)
        # after an early 202 nobody awaits it: mark its exception retrieved (it was logged)
        handled.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            outcome = await asyncio.wait_for(asyncio.shield(handled), self.cfg.ack_wait_s)
        except TimeoutError:
            return JSONResponse({"status": "accepted"}, status_code=202)
        except Exception:
            return JSONResponse({"error": "handling failed (see the bot's log); the delivery "
                                          "was not recorded, so a redelivery is handled"},
                                status_code=502)
        return JSONResponse(outcome.body(), status_code=outcome.code)

    def _handle(self, event: Event, keys: list[str]) -> Outcome:
        """In a pool thread: handle, then record the delivery (not when handling failed)."""
        try:
            outcome = self.handler.handle(event)
        except httpx.HTTPError as err:
            logger.warning("delivery not handled, a GitHub call failed (%s: %s); not "
                           "recorded, so a redelivery is handled", type(err).__name__, err)
            raise
        except Exception:
            logger.exception("delivery not handled; not recorded, so a redelivery is handled")
            raise
        self.queue.record(keys, self.cfg.replay_window_s)
        return outcome

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

