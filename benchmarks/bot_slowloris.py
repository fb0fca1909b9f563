"""/healthz latency of the live bot under slow-loris (issue 26).

    python3 benchmarks/bot_slowloris.py [--sockets 80] [--probes 100] [--reconnect-s 0.05]
                                        [--body] [--burst 300]

Starts ``vllm-bisect bot serve`` on 127.0.0.1 (a GitHub stand-in, a 3-commit synthetic
history), then asks /healthz ``--probes`` times on fresh connections from 127.0.0.1: with no
attack, with ``--sockets`` idle or slow-header sockets from one address (127.0.0.2), and
from ``--sockets`` addresses (127.0.0.2..), each socket reopened as soon as it is closed.
Prints median and max latency, non-200 answers, and three signed deliveries per row.
``--body``: the sockets send a complete signed head, then drip the body (slow-body loris).
``--burst N``: then N signed deliveries at once; prints what each got (no answer at all is
a transport error: ReadError, RemoteProtocolError).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.bot.botkit import SECRET, Bot, write_config
from tests.bot.github_standin import GitHubStandIn
from tests.bot.loris import SlowLoris
from tests.helpers import history


def start(config: Path) -> Bot:
    port = int(next(ln for ln in config.read_text().splitlines()
                    if ln.startswith("port")).split("=")[1])
    env = {**os.environ, "VLLM_BISECT_WEBHOOK_SECRET": SECRET}
    log = config.with_suffix(".log")
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "vllm_bisect.cli", "bot", "serve",
                                 "--config", str(config)], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    bot = Bot(f"http://127.0.0.1:{port}", proc, config, log)
    for _ in range(300):
        try:
            if httpx.get(bot.url + "/healthz", timeout=1).status_code == 200:
                return bot
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(bot.output())


def probe(bot: Bot, n: int) -> tuple[list[float], int]:
    lat, bad = [], 0
    for _ in range(n):
        t = time.monotonic()
        try:
            ok = httpx.get(bot.url + "/healthz", timeout=30).status_code == 200
        except httpx.HTTPError:
            ok = False
        lat.append(time.monotonic() - t)
        bad += not ok
    return lat, bad


def row(name: str, bot: Bot, n: int) -> str:
    lat, bad = probe(bot, n)
    pongs = sum(bot.send("ping", {"zen": f"{name} {i} {time.time()}"}).status_code == 200
                for i in range(3))
    return (f"| {name} | {statistics.median(lat) * 1000:.0f} ms | {max(lat) * 1000:.0f} ms | "
            f"{bad}/{n} | {pongs}/3 |")


def burst(bot: Bot, n: int) -> dict[str, int]:
    """n signed pings at once (one thread each): what each got."""
    import json
    import threading
    import uuid
    from collections import Counter

    from tests.bot.botkit import sign

    got: Counter[str] = Counter()
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        body = json.dumps({"zen": f"burst {i} {time.time()}"}).encode()
        headers = {"X-GitHub-Event": "ping", "X-GitHub-Delivery": str(uuid.uuid4()),
                   "X-Hub-Signature-256": sign(body)}
        barrier.wait()
        try:
            r = httpx.post(bot.url + "/webhook", content=body, headers=headers, timeout=120)
            got[f"{r.status_code} retry-after={r.headers.get('retry-after')}"
                if r.status_code == 503 else str(r.status_code)] += 1
        except httpx.HTTPError as err:
            got[type(err).__name__] += 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return dict(got)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sockets", type=int, default=80)
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--reconnect-s", type=float, default=0.05)
    ap.add_argument("--body", action="store_true")
    ap.add_argument("--burst", type=int, default=0)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        gh = GitHubStandIn()
        h = history(Path(tmp), n_commits=3)
        bot = start(write_config(Path(tmp) / "bot.toml", gh, h, Path(tmp) / "state",
                                 workers=0))
        port = int(bot.url.rsplit(":", 1)[1])
        try:
            print("| attack | /healthz median | /healthz max | non-200 | signed pings | "
                  "attacker |\n|---|---|---|---|---|---|")
            print(row("none", bot, a.probes) + " - |", flush=True)
            for name, sources in ((f"{a.sockets} sockets, one address", ["127.0.0.2"]),
                                  (f"{a.sockets} sockets, {a.sockets} addresses",
                                   [f"127.0.0.{i}" for i in range(2, 2 + a.sockets)])):
                with SlowLoris("127.0.0.1", port, a.sockets, sources,
                               reconnect_s=a.reconnect_s, body=a.body) as attack:
                    line = row(name, bot, a.probes)
                print(f"{line} {attack.opened} opened, {attack.reconnects} closed by the bot |",
                      flush=True)
            if a.burst:
                print(f"burst of {a.burst} signed deliveries: {burst(bot, a.burst)}")
        finally:
            bot.proc.send_signal(signal.SIGTERM)
            bot.proc.wait(timeout=30)
            gh.close()


if __name__ == "__main__":
    main()
