"""The GitHub bot: webhook service, job queue and worker."""

from __future__ import annotations

from vllm_bisect.bot.config import BotConfig, load_config

__all__ = ["BotConfig", "load_config", "serve"]


def serve(cfg: BotConfig) -> None:
    """Run the webhook service and the workers until stopped (imports the server lazily:
    the triage child imports this package and needs none of it)."""
    from vllm_bisect.bot.server import serve as run

    run(cfg)
