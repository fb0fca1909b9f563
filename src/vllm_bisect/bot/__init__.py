"""The GitHub bot: webhook service, job queue and worker."""

from __future__ import annotations

import logging
from pathlib import Path

from vllm_bisect.bot.app import BotApp
from vllm_bisect.bot.config import BotConfig, load_config
from vllm_bisect.bot.github import GitHub
from vllm_bisect.bot.queue import JobQueue
from vllm_bisect.bot.worker import Worker

__all__ = ["BotApp", "BotConfig", "load_config", "serve"]
logger = logging.getLogger(__name__)


def serve(cfg: BotConfig) -> None:
    import uvicorn

    Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    queue = JobQueue(Path(cfg.state_dir) / "jobs.sqlite", cfg.max_queue)
    github = GitHub(cfg.github_api_url, cfg.token())
    bot = BotApp(cfg, queue, github)
    workers = [Worker(cfg, queue, github) for _ in range(cfg.workers)]
    for w in workers:
        w.start()
    try:
        uvicorn.run(bot.app, host=cfg.host, port=cfg.port, log_level="warning")
    finally:
        for w in workers:
            w.stopping.set()
        github.close()
