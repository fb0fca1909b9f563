"""Fixtures of the bot tests: the bot as a real process, the GitHub stand-in."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.bot.botkit import SECRET, Bot
from tests.bot.github_standin import GitHubStandIn
from tests.conftest import start_on_free_port


@pytest.fixture
def env() -> dict[str, str]:
    return {**os.environ, "VLLM_BISECT_WEBHOOK_SECRET": SECRET, "GITHUB_TOKEN": "tok-123",
            "HF_TOKEN": "hf-tok-456", "AWS_SECRET_ACCESS_KEY": "aws-789"}


@pytest.fixture
def start_bot(env: dict[str, str]) -> Iterator[Callable[[Path], Bot]]:
    bots: list[Bot] = []

    def start(config: Path) -> Bot:
        log = config.with_suffix(".log")

        def argv(port: int) -> list[str]:  # the bot reads its port from its config
            config.write_text(re.sub(r"(?m)^port = \d+$", f"port = {port}", config.read_text()))
            return [sys.executable, "-m", "vllm_bisect.cli", "bot", "serve", "--config",
                    str(config)]

        with open(log, "ab") as out:
            try:
                proc, url = start_on_free_port(argv, timeout=60.0, path="/healthz", ok=(200,),
                                               env=env, stdout=out, stderr=subprocess.STDOUT)
            except RuntimeError as err:
                raise RuntimeError(f"{err}\n{log.read_text(errors='replace')}") from None
        bot = Bot(url, proc, config, log)
        bots.append(bot)
        return bot

    yield start
    for b in bots:
        if b.proc.poll() is None:
            b.proc.send_signal(signal.SIGTERM)
            try:
                b.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait(timeout=15)


@pytest.fixture
def gh() -> Iterator[GitHubStandIn]:
    g = GitHubStandIn()
    yield g
    g.close()
