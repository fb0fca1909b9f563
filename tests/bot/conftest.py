"""Fixtures of the bot tests: the bot as a real process, the GitHub stand-in."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.bot.botkit import SECRET, Bot
from tests.bot.github_standin import GitHubStandIn
from vllm_bisect.runtime.ports import Ownership, check_port, free_port


@pytest.fixture
def env() -> dict[str, str]:
    return {**os.environ, "VLLM_BISECT_WEBHOOK_SECRET": SECRET, "GITHUB_TOKEN": "tok-123",
            "HF_TOKEN": "hf-tok-456", "AWS_SECRET_ACCESS_KEY": "aws-789"}


@pytest.fixture
def start_bot(env: dict[str, str]) -> Iterator[Callable[[Path], Bot]]:
    bots: list[Bot] = []

    def start(config: Path) -> Bot:
        for _ in range(3):
            bot = launch(config)
            bots.append(bot)
            if wait_up(bot):
                return bot
            # another test's server took the port first: the bot could not bind it
            text = config.read_text()
            config.write_text(re.sub(r"(?m)^port = \d+$", f"port = {free_port()}", text))
        raise RuntimeError("the bot's port was taken three times")

    def launch(config: Path) -> Bot:
        port = int(next(ln for ln in config.read_text().splitlines()
                        if ln.startswith("port")).split("=")[1])
        log = config.with_suffix(".log")
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "vllm_bisect.cli", "bot", "serve",
                                     "--config", str(config)], env=env, start_new_session=True,
                                    stdout=out, stderr=subprocess.STDOUT)
        return Bot(f"http://127.0.0.1:{port}", proc, config, log)

    def wait_up(bot: Bot) -> bool:
        """True once the bot answers /healthz from its own port; False when it exited while
        another process held that port."""
        port = int(bot.url.rsplit(":", 1)[1])
        for _ in range(300):
            if bot.proc.poll() is not None:
                if check_port(port, bot.proc.pid).ownership is Ownership.OTHER:
                    return False
                break
            try:
                if httpx.get(bot.url + "/healthz", timeout=1).status_code == 200 and \
                        check_port(port, bot.proc.pid).ownership is not Ownership.OTHER:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(bot.output() or "bot did not start")

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
