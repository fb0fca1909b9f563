"""Run the bot: workers, then uvicorn with read deadlines and connection admission."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import uvicorn

from vllm_bisect.bot.admission import guarded_protocol
from vllm_bisect.bot.app import BotApp
from vllm_bisect.bot.config import BotConfig
from vllm_bisect.bot.github import GitHub
from vllm_bisect.bot.queue import JobQueue
from vllm_bisect.bot.worker import Worker

logger = logging.getLogger(__name__)


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
        http=guarded_protocol(cfg.header_timeout_s, cfg.max_connections,
                              cfg.max_connections_per_client),
        timeout_keep_alive=int(cfg.keep_alive_s),
        limit_concurrency=None,  # admission.py: idle connections are evicted, not counted
        h11_max_incomplete_event_size=cfg.max_header_bytes, timeout_graceful_shutdown=5)
    logging.getLogger("uvicorn.error").addFilter(OncePerMinute())
    try:
        uvicorn.Server(config).run()
    finally:
        for w in workers:
            w.stopping.set()
        bot.close()
        github.close()
