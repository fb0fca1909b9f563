"""Fixtures of the bot tests: the bot as a real process, the GitHub stand-in."""

from __future__ import annotations

import os
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


@pytest.fixture
def env() -> dict[str, str]:
    return {**os.environ, "VLLM_BISECT_WEBHOOK_SECRET": SECRET, "GITHUB_TOKEN": "tok-123",
            "HF_TOKEN": "hf-tok-456", "AWS_SECRET_ACCESS_KEY": "aws-789"}


@pytest.fixture
def start_bot(env: dict[str, str]) -> Iterator[Callable[[Path], Bot]]:
    bots: list[Bot] = []

    def start(config: Path) -> Bot:
        port = int(next(ln for ln in config.read_text().splitlines()
                        if ln.startswith("port")).split("=")[1])
        log = config.with_suffix(".log")
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", "vllm_bisect.cli", "bot", "serve",
                                     "--config", str(config)], env=env,
                                    stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        bot = Bot(url, proc, config, log)
        bots.append(bot)
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError(bot.output() or "bot did not start")
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
