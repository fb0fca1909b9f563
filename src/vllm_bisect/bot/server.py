"""Run the bot: workers, then uvicorn with read deadlines and a connection limit."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from vllm_bisect.bot.app import BotApp
from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.github import GitHub
from vllm_bisect.bot.queue import JobQueue
from vllm_bisect.bot.worker import Worker

logger = logging.getLogger(__name__)


def guarded_protocol(header_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing a connection that has not sent a complete request
    head within header_timeout_s of opening (or of its last response): uvicorn itself has
    no such deadline, so idle or slow-header connections would stay open."""

    class Guarded(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def _arm(self) -> None:
            self.loop.call_later(header_timeout_s, self._expire, self.cycle)

        def _expire(self, cycle: Any) -> None:
            if self.cycle is cycle and not self.transport.is_closing():
                self.transport.close()

    return Guarded


class OncePerMinute(logging.Filter):
    """uvicorn warns once per refused connection; a flood would write one line each."""

    MESSAGE = "Exceeded concurrency limit."

    def __init__(self) -> None:
        super().__init__()
        self.last = -60.0
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != self.MESSAGE:
            return True
        now = time.monotonic()
        if now - self.last < 60.0:
            self.dropped += 1
            return False
        record.msg, record.args = (f"{self.MESSAGE} ({self.dropped} more connections refused "
                                   "since the last warning)" if self.dropped else self.MESSAGE,
                                   None)
        self.last, self.dropped = now, 0
        return True


def serve(cfg: BotConfig) -> None:
    Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    queue = JobQueue(Path(cfg.state_dir) / "jobs.sqlite", cfg.max_queue)
    github = GitHub(cfg.github_api_url, cfg.token(), timeout_s=cfg.github_timeout_s)
    bot = BotApp(cfg, queue, github)
    # read once; gone from our environment, so no child could inherit them even by mistake
    for name in (cfg.token_env, cfg.webhook_secret_env):
        os.environ.pop(name, None)
    workers = [Worker(cfg, queue, github) for _ in range(cfg.workers)]
    for w in workers:
        w.start()
    config = uvicorn.Config(
        bot.app, host=cfg.host, port=cfg.port, log_level="warning",
        http=guarded_protocol(cfg.header_timeout_s), timeout_keep_alive=int(cfg.keep_alive_s),
        limit_concurrency=cfg.max_connections,
        h11_max_incomplete_event_size=cfg.max_header_bytes, timeout_graceful_shutdown=5)
    logging.getLogger("uvicorn.error").addFilter(OncePerMinute())
    try:
        uvicorn.Server(config).run()
    finally:
        for w in workers:
            w.stopping.set()
        bot.close()
        github.close()
